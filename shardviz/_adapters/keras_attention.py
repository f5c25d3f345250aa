"""Which attention Keras runs while it traces.

Reason: ``keras.ops.dot_product_attention`` chooses, while it traces, between
its TPU splash-attention kernel and XLA's attention, which keeps every head's
``query × key`` scores: by the platform ``jax.devices()`` answers, and
whether the mask is a value it can read (a mask computed inside the step is
not, and most keras-hub models compute theirs). It says which only in a log
line when the kernel fails. shardviz records each call, and whether the
kernel ran, by wrapping the two backend functions Keras looks up at call time
(``keras.src.backend.jax.nn.dot_product_attention`` and
``wrap_flash_attention``). Waits for Keras to expose the choice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import threading

from . import Swap

_state = threading.local()


@dataclasses.dataclass(frozen=True)
class AttentionCall:
    """One call of ``keras.ops.dot_product_attention`` while tracing.

    >>> call = AttentionCall("cpu", 2, 16, 16, 4, "bfloat16", 2, True, True, False, False, False,
    ...                      "attn")
    >>> call.score_bytes, call.scores_text
    (4096, '2 x 4 x 16 x 16 bfloat16')
    """

    platform: str
    """What ``jax.devices()`` answered (``"tpu"`` when traced for a TPU target)."""
    batch: int
    query_len: int
    key_len: int
    heads: int
    dtype: str
    itemsize: int
    masked: bool
    """A mask was given."""
    traced_mask: bool
    """The mask was a traced value, which Keras's kernel cannot take."""
    kernel: bool
    """Keras ran its splash-attention kernel (no scores kept)."""
    causal: bool
    """``is_causal=True`` was asked for."""
    disabled: bool
    """``flash_attention=False`` was passed (``keras.config.disable_flash_attention``)."""
    layer: str
    """The path of the innermost layer that called it ("" if none)."""

    @property
    def score_bytes(self) -> int:
        """The bytes of this call's scores, over the global batch."""
        return self.batch * self.heads * self.query_len * self.key_len * self.itemsize

    @property
    def scores_text(self) -> str:
        return f"{self.batch} x {self.heads} x {self.query_len} x {self.key_len} {self.dtype}"


def _backend_nn():
    from keras.src.backend.jax import nn

    return nn


def _recording_attention(original):
    signature = inspect.signature(original)

    def dot_product_attention(*args, **kwargs):
        calls = getattr(_state, "calls", None)
        if calls is None:
            return original(*args, **kwargs)
        before = getattr(_state, "kernels", 0)
        out = original(*args, **kwargs)
        try:
            calls.append(_call(signature.bind(*args, **kwargs).arguments,
                               getattr(_state, "kernels", 0) > before))
        except (TypeError, ValueError, AttributeError, IndexError):
            pass  # a call shaped unlike Keras's own: not recorded, the trace goes on
        return out

    return dot_product_attention


def _counting_kernel(original):
    def wrap_flash_attention(*args, **kwargs):
        out = original(*args, **kwargs)
        _state.kernels = getattr(_state, "kernels", 0) + 1
        return out

    return wrap_flash_attention


def _call(arguments: dict, kernel: bool) -> AttentionCall:
    import jax
    import numpy as np

    from .keras_base import current_layer

    query, key, mask = arguments["query"], arguments["key"], arguments.get("mask")
    layer = current_layer()
    if query.ndim == 3:  # (length, heads, head_dim): one example
        query, key = query[None], key[None]
    dtype = np.dtype(query.dtype)
    return AttentionCall(
        platform=jax.devices()[0].platform, batch=int(query.shape[0]),
        query_len=int(query.shape[1]), key_len=int(key.shape[1]), heads=int(query.shape[2]),
        dtype=dtype.name, itemsize=dtype.itemsize, masked=mask is not None,
        traced_mask=isinstance(mask, jax.core.Tracer), kernel=kernel,
        causal=bool(arguments.get("is_causal", False)),
        disabled=arguments.get("flash_attention") is False,
        layer=str(getattr(layer, "path", None) or getattr(layer, "name", "") or ""))


_attention_swap = Swap(_backend_nn, "dot_product_attention", _recording_attention)
_kernel_swap = Swap(_backend_nn, "wrap_flash_attention", _counting_kernel)


@contextlib.contextmanager
def watching_attention(calls: list[AttentionCall]):
    """Append an :class:`AttentionCall` to ``calls`` for each call of
    ``keras.ops.dot_product_attention`` traced in this thread."""
    import logging

    previous = getattr(_state, "calls", None)
    _state.calls = calls
    absl = logging.getLogger("absl")
    absl.addFilter(_fallback_filter)
    try:
        with _attention_swap.held(), _kernel_swap.held():
            yield
    finally:
        absl.removeFilter(_fallback_filter)
        _state.calls = previous


def _fallback_filter(record) -> bool:
    """Keras logs a traceback when its splash kernel refuses a shape and it
    falls back to XLA's attention: the call is recorded without the kernel
    (and the report's ``attention`` problem says which attention runs), so the
    traceback is kept off stderr."""
    return not str(record.msg).startswith(("Failed to apply Splash kernel",
                                          "Failed to determine distribution context"))
