"""What each variable is for a tensor-parallel split: :class:`Role` and
:func:`roles`, read from shapes, ranks and layer classes, never from names
(but for the LoRA factors Keras names ``lora_kernel_a`` and ``lora_kernel_b``)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..checks.variables import LORA_FACTORS
from ..errors import ShardvizError

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
    heads), ``"embedding"``, ``"experts"`` (one of a mixture-of-experts
    layer's weights, ``(experts, in, out)``), ``"router"`` (the small kernel
    that scores the experts: left replicated), or ``"other"``."""
    dim: int | None
    """The dim a tensor-parallel split goes on, or None."""
    layer_class: str


AFTER_FUSED = ("row", "column")
"""What a lone square kernel that follows a widening one in its block is
taken as: ``"row"`` (it narrows back what the widening one spread out, as
the projection out of a fused query/key/value projection's heads does) or
``"column"``. The planner compiles both where they differ."""


def roles(scan: Scan, after_fused: str = "row") -> list[Role]:
    """Each variable's role, from its shape, its rank, its layer's class and
    its layer's output rank; never from its name. ``after_fused`` is one of
    :data:`AFTER_FUSED`."""
    if after_fused not in AFTER_FUSED:
        raise ShardvizError(f"after_fused={after_fused!r:.40} is not a reading of a square "
                            "kernel after a widening one.",
                            hint=f"Give one of {', '.join(map(repr, AFTER_FUSED))}.")
    by_layer: dict[str, tuple[str, tuple, bool]] = {}
    for o in scan.outputs:
        by_layer.setdefault(o.layer_path, (o.layer_class, tuple(o.shapes[0]) if o.shapes else (),
                                           o.embedding))
    kernels: dict[str, Any] = {}
    for v in scan.variables:
        # A frozen kernel (LoRA, quantized) is split all the same; LoRA's own
        # factors follow their kernel (specs.lora_specs), whatever their shape.
        if len(v.shape) >= 2 and v.path.rpartition("/")[2] not in LORA_FACTORS:
            kernels.setdefault(v.layer, v)
    experts = _expert_layers(scan)
    routers = {v.path for v in scan.variables if len(v.shape) == 2 and any(
        v.shape[1] == count and v.layer.rpartition("/")[0] == layer.rpartition("/")[0]
        for layer, count in experts.items())}
    out: list[Role] = []
    seen_any = any(cls for cls, _, _ in by_layer.values())

    def unseen(layer_class: str) -> bool:
        return seen_any and not layer_class

    square_column = _square_columns([v for v in kernels.values() if len(v.shape) == 2],
                                    after_fused)
    first: dict[str, Role] = {}
    for v in scan.variables:
        if v.path in first:  # another layer's variable of the same path: Keras lays it out alike
            out.append(first[v.path])
            continue
        layer_class, out_shape, embedding = by_layer.get(v.layer, ("", (), False))
        out_rank = len(out_shape)
        kernel = kernels.get(v.layer)
        kind, dim = "other", None
        if unseen(layer_class):
            pass  # a layer whose call was not seen (a table inside attention): no role
        elif v.layer in experts and len(v.shape) == 3:
            kind, dim = "experts", 0
        elif v.path in routers:
            kind, dim = "router", None
        elif (embedding or layer_class == "Embedding") and len(v.shape) == 2:
            kind, dim = "embedding", 0
        elif kernel is not None and v is kernel and len(v.shape) == 2:
            d_in, d_out = v.shape
            if d_out > d_in or (d_out == d_in and square_column[v.path]) \
                    or _narrow_key_value(v, kernels.values()):
                kind, dim = "column", 1
            else:
                kind, dim = "row", 0
        elif kernel is not None and v is kernel and len(v.shape) == 3 and "Conv" not in layer_class:
            if out_rank >= 4 or v.shape[0] > v.shape[1]:  # into heads
                kind, dim = "heads-in", _heads_dim(v.shape, out_shape)
            else:  # (heads, head_dim, d_model)
                kind, dim = "heads-out", 0
        elif kernel is not None and v is not kernel and v.trainable:
            k_role = next((r for r in out if r.path == kernel.path), None)
            if k_role is not None and k_role.kind == "column" and v.shape == (kernel.shape[1],):
                kind, dim = "column-bias", 0
            elif k_role is not None and k_role.kind == "heads-in" and len(v.shape) == 2 \
                    and k_role.dim is not None and v.shape[0] == kernel.shape[k_role.dim] \
                    and v.shape[1] == kernel.shape[-1]:
                kind, dim = "heads-in-bias", 0
        first[v.path] = Role(v.path, kind, dim, layer_class)
        out.append(first[v.path])
    return out


def _narrow_key_value(v: Any, kernels: Any) -> bool:
    """Whether a narrowing 2-D kernel is one of a key/value pair of grouped-
    query attention written with Dense layers: a sibling kernel (same parent
    layer) has its very shape, and another reads the same input size into
    at least as many features (the query). Those read the block's input, as
    the query does, so they are split like columns.

    >>> class V:
    ...     def __init__(self, path, shape):
    ...         self.path, self.layer, self.shape = path, path.rpartition("/")[0], shape
    >>> q, k, v = V("a/q/kernel", (128, 128)), V("a/k/kernel", (128, 32)), V("a/v/kernel", (128, 32))
    >>> _narrow_key_value(k, [q, k, v]), _narrow_key_value(k, [q, k])
    (True, False)
    """
    parent = v.layer.rpartition("/")[0]
    siblings = [w for w in kernels if w is not v and len(w.shape) == 2
                and w.layer.rpartition("/")[0] == parent]
    return (any(tuple(w.shape) == tuple(v.shape) for w in siblings)
            and any(w.shape[0] == v.shape[0] and w.shape[1] > v.shape[1] for w in siblings))


def _heads_dim(kernel: tuple[int, ...], out_shape: tuple) -> int:
    """The heads dim of a 3-D kernel that projects into heads: the dim, not
    the last, whose size is the heads dim of the layer's output ``(batch,
    length, heads, head_dim)``, so that ``(d_model, heads, head_dim)`` and
    the heads-first ``(heads, d_model, head_dim)`` are both read right.

    >>> _heads_dim((64, 4, 16), (2, 8, 4, 16)), _heads_dim((4, 64, 16), (2, 8, 4, 16))
    (1, 0)
    """
    if len(out_shape) >= 4:
        heads = out_shape[-2]
        matches = [d for d in range(len(kernel) - 1) if kernel[d] == heads]
        if len(matches) == 1:
            return matches[0]
        if 1 in matches:
            return 1
    return 1


def _square_columns(matrices: list, after_fused: str = "row") -> dict[str, bool]:
    """Whether each square 2-D kernel among ``matrices`` (every 2-D kernel, in
    the model's order) is taken as column-parallel (else row), counted within
    each parent layer (a block): four squares inside a block are an attention
    layer (query, key and value read the input, one projection takes the heads
    back: column, column, column, row); pairs alternate column, row; an odd
    count starts with two columns (a gated feed-forward layer: the gate and
    the up projection read the same input, then one projection narrows back).
    A lone square kernel that follows a widening one in its block (a fused
    query/key/value projection, then the projection out of the heads) narrows
    back what that one widened: row (column with ``after_fused="column"``).
    Shapes alone cannot tell; a compile of the candidate shows what it costs.

    >>> class V:
    ...     def __init__(self, path, shape=(8, 8)):
    ...         self.path, self.layer, self.shape = path, path.rpartition("/")[0], shape
    >>> sq = [V(f"b{i}/{n}/kernel") for i in (0, 1) for n in ("gate", "up", "down")]
    >>> [_square_columns(sq)[v.path] for v in sq]
    [True, True, False, True, True, False]
    >>> att = [V(f"b0/attention/{n}/kernel") for n in ("q", "k", "v", "o")]
    >>> [_square_columns(att)[v.path] for v in att]
    [True, True, True, False]
    >>> mlp = [V(f"d{i}/kernel") for i in range(4)]  # four square layers of a model
    >>> [_square_columns(mlp)[v.path] for v in mlp]
    [True, False, True, False]
    >>> fused = [V("b0/qkv/kernel", (8, 24)), V("b0/proj/kernel")]
    >>> _square_columns(fused), _square_columns(fused, after_fused="column")
    ({'b0/proj/kernel': False}, {'b0/proj/kernel': True})
    """
    by_parent: dict[str, list] = {}
    for v in matrices:
        by_parent.setdefault(v.layer.rpartition("/")[0], []).append(v)
    out = {}
    for parent, kernels in by_parent.items():
        members = [v for v in kernels if v.shape[0] == v.shape[1]]
        if len(members) == 4 and parent:  # attention: query, key, value, then one out
            columns = {0, 1, 2}
        elif len(members) == 1 and parent and _follows_a_widening(kernels, members[0]):
            columns = set() if after_fused == "row" else {0}
        else:
            start = 1 if len(members) % 2 and len(members) >= 3 else 0
            columns = set(range(start)) | {i for i in range(start, len(members))
                                           if (i - start) % 2 == 0}
        for i, v in enumerate(members):
            out[v.path] = i in columns
    return out


def _follows_a_widening(kernels: list, square: Any) -> bool:
    """Whether the kernel just before ``square`` in its block widens (more
    output features than input)."""
    i = kernels.index(square)
    return i > 0 and kernels[i - 1].shape[1] > kernels[i - 1].shape[0]


def _expert_layers(scan: Scan) -> dict[str, int]:
    """Layers that hold two or more 3-D weights with one leading size,
    smaller than their other dims, one of which projects back to what
    another takes in (``(E, d, f)`` and ``(E, f', d)``: the experts of a
    mixture-of-experts layer), with their expert count. Three ``(d_model,
    heads, head_dim)`` projections in one layer are not experts."""
    by_layer: dict[str, list[tuple[int, ...]]] = {}
    for v in scan.variables:
        if len(v.shape) == 3 and v.path.rpartition("/")[2] not in LORA_FACTORS:
            by_layer.setdefault(v.layer, []).append(tuple(v.shape))
    out = {}
    for layer, shapes in by_layer.items():
        if len(shapes) < 2 or len({s[0] for s in shapes}) != 1:
            continue
        count = shapes[0][0]
        back = any(a[1] == b[2] for i, a in enumerate(shapes) for j, b in enumerate(shapes)
                   if i != j)
        if back and count < min(min(s[1:]) for s in shapes):
            out[layer] = count
    return out
