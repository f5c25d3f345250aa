""":func:`plan_diff`: what changes from one plan to another, one line per
change (the mesh, the batch axis, each rule)."""

from __future__ import annotations

from ..format import format_spec
from ..plan import Plan
from .candidates import mesh_text


def plan_diff(old: Plan, new: Plan) -> list[str]:
    """What changes from ``old`` to ``new``, one line per change.

    >>> a = Plan({"batch": 8}, {})
    >>> b = Plan({"batch": 2, "model": 4}, {"up/kernel": (None, "model")})
    >>> plan_diff(a, b)
    ['mesh: batch=8 → batch=2 × model=4', "+ rule 'up/kernel': P(None, 'model')"]
    """
    out = []
    if old.mesh_dict != new.mesh_dict:
        out.append(f"mesh: {mesh_text(old)} → {mesh_text(new)}")
    if old.batch_axis != new.batch_axis:
        out.append(f"batch axis: {old.batch_axis} → {new.batch_axis}")
    before = {r.key: r.axes for r in old.rules}
    after = {r.key: r.axes for r in new.rules}
    for key, axes in before.items():
        if key not in after:
            out.append(f"- rule {key!r}: {format_spec(axes)}")
        elif after[key] != axes:
            out.append(f"~ rule {key!r}: {format_spec(axes)} → {format_spec(after[key])}")
    for key, axes in after.items():
        if key not in before:
            out.append(f"+ rule {key!r}: {format_spec(axes)}")
    return out or ["no change"]
