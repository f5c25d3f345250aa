"""Layouts: what a plan does to each variable and each output path.

This joins a :class:`~shardviz.model.scan.Scan` and a :class:`~shardviz.plan.Plan`:
Keras-exact matching decides which rule (or the variable's own layout) gives
each path its axes, and :mod:`shardviz.layout.geometry` turns the axes into shards.
Nothing here draws or prints; :class:`~shardviz.report.Report` holds the
result.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import weakref
from typing import TYPE_CHECKING

from ..matching.match import Match
from ..model.scan import OutputInfo, Scan, VariableInfo
from ..plan import Plan
from .geometry import GeometryError, MeshModel, TensorGeometry, geometry_of, replicated_geometry

if TYPE_CHECKING:
    from ..errors import Problem


class VariableLayout:
    """One variable under a plan.

    Attributes:
        info: the scanned variable.
        match: how Keras resolves its path against the rules.
        source: where its layout comes from: ``"rule"``, ``"own"`` (the
            variable's own layout, which Keras prefers) or ``"none"``
            (replicated, since nothing matched).
        axes: the layout Keras would use (``()`` when replicated).
        geometry: the resulting shards. When Keras would fail (``error`` is
            set) this is the replicated layout, so that memory is still counted.
        error: the reason Keras would fail, or None.
        status: ``"sharded"``, ``"replicated"`` or ``"error"`` (Keras would raise).
    """

    # A plain slotted class: one is made per variable on every re-analysis.
    __slots__ = ("info", "match", "source", "axes", "geometry", "error", "status", "problems")

    def __init__(self, info: VariableInfo, match: Match, source: str, axes: tuple,
                 geometry: TensorGeometry, error: GeometryError | None = None):
        self.info, self.match, self.source, self.axes = info, match, source, axes
        self.geometry, self.error = geometry, error
        self.status = "error" if error is not None else (
            "sharded" if geometry.sharded else "replicated")
        self.problems: tuple[int, list[Problem]] | None = None
        """``(threshold, problems)``, kept by :func:`shardviz.checks.variable_problems`."""

    def __repr__(self) -> str:
        return f"<VariableLayout {self.info.path!r} {self.status} {self.axes!r}>"


@dataclasses.dataclass(frozen=True)
class OutputLayout:
    """One layer output path under a plan: the rule that would constrain it."""

    info: OutputInfo
    match: Match
    axes: tuple | None
    """The requested layout, or None when no rule matches."""


def variable_layouts(scan: Scan, plan: Plan, mesh: MeshModel) -> list[VariableLayout]:
    """Each variable's layout under ``plan``, as Keras's ``ModelParallel``
    would give it: the variable's own layout first, then the LayoutMap,
    else replicated.

    The scan keeps the last answer: when only some rules' axes changed, only
    the variables those rules win are laid out again.
    """
    keys = plan.rule_keys
    matches = scan.variable_matcher.match(keys)
    axes_of = tuple(rule.axes for rule in plan.rules)
    memo = _memo_of(scan)
    with memo.lock:
        last = memo.last
        if last is not None and last[0] is mesh and len(last[1]) == len(keys):
            _, _, old_matches, old_axes, old_out = last
            if matches is not old_matches:
                memo.won_by = _won_by(matches)
            todo = {v for v, (a, b) in enumerate(zip(old_matches, matches)) if a is not b} \
                if matches is not old_matches else set()
            for i, (a, b) in enumerate(zip(old_axes, axes_of)):
                if a != b:
                    todo.update(memo.won_by.get(i, ()))
            out = list(old_out)
            for v in todo:
                out[v] = _layout(scan.variables[v], matches[v], plan, mesh)
        else:
            out = [_layout(info, m, plan, mesh) for info, m in zip(scan.variables, matches)]
            memo.won_by = _won_by(matches)
        memo.last = (mesh, keys, matches, axes_of, out)
    return out


def _won_by(matches) -> dict[int, list[int]]:
    """Rule index to the variables it wins."""
    won_by: dict[int, list[int]] = {}
    for v, m in enumerate(matches):
        if m.rule is not None:
            won_by.setdefault(m.rule, []).append(v)
    return won_by


class LayoutMemo:
    """The last variable layouts of a scan, to lay out only what an edit changes."""

    def __init__(self):
        self.lock = threading.Lock()
        self.last = None
        self.last_outputs = None
        self.won_by: dict[int, list[int]] = {}


_memos: weakref.WeakKeyDictionary[Scan, LayoutMemo] = weakref.WeakKeyDictionary()
_memos_lock = threading.Lock()


def _memo_of(scan: Scan) -> LayoutMemo:
    """The memo of ``scan``'s last layouts, kept here (the scan itself never
    changes) for as long as the scan lives."""
    with _memos_lock:
        memo = _memos.get(scan)
        if memo is None:
            memo = _memos[scan] = LayoutMemo()
        return memo


def _layout(info: VariableInfo, m: Match, plan: Plan, mesh: MeshModel) -> VariableLayout:
    if info.own_axes is not None:
        source, axes = "own", info.own_axes
    elif m.rule is not None:
        source, axes = "rule", plan.rules[m.rule].axes
    else:
        source, axes = "none", ()
    geometry, error = None, None
    if m.keras_raises and source != "own":
        error = _match_error(m)
    else:
        geometry, error = _geometry_or_error(mesh, info.shape, info.dtype, axes)
    if error is not None:
        geometry = replicated_geometry(info.shape, info.dtype, mesh)
    assert geometry is not None  # without an error, the geometry was computed
    return VariableLayout(info, m, source, axes, geometry, error)


@functools.lru_cache(maxsize=65536)
def _geometry_or_error(mesh, shape, dtype, axes):
    """``(geometry, None)`` or ``(None, GeometryError)``: refusals are kept too."""
    try:
        return geometry_of(mesh, shape, dtype, axes), None
    except GeometryError as e:
        return None, e


def _match_error(m: Match) -> GeometryError:
    if m.how == "conflict":
        return GeometryError("conflict", "several rules match this path")
    return GeometryError("invalid-regex", m.error or "an invalid rule key")


def output_layouts(scan: Scan, plan: Plan) -> list[OutputLayout]:
    """Each output path's requested layout under ``plan`` (kept while the
    matches and the winning rules' axes stay the same)."""
    matches = scan.output_matcher.match(plan.rule_keys)
    axes_of = tuple(rule.axes for rule in plan.rules)
    memo = _memo_of(scan)
    with memo.lock:
        last = memo.last_outputs
        if last is not None and last[0] is matches and last[1] == axes_of:
            return last[2]
        out = [OutputLayout(info, m, plan.rules[m.rule].axes if m.rule is not None else None)
               for info, m in zip(scan.outputs, matches)]
        memo.last_outputs = (matches, axes_of, out)
    return out
