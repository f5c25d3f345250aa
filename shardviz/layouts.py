"""Layouts: what a plan does to each variable and each output path.

This joins a :class:`~shardviz.scan.Scan` and a :class:`~shardviz.plan.Plan`:
Keras-exact matching decides which rule (or the variable's own layout) gives
each path its axes, and :mod:`shardviz.geometry` turns the axes into shards.
Nothing here draws or prints; :class:`~shardviz.report.Report` holds the
result.
"""

from __future__ import annotations

import dataclasses

from .geometry import GeometryError, MeshModel, TensorGeometry, geometry_of, replicated_geometry
from .match import Match, RuleMatcher
from .plan import Plan
from .model_scan import OutputInfo, Scan, VariableInfo


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
    __slots__ = ("info", "match", "source", "axes", "geometry", "error", "status")

    def __init__(self, info: VariableInfo, match: Match, source: str, axes: tuple,
                 geometry: TensorGeometry, error: GeometryError | None = None):
        self.info, self.match, self.source, self.axes = info, match, source, axes
        self.geometry, self.error = geometry, error
        self.status = "error" if error is not None else (
            "sharded" if geometry.sharded else "replicated")

    def __repr__(self) -> str:
        return f"<VariableLayout {self.info.path!r} {self.status} {self.axes!r}>"


@dataclasses.dataclass(frozen=True)
class OutputLayout:
    """One layer output path under a plan: the rule that would constrain it."""

    info: OutputInfo
    match: Match
    axes: tuple | None
    """The requested layout, or None when no rule matches."""


def _scan_matcher(scan: Scan, which: str) -> RuleMatcher:
    key = ("matcher", which)
    matcher = scan._memo.get(key)
    if matcher is None:
        paths = scan.variable_paths if which == "variables" else scan.output_paths
        matcher = scan._memo[key] = RuleMatcher(paths)
    return matcher


def variable_layouts(scan: Scan, plan: Plan, mesh: MeshModel) -> list[VariableLayout]:
    """Each variable's layout under ``plan``, as Keras's ``ModelParallel``
    would give it: the variable's own layout first, then the LayoutMap,
    else replicated."""
    keys = plan.rule_keys
    matches = _scan_matcher(scan, "variables").match(keys)
    out = []
    for info, m in zip(scan.variables, matches):
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
            try:
                geometry = geometry_of(mesh, info.shape, info.dtype, axes)
            except GeometryError as e:
                error = e
        if error is not None:
            geometry = replicated_geometry(info.shape, info.dtype, mesh)
        out.append(VariableLayout(info, m, source, axes, geometry, error))
    return out


def _match_error(m: Match) -> GeometryError:
    if m.how == "conflict":
        return GeometryError("conflict", "several rules match this path")
    return GeometryError("invalid-regex", m.error or "an invalid rule key")


def output_layouts(scan: Scan, plan: Plan) -> list[OutputLayout]:
    """Each output path's requested layout under ``plan``."""
    matches = _scan_matcher(scan, "outputs").match(plan.rule_keys)
    return [
        OutputLayout(info, m, plan.rules[m.rule].axes if m.rule is not None else None)
        for info, m in zip(scan.outputs, matches)
    ]
