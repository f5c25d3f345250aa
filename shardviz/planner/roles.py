"""What each variable is for a tensor-parallel split: :class:`Role` and
:func:`roles`, read from shapes, ranks and layer classes, never from names
(but for the LoRA factors Keras names ``lora_kernel_a`` and ``lora_kernel_b``)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..checks.variables import LORA_FACTORS

if TYPE_CHECKING:
    from ..model.scan import Scan


@dataclasses.dataclass(frozen=True)
class Role:
    """What a variable is for a tensor-parallel split."""

    path: str
    kind: str
    """``"column"`` (a Dense kernel that widens), ``"row"`` (one that narrows
    back), ``"column-bias"``, ``"heads-in"`` (an attention projection into
    heads), ``"heads-in-bias"``, ``"heads-out"`` (the projection out of
    heads), ``"embedding"``, or ``"other"``."""
    dim: int | None
    """The dim a tensor-parallel split goes on, or None."""
    layer_class: str


def roles(scan: Scan) -> list[Role]:
    """Each variable's role, from its shape, its rank, its layer's class and
    its layer's output rank; never from its name."""
    by_layer: dict[str, tuple[str, int]] = {}
    for o in scan.outputs:
        rank = len(o.shapes[0]) if o.shapes else 0
        by_layer.setdefault(o.layer_path, (o.layer_class, rank))
    kernels: dict[str, Any] = {}
    for v in scan.variables:
        # A frozen kernel (LoRA, quantized) is split all the same; LoRA's own
        # factors follow their kernel (specs.lora_specs), whatever their shape.
        if len(v.shape) >= 2 and v.path.rpartition("/")[2] not in LORA_FACTORS:
            kernels.setdefault(v.layer, v)
    out: list[Role] = []
    square_seen = 0
    for v in scan.variables:
        layer_class, out_rank = by_layer.get(v.layer, ("", 0))
        kernel = kernels.get(v.layer)
        kind, dim = "other", None
        if layer_class == "Embedding" and len(v.shape) == 2:
            kind, dim = "embedding", 0
        elif kernel is not None and v is kernel and len(v.shape) == 2:
            d_in, d_out = v.shape
            if d_out > d_in or (d_out == d_in and square_seen % 2 == 0):
                kind, dim = "column", 1
            else:
                kind, dim = "row", 0
            if d_out == d_in:
                square_seen += 1
        elif kernel is not None and v is kernel and len(v.shape) == 3:
            if out_rank >= 4 or v.shape[0] > v.shape[1]:  # (d_model, heads, head_dim)
                kind, dim = "heads-in", 1
            else:  # (heads, head_dim, d_model)
                kind, dim = "heads-out", 0
        elif kernel is not None and v is not kernel and v.trainable:
            k_role = next((r for r in out if r.path == kernel.path), None)
            if k_role is not None and k_role.kind == "column" and v.shape == (kernel.shape[1],):
                kind, dim = "column-bias", 0
            elif k_role is not None and k_role.kind == "heads-in" and v.shape == kernel.shape[1:]:
                kind, dim = "heads-in-bias", 0
        out.append(Role(v.path, kind, dim, layer_class))
    return out
