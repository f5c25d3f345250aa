"""Report: everything shardviz found about one model under one plan.

The report is the one object every picture, widget and command reads. It
holds the plan, the scan, the per-variable layouts and the problems, and
offers them as pandas DataFrames:

* ``report.variables``: one row per variable (path, shape, dtype, spec,
  rule, shard_shape, bytes_per_device, replicated_over, ...);
* ``report.outputs``: one row per layer output path and the rule, if any,
  that constrains it;
* ``report.rules``: one row per rule, with how many paths it matches;
* ``report.devices``: one row per device with its mesh coordinates and bytes;
* ``report.problems``: severity, kind, path, rule, layer, message, hint.

It displays itself in a notebook (``_repr_html_``) and a terminal
(``str(report)``, or ``rich.print(report)``).
"""

from __future__ import annotations

import difflib
import functools

import pandas as pd

from .errors import SEVERITIES, Problem, ShardvizError
from .geometry import MeshModel, TensorGeometry
from .layouts import OutputLayout, VariableLayout
from .plan import Plan
from .model_scan import Scan

VARIABLE_COLUMNS = [
    "path", "layer", "shape", "dtype", "params", "bytes", "spec", "rule", "match",
    "also_matched", "shard_shape", "bytes_per_device", "replicated_over", "replicas",
    "trainable", "status",
]
VARIABLE_DTYPES = {c: object for c in VARIABLE_COLUMNS} | {
    "params": "int64", "bytes": "int64", "bytes_per_device": "int64", "replicas": "int64",
    "trainable": bool,
}
OUTPUT_COLUMNS = ["path", "layer", "layer_class", "rule", "match", "requested_spec"]
RULE_COLUMNS = ["index", "key", "axes", "kind", "matches", "wins", "status"]
PROBLEM_COLUMNS = ["severity", "kind", "path", "rule", "layer", "message", "hint"]


def _dtype(values):
    if values and all(isinstance(v, bool) for v in values):
        return bool
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "int64"
    if values and all(isinstance(v, float) for v in values):
        return "float64"
    return object


def frame(cols: dict, columns: list, dtypes: dict | None = None) -> pd.DataFrame:
    """A DataFrame with integer and boolean columns typed, and every other
    column kept as Python objects (tuples, strings, None), rather than
    letting pandas turn None into NaN."""
    dtypes = dtypes or {}
    return pd.DataFrame(
        {c: pd.Series(cols[c], dtype=dtypes.get(c) or _dtype(cols[c])) for c in columns},
        columns=columns,
    )


class Report:
    """The analysis of one model under one plan. Build it with
    :func:`shardviz.analyze`."""

    def __init__(self, *, plan: Plan, scan: Scan, mesh: MeshModel,
                 variable_layouts: list[VariableLayout], output_layouts: list[OutputLayout],
                 problems: list[Problem], rule_usage: list[dict], device_count: int,
                 seconds: float = 0.0):
        self.plan = plan
        self.scan = scan
        self.mesh = mesh
        self.variable_layouts = variable_layouts
        self.output_layouts = output_layouts
        self.problem_list = sorted(problems, key=lambda p: SEVERITIES.index(p.severity))
        self.rule_usage = rule_usage
        self.device_count = device_count
        self.seconds = seconds
        self._by_path = {vl.info.path: vl for vl in variable_layouts}

    # ------------------------------------------------------------ frames
    @functools.cached_property
    def variables(self) -> pd.DataFrame:
        rules = self.plan.rules
        layouts = self.variable_layouts
        static = self.scan._memo.get("variable_columns")
        if static is None:  # the plan-independent columns, made once per scan
            infos = self.scan.variables
            static = self.scan._memo["variable_columns"] = {
                "path": [i.path for i in infos], "layer": [i.layer for i in infos],
                "shape": [i.shape for i in infos], "dtype": [i.dtype for i in infos],
                "params": [i.size for i in infos], "trainable": [i.trainable for i in infos],
            }
        ok = [vl.error is None for vl in layouts]
        geoms = [vl.geometry for vl in layouts]
        cols = dict(static)
        cols["bytes"] = [g.bytes for g in geoms]
        cols["spec"] = [g.spec if k else tuple(vl.axes) for g, k, vl in zip(geoms, ok, layouts)]
        cols["rule"] = [
            rules[vl.match.rule].key if vl.source == "rule"
            else ("<own layout>" if vl.source == "own" else None)
            for vl in layouts
        ]
        cols["match"] = ["own" if vl.source == "own" else vl.match.how for vl in layouts]
        cols["also_matched"] = [
            tuple(rules[i].key for i in vl.match.also) if len(vl.match.candidates) > 1 else ()
            for vl in layouts
        ]
        cols["shard_shape"] = [g.shard_shape if k else None for g, k in zip(geoms, ok)]
        cols["bytes_per_device"] = [g.bytes_per_device for g in geoms]
        cols["replicated_over"] = [g.replicated_over for g in geoms]
        cols["replicas"] = [g.replicas for g in geoms]
        cols["status"] = [vl.status for vl in layouts]
        return frame(cols, VARIABLE_COLUMNS, VARIABLE_DTYPES)

    @functools.cached_property
    def outputs(self) -> pd.DataFrame:
        rules = self.plan.rules
        cols = {c: [] for c in OUTPUT_COLUMNS}
        for ol in self.output_layouts:
            cols["path"].append(ol.info.path)
            cols["layer"].append(ol.info.layer)
            cols["layer_class"].append(ol.info.layer_class)
            cols["rule"].append(rules[ol.match.rule].key if ol.match.rule is not None else None)
            cols["match"].append(ol.match.how)
            cols["requested_spec"].append(ol.axes)
        return frame(cols, OUTPUT_COLUMNS)

    @functools.cached_property
    def rules(self) -> pd.DataFrame:
        cols = {c: [] for c in RULE_COLUMNS}
        for u, rule in zip(self.rule_usage, self.plan.rules):
            cols["index"].append(u["index"])
            cols["key"].append(rule.key)
            cols["axes"].append(rule.axes)
            cols["kind"].append("output" if rule.is_output else "variable")
            for c in ("matches", "wins", "status"):
                cols[c].append(u[c])
        return frame(cols, RULE_COLUMNS)

    @functools.cached_property
    def problems(self) -> pd.DataFrame:
        cols = {c: [getattr(p, c) for p in self.problem_list] for c in PROBLEM_COLUMNS}
        return frame(cols, PROBLEM_COLUMNS)

    @functools.cached_property
    def devices(self) -> pd.DataFrame:
        """One row per device of the mesh: id, mesh coordinates, bytes.

        Every device of a NamedSharding holds one shard of ``shard_shape``,
        so each variable adds its ``bytes_per_device`` to every device.
        """
        per_device = self.variable_bytes_per_device
        rows = []
        for device, coords in sorted(self.mesh.coords.items()):
            row = {"device": device, "coords": coords}
            row.update(dict(zip(self.mesh.axis_names, coords)))
            row["variable_bytes"] = per_device
            rows.append(row)
        return pd.DataFrame(rows)

    # ----------------------------------------------------------- numbers
    @property
    def variable_bytes_per_device(self) -> int:
        return sum(vl.geometry.bytes_per_device for vl in self.variable_layouts)

    @property
    def variable_bytes(self) -> int:
        return sum(vl.geometry.bytes for vl in self.variable_layouts)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problem_list if p.severity == "error"]

    @property
    def ok(self) -> bool:
        """True when Keras would accept the plan for this model."""
        return not self.errors

    def problems_of(self, kind: str) -> list[Problem]:
        return [p for p in self.problem_list if p.kind == kind]

    # ------------------------------------------------------------ lookups
    @property
    def paths(self) -> list[str]:
        return list(self._by_path)

    def variable(self, path: str) -> VariableLayout:
        """The layout of the variable at ``path``; a missing path gives an
        error that suggests the nearest paths."""
        try:
            return self._by_path[path]
        except KeyError:
            raise self._unknown_path(path) from None

    def geometry(self, path: str) -> TensorGeometry:
        """The shards of the variable at ``path``."""
        return self.variable(path).geometry

    def shards(self, path: str) -> pd.DataFrame:
        """Per device: its mesh coordinates and the index ranges it holds."""
        g = self.geometry(path)
        rows = []
        for device, idx in sorted(g.indices().items()):
            coords = self.mesh.coords[device]
            row = {"device": device, "coords": coords}
            row.update(dict(zip(self.mesh.axis_names, coords)))
            row["index"] = tuple(
                (s.start or 0, g.shape[d] if s.stop is None else s.stop) for d, s in enumerate(idx)
            )
            rows.append(row)
        return pd.DataFrame(rows)

    def explain(self, path: str) -> str:
        """Why ``path`` has the layout it has, in a sentence or two."""
        from .explain import explain_path

        return explain_path(self, path)

    def _unknown_path(self, path: str) -> ShardvizError:
        known = self.paths + [ol.info.path for ol in self.output_layouts]
        close = difflib.get_close_matches(path, known, n=3, cutoff=0.4)
        hint = f"Did you mean {close}?" if close else "See report.variables for every path."
        return ShardvizError(f"No variable or output path {path!r} in this report.",
                             hint=hint, path=path)

    # ------------------------------------------------------------ display
    def summary(self) -> dict:
        counts = {s: 0 for s in SEVERITIES}
        for p in self.problem_list:
            counts[p.severity] += 1
        statuses = [vl.status for vl in self.variable_layouts]
        return {
            "model": getattr(self.scan.model, "name", "?"),
            "mesh": self.plan.mesh_dict,
            "devices": self.mesh.size,
            "abstract_mesh": self.mesh.abstract,
            "variables": len(self.variable_layouts),
            "sharded": statuses.count("sharded"),
            "replicated": statuses.count("replicated"),
            "failing": statuses.count("error"),
            "params": self.scan.param_count,
            "variable_bytes": self.variable_bytes,
            "variable_bytes_per_device": self.variable_bytes_per_device,
            "problems": counts,
        }

    def _repr_html_(self) -> str:
        from .render.html import report_html

        return report_html(self)

    def __rich_console__(self, console, options):
        from .render.text import report_renderables

        yield from report_renderables(self)

    def __str__(self) -> str:
        from .render.text import report_text

        return report_text(self)

    def __repr__(self) -> str:
        s = self.summary()
        return (
            f"<Report {s['model']!r} on {s['mesh']}: {s['variables']} variables "
            f"({s['sharded']} sharded, {s['replicated']} replicated, {s['failing']} failing), "
            f"{s['problems']['error']} errors, {s['problems']['warning']} warnings>"
        )
