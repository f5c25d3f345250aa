"""Tuning: the training settings a fine-tune is built with.

A :class:`Tuning` holds what changes the model itself before it trains: its
dtype policy, LoRA, quantization and rematerialisation. shardviz applies each
as a user would, with Keras's own public calls, while it builds the model from
a builder: the dtype policy is Keras's global policy during the build
(``keras.config.set_dtype_policy``), remat is a ``keras.RematScope`` around
the build, then the built model is quantized (``model.quantize(mode)``) and
LoRA is enabled (a keras-hub backbone's ``enable_lora(rank)``, or
``layer.enable_lora(rank)`` on each Dense and EinsumDense layer).

>>> from shardviz.model.tuning import Tuning
>>> Tuning(dtype="bfloat16", lora_rank=8, remat="full").describe()
'dtype bfloat16, LoRA rank 8, remat full'
>>> Tuning(remat="larger_than:4096").remat_scope_args()
{'mode': 'larger_than', 'output_size_threshold': 4096}
>>> Tuning(lora_rank=0)
Traceback (most recent call last):
...
shardviz.errors.ShardvizError: lora_rank=0 is not a LoRA rank.
  hint: Give a whole number of at least 1, such as 8 or 16, or leave lora_rank out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import numbers
from collections.abc import Iterator
from typing import Any

from .._adapters import keras as keras_adapter
from ..errors import ShardvizError

DTYPES = ("float32", "bfloat16", "float16", "mixed_bfloat16", "mixed_float16")
"""The dtype policies a fine-tune is built with: variables and compute in one
float type, or (``mixed_*``) float32 variables with compute in 16 bits."""

QUANTIZE_MODES = ("int8", "int4", "float8")
"""The quantization modes ``model.quantize`` applies without calibration data."""

REMAT_MODES = ("full", "activations", "larger_than:<bytes>", "[layer names]")
"""What ``remat=`` takes, as ``keras.RematScope`` applies it."""


@dataclasses.dataclass(frozen=True)
class Tuning:
    """How the model of a fine-tune is built: each field None leaves Keras's default.

    Attributes:
        dtype: the dtype policy (one of :data:`DTYPES`).
        lora_rank: enable LoRA of this rank: the base kernels freeze, and only
            the LoRA variables train (and have optimizer slots).
        lora_layers: with ``lora_rank``, the names of the layers to enable it
            on (a keras-hub backbone's ``target_layer_names``); by default
            the backbone's own choice, or every Dense and EinsumDense layer.
        quantize: quantize the built model (one of :data:`QUANTIZE_MODES`).
        remat: rematerialise activations in the backward pass:
            ``"full"``, ``"activations"``, ``"larger_than:N"`` (outputs of at
            least N bytes) or a list of layer names.
    """

    dtype: str | None = None
    lora_rank: int | None = None
    lora_layers: tuple[str, ...] | None = None
    quantize: str | None = None
    remat: str | tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ShardvizError(
                f"dtype={self.dtype!r:.60} is not a dtype policy shardviz builds with.",
                hint=f"Use one of {', '.join(DTYPES)}; quantization is quantize='int8' "
                "(or 'int4', 'float8').")
        if self.lora_rank is not None:
            rank = self.lora_rank
            if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) or rank < 1:
                raise ShardvizError(
                    f"lora_rank={rank!r:.60} is not a LoRA rank.",
                    hint="Give a whole number of at least 1, such as 8 or 16, or leave "
                    "lora_rank out.")
            object.__setattr__(self, "lora_rank", int(rank))
        if self.lora_layers is not None:
            layers = self.lora_layers
            if isinstance(layers, str):
                layers = (layers,)
            if not all(isinstance(n, str) and n for n in layers) or not layers:
                raise ShardvizError(
                    f"lora_layers={self.lora_layers!r:.80} is not a list of layer names.",
                    hint="Give layer names such as ['query', 'value'].")
            if self.lora_rank is None:
                raise ShardvizError("lora_layers is given without lora_rank.",
                                    hint="Give lora_rank=8 (say) as well, or leave "
                                    "lora_layers out.")
            object.__setattr__(self, "lora_layers", tuple(layers))
        if self.quantize is not None and self.quantize not in QUANTIZE_MODES:
            raise ShardvizError(
                f"quantize={self.quantize!r:.60} is not a quantization mode Keras applies "
                "to a model as it is.",
                hint=f"Use one of {', '.join(QUANTIZE_MODES)} (gptq and awq need "
                "calibration data; quantize the model yourself and pass it).")
        if self.remat is not None:
            object.__setattr__(self, "remat", _remat(self.remat))

    def describe(self) -> str:
        """The settings in a few words, for summaries and titles."""
        parts = []
        if self.dtype:
            parts.append(f"dtype {self.dtype}")
        if self.quantize:
            parts.append(f"quantized {self.quantize}")
        if self.lora_rank:
            parts.append(f"LoRA rank {self.lora_rank}")
        if self.remat:
            remat = self.remat if isinstance(self.remat, str) else ", ".join(self.remat)
            parts.append(f"remat {remat}")
        return ", ".join(parts) or "as built"

    @property
    def changes_model(self) -> bool:
        """Whether any setting changes how the model is built."""
        return any(v is not None for v in (self.dtype, self.lora_rank, self.quantize,
                                           self.remat))

    def remat_scope_args(self) -> dict[str, Any] | None:
        """The arguments of the ``keras.RematScope`` this remat setting is."""
        if self.remat is None:
            return None
        if isinstance(self.remat, tuple):
            return {"mode": "list_of_layers", "layer_names": list(self.remat)}
        if self.remat.startswith("larger_than:"):
            return {"mode": "larger_than",
                    "output_size_threshold": int(self.remat.partition(":")[2])}
        return {"mode": self.remat}

    @contextlib.contextmanager
    def building(self) -> Iterator[None]:
        """The context a builder runs in: the dtype policy and the RematScope,
        both put back as they were afterwards."""
        keras = keras_adapter.keras()
        with contextlib.ExitStack() as stack:
            if self.dtype is not None:
                before = keras.config.dtype_policy()
                keras.config.set_dtype_policy(self.dtype)
                stack.callback(keras.config.set_dtype_policy, before)
            scope = self.remat_scope_args()
            if scope is not None:
                stack.enter_context(keras.RematScope(**scope))
            yield

    def apply(self, model: Any) -> None:
        """Quantize the built model, then enable LoRA on it, as a user would
        (LoRA on a quantized model is QLoRA)."""
        if isinstance(self.remat, tuple):
            names = {layer.name for layer in keras_adapter.all_layers(model)}
            unknown = [n for n in self.remat if n not in names]
            if unknown:
                raise ShardvizError(
                    f"remat names {', '.join(map(repr, unknown))}, which no layer of model "
                    f"{model.name!r} is called: Keras would rematerialise nothing there.",
                    hint="Name layers the model has, such as "
                    f"{', '.join(map(repr, sorted(names)[:6]))}.")
        if self.quantize is not None:
            model.quantize(self.quantize)
        if self.lora_rank is not None:
            enable_lora(model, self.lora_rank, self.lora_layers)


def _remat(value: object) -> str | tuple[str, ...]:
    hint = ("Use remat='full', 'activations', 'larger_than:N' (outputs of at least N "
            "bytes), or a list of layer names.")
    if isinstance(value, str):
        if value in ("full", "activations"):
            return value
        if value.startswith("larger_than:"):
            size = value.partition(":")[2]
            if size.isdigit() and int(size) > 0:
                return value
        raise ShardvizError(f"remat={value!r:.60} is not a remat mode.", hint=hint)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) and v
                                                          for v in value):
        return tuple(value)
    raise ShardvizError(f"remat={value!r:.60} is not a remat mode.", hint=hint)


def lora_layers_of(model: Any, names: tuple[str, ...] | None) -> list[Any]:
    """The layers LoRA goes on, as keras-hub's ``Backbone.enable_lora`` picks
    them: those whose name is one of ``names`` (by default a backbone's
    ``default_lora_layer_names()``) and that take LoRA; with no names and no
    backbone, every Dense and EinsumDense layer."""
    keras = keras_adapter.keras()
    layers = [layer for layer in keras_adapter.all_layers(model) if layer.weights]
    if names is None and hasattr(model, "default_lora_layer_names"):
        names = tuple(model.default_lora_layer_names())
    if names is None:
        kinds = (keras.layers.Dense, keras.layers.EinsumDense)
        return [layer for layer in layers if isinstance(layer, kinds)]
    return [layer for layer in layers if layer.name in names and hasattr(layer, "enable_lora")]


def enable_lora(model: Any, rank: int, names: tuple[str, ...] | None) -> None:
    """LoRA of ``rank`` on the model as a fine-tune uses it: a keras-hub
    backbone's own ``enable_lora`` (its default targets, or ``names``);
    otherwise, as that does, every layer frozen and ``layer.enable_lora`` on
    each layer :func:`lora_layers_of` picks. A rank larger than a kernel's
    input or output size is refused, naming the layer."""
    backbone = getattr(model, "backbone", model)
    own = getattr(backbone, "enable_lora", None)
    layers = lora_layers_of(backbone, names)
    if not layers:
        raise ShardvizError(
            f"No layer of {model.name!r} takes LoRA"
            + (f" among those named {list(names)}" if names else "") + ".",
            hint="LoRA goes on Dense and EinsumDense layers; name some of them in "
            "lora_layers, or leave it out.")
    for layer in layers:
        kernel = getattr(layer, "kernel", None)
        shape = tuple(getattr(kernel, "shape", ()))
        # Keras's factors: A (the kernel's leading dims, rank), B (rank, its last dim).
        bound = min(_product(shape[:-1]), int(shape[-1])) if len(shape) >= 2 else None
        if bound is not None and rank > bound:
            raise ShardvizError(
                f"lora_rank={rank} is larger than layer {layer.path!r}'s kernel {shape} "
                "allows: a rank above the smaller side of a kernel adds parameters and "
                "no expressive power.",
                hint=f"Use a rank of at most {bound} (8 or 16 is usual), or leave this "
                "layer out with lora_layers.")
    if own is not None:
        if names is None:
            own(rank)
        else:
            own(rank, target_layer_names=list(names))
        return
    for layer in keras_adapter.all_layers(backbone):
        layer.trainable = False
    for layer in layers:
        layer.trainable = True
        layer.enable_lora(rank)


def _product(values: tuple) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out
