"""Each reason the planner gives, checked against the compiled candidate.

A reason claims things of its rule's layers: one all-reduce per row-parallel
layer, no collective in a column-parallel one, a combine for a split
embedding, and, for a fully sharded rule, weights gathered when a layer runs.
Each claim is compared with the collectives XLA put in those layers' forward
pass over the axis the claim is about, and the reason is shown with what the
compile confirms, or with what it shows instead. The fully sharded part
claims no count (XLA chooses between gathering weights and combining partial
results), so the compile's collectives over ``batch`` are stated as found.

>>> r = Reason("row-parallel: ...", "row", ("blk0/down", "blk1/down"), "model")
>>> counts = {"blk0/down": {("all-reduce", "model"): 1}, "blk1/down": {("all-reduce", "model"): 1}}
>>> checked(r, counts)
'row-parallel: ... (compiled: one all-reduce over `model` in each of the 2 layers)'
>>> checked(Reason("column-parallel: ...", "column", ("up",), "model"),
...         {"up": {("all-gather", "model"): 2}})
'column-parallel: ... (but the compiled program has 2 all-gathers over `model` in `up`)'
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from ..format import plural

if TYPE_CHECKING:
    from ..report import Report

Counts = dict[str, Counter]
"""Per layer: how many collectives of each ``(kind, axis)`` its forward pass has."""


class Reason(str):
    """A reason's text, with the role it speaks of, the layers its rule
    matches, the axis its split is over, and whether the rule is also fully
    sharded over ``batch``."""

    kind: str
    layers: tuple[str, ...]
    axis: str
    gathered: bool

    def __new__(cls, text: str, kind: str = "", layers: tuple[str, ...] = (),
                axis: str = "", gathered: bool = False) -> Reason:
        out = super().__new__(cls, text)
        out.kind, out.layers, out.axis, out.gathered = kind, tuple(layers), axis, gathered
        return out


ONE_ALL_REDUCE = ("row", "heads-out")
"""Kinds whose reason claims one all-reduce per layer."""
NONE_INSIDE = ("column", "heads-in", "column-bias", "heads-in-bias", "lora")
"""Kinds whose reason claims the layer communicates nothing itself."""
COMBINED = ("embedding", "experts")
"""Kinds whose reason claims a combine over the axis in the layer."""
FSDP_AXIS = "batch"


def layer_collectives(report: Report) -> Counts:
    """Per layer, the compiled forward pass's collectives by ``(kind, axis)``,
    one count per axis a collective spans."""
    out: Counts = {}
    c = report.collectives
    if c.empty:
        return out
    forward = c[c["pass"] == "forward"]
    for layer, kind, axes in zip(forward["layer"], forward["kind"], forward["axes"]):
        if layer:
            for axis in (tuple(axes) or ("",)):
                out.setdefault(layer, Counter())[(kind, axis)] += 1
    return out


def _over(counts: Counts, layers: tuple[str, ...], axis: str) -> dict[str, Counter]:
    """The collectives over ``axis`` in each of ``layers``, by kind."""
    return {layer: Counter({kind: n for (kind, a), n in (counts.get(layer) or {}).items()
                            if a == axis})
            for layer in layers}


def _found(per_layer: dict[str, Counter], axis: str) -> str:
    parts = [" and ".join(plural(n, kind) for kind, n in sorted(got.items()))
             + f" over `{axis}` in `{layer}`" for layer, got in per_layer.items() if got]
    return "; ".join(parts[:2]) + (f"; and {len(parts) - 2} more" if len(parts) > 2 else "")


def _split_claim(reason: Reason, counts: Counts) -> str:
    """What the compile says of the tensor-parallel claim of ``reason``."""
    per_layer = _over(counts, reason.layers, reason.axis)
    n, axis = len(reason.layers), reason.axis
    if reason.kind in ONE_ALL_REDUCE:
        off = {layer: got for layer, got in per_layer.items() if dict(got) != {"all-reduce": 1}}
        if not off:
            every = "the layer" if n == 1 else f"each of the {n} layers"
            return f"compiled: one all-reduce over `{axis}` in {every}"
        empty = [layer for layer, got in off.items() if not got]
        found = "; ".join(p for p in (
            _found(off, axis),
            f"no collective over `{axis}` in `{empty[0]}`"
            + (f" and {len(empty) - 1} more" if len(empty) > 1 else "") if empty else "") if p)
        return f"but the compiled program has {found} ({len(off)} of the {n} layers)"
    if reason.kind in NONE_INSIDE:
        if not any(per_layer.values()):
            return f"compiled: no collective over `{axis}` in {'it' if n == 1 else 'them'}"
        return "but the compiled program has " + _found(per_layer, axis)
    if reason.kind in COMBINED:
        found = _found(per_layer, axis)
        return (f"compiled: {found}" if found else
                f"but the compiled program has no collective over `{axis}` in these layers")
    return ""


def _gather_claim(layers: tuple[str, ...], counts: Counts) -> str:
    """What the compile shows of the fully sharded part: the collectives over
    ``batch`` in these layers (XLA may also move weights before a layer, in
    another one's ops)."""
    per_layer = _over(counts, layers, FSDP_AXIS)
    found = _found(per_layer, FSDP_AXIS)
    if found:
        return f"compiled: {found}"
    return f"compiled: no collective over `{FSDP_AXIS}` in these layers themselves"


def checked(reason: str, counts: Counts) -> str:
    """``reason`` with what the compiled collectives ``counts`` confirm of it,
    or what they show instead."""
    if not isinstance(reason, Reason) or not reason.layers:
        return reason
    notes = []
    if reason.kind == "fsdp":
        notes.append(_gather_claim(reason.layers, counts))
    else:
        notes.append(_split_claim(reason, counts))
        if reason.gathered:
            notes.append(_gather_claim(reason.layers, counts))
    notes = [n for n in notes if n]
    if not notes:
        return reason
    return Reason(f"{reason} ({'; '.join(notes)})", reason.kind, reason.layers, reason.axis,
                  reason.gathered)


def check_reasons(reasons: dict[str, str], report: Report) -> dict[str, str]:
    """Every reason checked against the compiled forward pass of ``report``."""
    if report.trace is None:
        return reasons
    counts = layer_collectives(report)
    return {key: checked(text, counts) for key, text in reasons.items()}
