"""Layouts per variable (or per layer output) for each strategy: tensor
parallel (Megatron), fully sharded, and sequence parallel, as
``{path: spec}`` dicts before they become rules."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..checks.gradients import GroupedInput
from ..layout.geometry import itemsize
from .roles import roles

if TYPE_CHECKING:
    from ..model.scan import Scan


FSDP_MIN_BYTES = 64 * 1024
"""Variables smaller than this stay replicated under fully sharded
strategies: gathering them costs more latency than their memory is worth."""


def tensor_parallel_specs(scan: Scan, axis: str, size: int,
                          after_fused: str = "row") -> dict[str, tuple]:
    """Megatron layouts over ``axis`` of ``size`` devices, for every variable
    whose split dim divides; the rest are left out (replicated). ``after_fused``
    passes on to :func:`~.roles.roles`."""
    shapes = {v.path: v.shape for v in scan.variables}
    specs: dict[str, tuple] = {}
    for r in roles(scan, after_fused):
        if r.dim is None:
            continue
        shape = shapes[r.path]
        dim = r.dim
        if r.kind == "embedding" and shape[0] % size and shape[1] % size == 0:
            dim = 1  # a vocabulary that does not divide: split the hidden size instead
        if r.kind == "experts" and shape[0] % size:
            # Fewer experts than devices: split inside each expert, the wider dim.
            dim = 2 if shape[2] >= shape[1] else 1
        if shape[dim] % size == 0:
            specs[r.path] = tuple(axis if d == dim else None for d in range(len(shape)))
    return specs


def fully_sharded_specs(scan: Scan, axis: str, size: int,
                        specs: dict[str, tuple] | None = None,
                        min_bytes: int = FSDP_MIN_BYTES) -> dict[str, tuple]:
    """``specs`` with every variable of at least ``min_bytes`` also split
    over ``axis`` on its largest free dim that divides."""

    out = dict(specs or {})
    for v in scan.variables:
        if v.size * itemsize(v.dtype) < min_bytes:
            continue
        spec = list(out.get(v.path, (None,) * len(v.shape)))
        if axis in spec:
            continue
        free = sorted((d for d in range(len(v.shape)) if spec[d] is None
                       and v.shape[d] % size == 0), key=lambda d: -v.shape[d])
        if not free:
            continue
        spec[free[0]] = axis
        out[v.path] = tuple(spec)
    return out


SEQUENCE_LAYERS = ("LayerNormalization", "RMSNormalization", "Add", "Dropout", "Activation")
"""Layers that work on each position alone: between tensor-parallel blocks
their outputs can be split over the sequence."""


def activations_dominate(scan: Scan, model: int) -> bool:
    """Whether the layer outputs (taken as float32, split over the batch only)
    outweigh the variables split over ``model``: where sequence parallelism
    pays."""

    acts = sum(math.prod(o.shapes[0]) * 4 for o in scan.outputs if o.shapes)
    variables = sum(v.size * itemsize(v.dtype) for v in scan.variables) / model
    return acts > variables


def sequence_parallel_specs(scan: Scan, model: int) -> dict[str, tuple]:
    """``/output`` layouts that split the sequence dim of norm, residual and
    elementwise layers' ``(batch, sequence, features)`` outputs over
    ``model``, where it divides."""
    out = {}
    for o in scan.outputs:
        if o.layer_class in SEQUENCE_LAYERS and o.shapes and len(o.shapes[0]) == 3 \
                and len(o.shapes) == 1 and o.shapes[0][1] % model == 0:
            out[o.path] = ("batch", "model", None)
    return out


def grouped_input_specs(grouped: list[GroupedInput], axis: str, size: int
                        ) -> dict[str, tuple]:
    """``/output`` layouts that split the channels of each grouped
    convolution of ``grouped`` (:func:`~shardviz.checks.gradients.grouped_inputs`)
    over ``axis`` (the output of the layer that feeds it), where they divide,
    the batch staying on ``batch``. Without them XLA sums the convolution's
    kernel gradient over the copies of the batch on ``axis``
    (``wrong-gradient``)."""
    out: dict[str, tuple] = {}
    for g in grouped:
        if g.feed and g.rank >= 2 and g.channels % size == 0:
            spec: list = [None] * g.rank
            spec[0], spec[g.channel_dim] = "batch", axis
            out[g.feed] = tuple(spec)
    return out


def lora_specs(scan: Scan, specs: dict[str, tuple]) -> dict[str, tuple]:
    """``specs`` with each split kernel's LoRA factors split as it is:
    ``lora_kernel_a`` (the kernel's input dims, then the rank) like its input
    dims, ``lora_kernel_b`` (the rank, then the output dim) like its output
    dim, so that the low-rank path adds no communication of its own."""
    paths = set(scan.variable_paths)
    out = dict(specs)
    for path, spec in specs.items():
        head, _, leaf = path.rpartition("/")
        if leaf != "kernel" or all(axis is None for axis in spec):
            continue
        a, b = f"{head}/lora_kernel_a", f"{head}/lora_kernel_b"
        if a in paths and b in paths:
            out[a] = tuple(spec[:-1]) + (None,)
            out[b] = (None, spec[-1])
    return out
