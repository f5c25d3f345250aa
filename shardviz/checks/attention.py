"""Which attention Keras runs, and the scores it keeps: a problem on a
target when calls of ``keras.ops.dot_product_attention`` keep their
``query × key`` scores, saying why and how large they are, or how far the
figures may be from what the target's chips would run."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import Problem
from ..format import human_bytes, plural


def attention_problems(calls: Sequence, target, refused: bool = False) -> list[Problem]:
    """The attention findings for a program traced for ``target`` (one with
    no memory limit, such as the simulated CPUs: nothing to say). ``calls``
    are the traced calls (:class:`~shardviz._adapters.keras.AttentionCall`);
    ``refused``: the compiler refused the program for memory."""
    if target is None or target.capacity_bytes() is None:
        return []
    return _kernel_numerics(calls) + _scores_kept(calls, target, refused)


MEASURED_KERAS = "3.15.1"
"""The Keras whose TPU kernel path was measured on a chip (docs/CHIP.md)."""


def _kernel_numerics(calls: Sequence) -> list[Problem]:
    """Keras's splash-attention path, measured on a v5e chip: causal and
    without the ``1/sqrt(head_dim)`` scale, whatever the call asked."""
    from .._adapters.keras import keras

    ran = [c for c in calls if c.kernel]
    if not ran:
        return []
    version = keras().__version__
    layers = sorted({c.layer for c in ran if c.layer})
    unmasked = sum(not c.masked for c in ran)
    return [Problem(
        "warning", "attention",
        f"{plural(len(ran), 'call')} of keras.ops.dot_product_attention {_run(ran)} Keras's "
        "splash-attention kernel on the chips" + (f" ({', '.join(layers[:3])})" if layers else "")
        + f". Measured on a v5e chip with Keras {MEASURED_KERAS}, that path computed causal "
        "attention without the 1/sqrt(head_dim) scale for calls without a mask, whatever "
        "is_causal and scale asked: its outputs differed from XLA's attention by up to 4.6, "
        f"where the outputs stayed below 0.9 ({unmasked} of these calls have no mask; with a "
        "mask the kernel was not measured)"
        + ("" if version == MEASURED_KERAS else f"; this is Keras {version}, not measured")
        + ". The memory figures are the kernel's.",
        hint="To train what the model says, call keras.config.disable_flash_attention() before "
        "building it: the chips then run XLA's attention, which keeps the scores (compare the "
        "memory).", layer=ran[0].layer or None)]


def _scores_kept(calls: Sequence, target, refused: bool) -> list[Problem]:
    kept = [c for c in calls if not c.kernel]
    if not kept:
        return []
    severity = "warning" if refused else "info"
    total = sum(c.score_bytes for c in kept)
    shapes = sorted({c.scores_text for c in kept})
    scores = (f"each keeps its scores ({' or '.join(shapes[:2])}"
              f"{', ...' if len(shapes) > 2 else ''}), {human_bytes(total)} in all over the "
              "global batch, before the split over devices")
    calls_text = (f"{len(kept)} of the {plural(len(calls), 'call')}" if len(kept) < len(calls)
                  else plural(len(calls), "call"))
    if kept[0].platform == "tpu":
        if all(c.disabled for c in kept):
            why = "flash attention is disabled (keras.config.disable_flash_attention)"
        elif all(c.traced_mask or c.disabled for c in kept):
            why = ("their mask is computed inside the step, and Keras's splash-attention "
                   "kernel takes only a mask it can read while tracing, or none")
        else:
            why = "Keras's splash-attention kernel was not run for them (Keras logs why)"
        return [Problem(
            severity, "attention",
            f"{calls_text} of keras.ops.dot_product_attention {_run(kept)} XLA's attention on "
            f"{target.label}, as they would on its chips: {why}; {scores}.",
            hint="These figures are those of the program the chips run. Keras's kernel would "
            "keep no scores, but on a v5e chip it computed causal attention without its scale "
            "(docs/CHIP.md); to hold fewer scores per chip, split the batch over more devices "
            "or shorten the sequence.")]
    readable = sum(not c.traced_mask for c in kept)
    if getattr(target, "chip_word", "") == "GPUs":
        elsewhere = (f"On {target.label}, Keras runs cuDNN's flash attention where the GPU and "
                     "the shapes allow, and shardviz cannot compile for a GPU here: the "
                     f"temporaries shown can be up to {human_bytes(total)} (over the global "
                     "batch) more than the GPUs need.")
    else:
        elsewhere = ("On a TPU, Keras runs its splash-attention kernel, which keeps no scores, "
                     f"for a mask it can read while tracing or none ({readable} of these); on a "
                     "v5e chip that kernel computed causal attention without its scale "
                     "(docs/CHIP.md).")
    return [Problem(
        severity, "attention",
        f"{calls_text} of keras.ops.dot_product_attention {_run(kept)} XLA's attention on the "
        f"simulated CPU devices that stand in for {target.label}: {scores}. {elsewhere}",
        hint="The figures are estimates for this target; a TPU target compiles the program a "
        "TPU runs.")]


def _run(calls: Sequence) -> str:
    return "runs" if len(calls) == 1 else "run"
