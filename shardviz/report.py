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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from .checks import memory_parts, needed_bytes
from .errors import SEVERITIES, OutOfMemory, Problem, ShardvizError
from .format import plural
from .geometry import MeshModel, TensorGeometry
from .layouts import OutputLayout, VariableLayout
from .model_scan import Scan
from .plan import Plan
from .target import Target, parse_target

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from numpy.typing import DTypeLike
    from rich.console import Console, ConsoleOptions, RenderResult

    from .trace import Activation, Trace

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
RULE_COLUMNS = ["index", "key", "axes", "kind", "matches", "wins", "status", "level", "feedback",
                "ranks"]
PROBLEM_COLUMNS = ["severity", "kind", "path", "rule", "layer", "message", "hint"]
ACTIVATION_COLUMNS = [
    "path", "label", "layer", "layer_class", "call", "output", "shape", "dtype", "rule",
    "requested_spec", "actual_spec", "shard_shape", "bytes_per_device", "honored", "ok", "padded",
    "partial", "actual_note", "returned_spec",
]
COLLECTIVE_COLUMNS = [
    "kind", "layer", "pass", "axes", "over", "complete", "group_size", "groups", "bytes_per_device",
    "result_bytes", "operand_bytes", "async", "name", "op_name", "network", "seconds",
    "source", "source_from", "site", "operands", "crosses_hosts",
]
HOST_COLUMNS = ["process", "devices", "device_count", "variable_bytes", "batch_rows",
                "cross_host_collectives", "cross_host_bytes"]
MEMORY_COLUMNS = [
    "device", "variable_bytes", "optimizer_bytes", "input_bytes", "activation_bytes",
    "argument_bytes", "output_bytes", "temp_bytes", "alias_bytes", "unread_bytes",
    "total_bytes", "capacity_bytes", "fits", "estimate",
]
FRAMES = ("variables", "outputs", "rules", "devices", "hosts", "problems", "activations",
          "collectives", "memory", "optimizer_variables", "estimate")
"""Every DataFrame a Report has, by attribute name: what the JSON export
writes and what every frame test covers."""
OPTIMIZER_COLUMNS = ["path", "reference", "shape", "dtype", "spec", "shard_shape",
                     "bytes_per_device"]


def _dtype(values: Sequence[object]) -> DTypeLike:
    if values and all(isinstance(v, bool) for v in values):
        return bool
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "int64"
    if values and all(isinstance(v, float) for v in values):
        return "float64"
    return object


def _column(values: Sequence[object], dtype: DTypeLike) -> pd.Series | np.ndarray:
    # np.fromiter keeps tuples as single objects; an explicit object Series
    # stops pandas from turning strings-and-None into a string column.
    array = np.fromiter(values, dtype=np.dtype(dtype), count=len(values))
    return pd.Series(array, dtype=object, copy=False) if array.dtype == object else array


def _merge_spans(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Touching ``(start, stop)`` ranges merged: ``[(0, 2), (2, 4)]`` → ``[(0, 4)]``."""
    out: list[tuple[int, int]] = []
    for start, stop in spans:
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((start, stop))
    return out


def _stderr_line(line: str | None) -> None:
    """One line on stderr, rewritten in place as it changes; None ends it."""
    import sys

    if line is None:
        if getattr(_stderr_line, "shown", False):
            sys.stderr.write("\n")
            sys.stderr.flush()
        _stderr_line.shown = False  # type: ignore[attr-defined]
        return
    sys.stderr.write("\r" + line[:119].ljust(getattr(_stderr_line, "width", 0)))
    sys.stderr.flush()
    _stderr_line.width = min(len(line), 119)  # type: ignore[attr-defined]
    _stderr_line.shown = True  # type: ignore[attr-defined]


def frame(cols: dict, columns: list, dtypes: dict | None = None) -> pd.DataFrame:
    """A DataFrame with integer and boolean columns typed, and every other
    column kept as Python objects (tuples, strings, None), rather than
    letting pandas turn None into NaN."""
    dtypes = dtypes or {}
    return pd.DataFrame(
        {c: _column(cols[c], dtypes.get(c) or _dtype(cols[c])) for c in columns},
        columns=columns, copy=False,
    )


class Report:
    """The analysis of one model under one plan. Build it with
    :func:`shardviz.analyze`."""

    def __init__(self, *, plan: Plan, scan: Scan, mesh: MeshModel,
                 variable_layouts: list[VariableLayout], output_layouts: list[OutputLayout],
                 problems: list[Problem], rule_usage: list[dict], device_count: int,
                 seconds: float = 0.0, trace: Trace | None = None,
                 trace_error: ShardvizError | None = None, target: Target | None = None,
                 arguments: dict | None = None,
                 reanalyse: Callable[..., Report] | None = None) -> None:
        self.plan = plan
        self.scan = scan
        self.mesh = mesh
        self.variable_layouts = variable_layouts
        self.output_layouts = output_layouts
        self.problem_list = sorted(problems, key=lambda p: SEVERITIES.index(p.severity))
        self.rule_usage = rule_usage
        self.device_count = device_count
        self.seconds = seconds
        self.trace = trace
        """The :class:`~shardviz.trace.Trace` of the forward pass, or None."""
        self.trace_error = trace_error
        """Why the forward pass could not run (a ShardvizError), or None."""
        self.target: Target = target if target is not None else parse_target("cpu")
        """The hardware planned for (:class:`~shardviz.target.Target`)."""
        self.arguments: dict = dict(arguments or {})
        """The keyword arguments of :func:`~shardviz.analyze` besides the model
        and the plan (inputs, target, ...): what a counterfactual re-analysis
        repeats."""
        self._reanalyse = reanalyse
        """:func:`~shardviz.analyze` itself, handed in by it, for why() to
        analyse other plans like this one (the Report does not import it)."""
        self._explanations: dict[int, Any] = {}
        self._counterfactuals: dict[Any, Report] = {}  # plans why() compiled

    @functools.cached_property
    def _by_path(self) -> dict[str, VariableLayout]:
        return {vl.info.path: vl for vl in self.variable_layouts}

    # ------------------------------------------------------------ frames
    @functools.cached_property
    def variables(self) -> pd.DataFrame:
        """One row per model variable, in Keras's order.

        Columns: ``path`` (the variable path rules match); ``layer`` (its
        layer's path); ``shape``; ``dtype``; ``params`` (elements); ``bytes``
        (whole tensor); ``spec`` (the layout Keras applies, padded to the
        rank, or, for ``status == "error"``, the axes it would refuse);
        ``rule`` (the winning key, ``"<own layout>"`` when the variable
        carries one, or None); ``match`` (``"exact"``, ``"regex"``,
        ``"none"``, ``"conflict"``, ``"error"`` or ``"own"``);
        ``also_matched`` (other keys that fullmatch it); ``shard_shape``
        (None for an error); ``bytes_per_device``; ``replicated_over`` (mesh
        axes that hold copies); ``replicas``; ``trainable``; ``status``
        (``"sharded"``, ``"replicated"`` or ``"error"``: Keras would raise).
        """
        rules = self.plan.rules
        layouts = self.variable_layouts
        static = self.scan.variable_columns
        ok = [vl.error is None for vl in layouts]
        geoms = [vl.geometry for vl in layouts]
        cols = dict(static)
        cols["bytes"] = [g.bytes for g in geoms]
        cols["spec"] = [g.spec if k else tuple(vl.axes) for g, k, vl in zip(geoms, ok, layouts)]
        cols["rule"] = [
            rules[cast(int, vl.match.rule)].key if vl.source == "rule"
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
        """One row per layer output path Keras looks up (``<layer>/output``),
        in call order.

        Columns: ``path``; ``layer``; ``layer_class``; ``rule`` (the key that
        constrains it, or None); ``match`` (how the key matched);
        ``requested_spec`` (the axes that rule asks for, or None).
        """
        rules = self.plan.rules
        cols: dict[str, list] = {c: [] for c in OUTPUT_COLUMNS}
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
        """One row per rule of the plan, in order.

        Columns: ``index``; ``key`` (the regex Keras fullmatches); ``axes``;
        ``kind`` (``"variable"`` or ``"output"``, an ``/output`` key);
        ``matches`` (paths it fullmatches) and ``wins`` (paths whose layout it
        sets); ``status`` (``"used"``, ``"unused"``, ``"shadowed"`` by an
        exact key, ``"conflicted"``, ``"blocked"`` by an invalid key, or
        ``"invalid"``); ``level`` (``"ok"``, ``"warn"``, ``"error"``) and
        ``feedback``, the short text an editor shows beside the rule; and
        ``ranks``, the ranks of the tensors it matches.
        """
        from .checks import rule_feedback

        feedback = rule_feedback(self.plan, self.variable_layouts, self.output_layouts,
                                 self.rule_usage, self.ranks_of)
        cols: dict[str, list] = {c: [] for c in RULE_COLUMNS}
        for u, rule, f in zip(self.rule_usage, self.plan.rules, feedback):
            cols["index"].append(u["index"])
            cols["key"].append(rule.key)
            cols["axes"].append(rule.axes)
            cols["kind"].append("output" if rule.is_output else "variable")
            for c in ("matches", "wins", "status"):
                cols[c].append(u[c])
            for c in ("level", "feedback", "ranks"):
                cols[c].append(f[c])
        return frame(cols, RULE_COLUMNS, {"index": "int64", "matches": "int64", "wins": "int64"})

    def ranks_of(self, key: str) -> list[int]:
        """The ranks of the variables and layer outputs ``key`` fullmatches,
        as Keras matches it (an invalid regex matches nothing). Cached per
        key on the scan."""
        memo = self.scan.rank_memo
        found = memo.get(key)
        if found is None:
            ranks: set[int] = set()
            for matcher, shapes in ((self.scan.variable_matcher,
                                     [v.shape for v in self.scan.variables]),
                                    (self.scan.output_matcher,
                                     [o.shapes[0] if o.shapes else None
                                      for o in self.scan.outputs])):
                hits = matcher.hits(key)
                if isinstance(hits, str):
                    ranks = set()
                    break
                ranks.update(len(s) for i in hits if (s := shapes[i]) is not None)
            found = memo[key] = sorted(ranks)
        return list(found)

    @functools.cached_property
    def problems(self) -> pd.DataFrame:
        """One row per problem, errors first.

        Columns: ``severity`` (``"error"``: Keras would refuse, or the pass
        failed; ``"warning"``: it runs, but not as meant; ``"info"``);
        ``kind`` (see ``shardviz.errors.KINDS``); ``path``, ``rule`` and
        ``layer`` where it applies (else None); ``message``; ``hint`` (what to
        change).
        """
        cols = {c: [getattr(p, c) for p in self.problem_list] for c in PROBLEM_COLUMNS}
        return frame(cols, PROBLEM_COLUMNS)

    @functools.cached_property
    def devices(self) -> pd.DataFrame:
        """One row per device of the mesh.

        Columns: ``device`` (its id); ``coords`` (its position in the mesh);
        one column per mesh axis with its coordinate on that axis;
        ``variable_bytes`` (the plan's variable bytes on it); ``process``
        (the host that owns it, see :attr:`hosts`). Every device of
        a NamedSharding holds one shard of ``shard_shape``, so each variable
        adds its ``bytes_per_device`` to every device.
        """
        per_device = self.variable_bytes_per_device
        owner = dict(zip((int(i) for i in self.mesh.device_ids.flat), self.process_of_position))
        rows = []
        for device, coords in sorted(self.mesh.coords.items()):
            row = {"device": device, "coords": coords}
            row.update(dict(zip(self.mesh.axis_names, coords)))
            row["variable_bytes"] = per_device
            row["process"] = owner.get(device, 0)
            rows.append(row)
        return pd.DataFrame(rows)

    @functools.cached_property
    def process_of_position(self) -> tuple[int, ...]:
        """Per mesh position (flat), the process (host) that owns the device:
        contiguous groups in JAX's order with ``processes=N``, the topology's
        hosts on a TPU target, else 0 everywhere."""
        n = self.processes
        if n is not None:
            per = self.mesh.size // n
            return tuple(p // per for p in range(self.mesh.size))
        if self.mesh.devices is not None:
            return tuple(int(getattr(d, "process_index", 0) or 0) for d in self.mesh.devices.flat)
        return (0,) * self.mesh.size

    @property
    def processes(self) -> int | None:
        """The process count given to :func:`~shardviz.analyze`, or None."""
        return self.arguments.get("processes")

    @property
    def host_count(self) -> int:
        return max(self.process_of_position) + 1

    @functools.cached_property
    def hosts(self) -> pd.DataFrame:
        """One row per process (host) that owns devices of the mesh.

        Columns: ``process``; ``devices`` (the device ids it owns, in mesh
        order); ``device_count``; ``variable_bytes`` (the sum over its
        devices of the plan's variable bytes); ``batch_rows`` (the rows of
        the global batch its devices hold, as ``(start, stop)`` ranges, when
        the forward pass ran); ``cross_host_collectives`` and
        ``cross_host_bytes`` (the collectives whose groups include devices
        of another host, and their bytes per device).
        """
        ids = [int(i) for i in self.mesh.device_ids.flat]
        owner = self.process_of_position
        per_device = self.variable_bytes_per_device
        rows_of = self._batch_rows_by_position()
        involved: dict[int, list[int]] = {}
        for c in (self.trace.collectives if self.trace else []):
            if not self._crosses_hosts(c):
                continue
            hosts = {owner[p] for g in c.groups for p in g if p < len(owner)} or \
                set(range(self.host_count))
            for h in hosts:
                involved.setdefault(h, []).append(c.bytes_per_device)
        out = []
        for process in range(self.host_count):
            positions = [p for p in range(self.mesh.size) if owner[p] == process]
            spans = sorted({rows_of[p] for p in positions}) if rows_of else None
            out.append({
                "process": process, "devices": tuple(ids[p] for p in positions),
                "device_count": len(positions), "variable_bytes": per_device * len(positions),
                "batch_rows": tuple(_merge_spans(spans)) if spans is not None else None,
                "cross_host_collectives": len(involved.get(process, [])),
                "cross_host_bytes": int(sum(involved.get(process, []))),
            })
        return pd.DataFrame(out, columns=HOST_COLUMNS)

    def _batch_rows_by_position(self) -> dict[int, tuple[int, int]] | None:
        """Per mesh position, the rows of the first input it holds."""
        if self.trace is None:
            return None
        import jax

        leaves = jax.tree_util.tree_leaves(self.trace.input_specs)
        if not leaves or not leaves[0].shape:
            return None
        spec = leaves[0]
        ids = [int(i) for i in self.mesh.device_ids.flat]
        position = {d: p for p, d in enumerate(ids)}
        out = {}
        for device, index in spec.sharding.devices_indices_map(tuple(spec.shape)).items():
            rows = index[0]
            start = rows.start or 0
            stop = rows.stop if rows.stop is not None else spec.shape[0]
            out[position[device.id]] = (int(start), int(stop))
        return out

    @functools.cached_property
    def activations(self) -> pd.DataFrame:
        """One row per output of every call of every layer in the traced
        pass, in call order: the layout an ``/output`` rule requested and
        the one XLA gave it. Empty without a forward pass.

        Columns: ``path`` (``<layer>/output``); ``label`` (the path with the
        output index and call number when they matter); ``layer``;
        ``layer_class``; ``call`` (which call of a reused layer); ``output``
        (which output of a multi-output layer); ``shape``; ``dtype``;
        ``rule``; ``requested_spec``; ``actual_spec`` (XLA's layout; a dim
        split over part of an axis shows a ``SubAxis`` such as
        ``'model:(1)2'``; None when no mesh axes describe it);
        ``shard_shape``; ``bytes_per_device``; ``honored`` (None when no rule
        asked); ``ok`` (``""``, ``"yes"``, ``"dropped"`` or ``"uneven"``, the
        check in words); ``padded`` (XLA pads an uneven split); ``partial``
        (split over part of an axis); ``actual_note`` (that layout in words);
        ``returned_spec`` (for a model output, the layout the pass returns).
        """
        cols: dict[str, list] = {c: [] for c in ACTIVATION_COLUMNS}
        for a in (self.trace.activations if self.trace else []):
            ok = {None: "", True: "yes", False: "dropped"}[a.honored]
            if a.uneven and a.honored:
                ok = "uneven"
            for c, v in (("path", a.path), ("label", a.label), ("ok", ok), ("layer", a.layer),
                         ("layer_class", a.layer_class),
                         ("call", a.call), ("output", a.index), ("shape", a.shape),
                         ("dtype", a.dtype),
                         ("rule", a.rule), ("requested_spec", a.requested_spec),
                         ("actual_spec", a.actual_spec), ("shard_shape", a.shard_shape),
                         ("bytes_per_device", a.bytes_per_device), ("honored", a.honored),
                         ("padded", a.padded), ("partial", a.partial),
                         ("actual_note", a.actual_note), ("returned_spec", a.returned_spec)):
                cols[c].append(v)
        return frame(cols, ACTIVATION_COLUMNS, {"output": "int64", "call": "int64",
                                                "padded": bool, "partial": bool,
                                                "honored": object})

    @functools.cached_property
    def collectives(self) -> pd.DataFrame:
        """One row per collective in the compiled program (the forward pass,
        or the whole train step with ``train_step=True``), read from the
        compiled HLO. Empty without a forward pass.

        Columns: ``kind`` (``all-reduce``, ``all-gather``,
        ``reduce-scatter``, ``all-to-all``, ``collective-permute``);
        ``layer`` (the Keras layer where the layouts meet: the op a gather
        feeds, or the op whose partial sums a reduction adds up; else the
        layers its name scope names); ``pass`` (``forward``,
        ``backward`` or ``update``); ``axes`` (the mesh axes its groups run
        over); ``over`` (the same in words); ``complete`` (False when groups
        cover only part of those axes); ``group_size``; ``groups``;
        ``bytes_per_device`` (the larger of the buffer a device holds before and after
        it: the gathered size of an all-gather, the reduced size of a reduce-scatter);
        ``result_bytes``; ``operand_bytes``; ``async``; ``name`` (the HLO
        instruction); ``op_name`` (its JAX name scope); ``network`` (the
        link it runs over: ``"ici"`` or ``"dcn"`` on a TPU target,
        ``"nvlink"`` or ``"infiniband"`` on a GPU target, ``"host"`` on the
        simulated CPU); ``seconds`` (an estimate from the link's published
        bandwidth and the cost rules of :func:`shardviz.target.collective_seconds`;
        None on the CPU); ``source`` (``file:line`` of the Python behind it,
        from the compiled program's stack frames: a layer's ``call``, or the
        user's own line); ``source_from`` (whose metadata gave ``source``:
        ``"itself"``, ``"the op it feeds"`` or ``"the op that feeds it"``);
        ``site`` (the op_name of the op where the layouts meet); ``operands``
        (what meets there: variable paths, ``<layer>/output`` for another
        layer's output, ``input:<name>`` for a model input, ``inside
        <layer>: <op>`` for a value inside an enclosing layer's call).
        ``crosses_hosts`` (whether a group holds devices of several
        processes; see :attr:`hosts`). :meth:`why` explains a row.
        """
        cols: dict[str, list] = {c: [] for c in COLLECTIVE_COLUMNS}
        for c in (self.trace.collectives if self.trace else []):
            for k, v in (("kind", c.kind), ("layer", c.layer), ("pass", c.pass_),
                         ("axes", c.axes), ("complete", c.complete),
                         ("over", (", ".join(c.axes) or "—")
                          + ("" if c.complete else f" (groups of {c.group_size})")),
                         ("group_size", c.group_size), ("groups", len(c.groups)),
                         ("bytes_per_device", c.bytes_per_device),
                         ("result_bytes", c.result_bytes), ("operand_bytes", c.operand_bytes),
                         ("async", c.async_), ("name", c.name), ("op_name", c.op_name),
                         ("network", c.network or "host"), ("seconds", c.seconds),
                         ("source", c.source), ("source_from", c.source_from),
                         ("site", c.site), ("operands", c.operands),
                         ("crosses_hosts", self._crosses_hosts(c))):
                cols[k].append(v)
        return frame(cols, COLLECTIVE_COLUMNS, {
            "complete": bool, "async": bool, "crosses_hosts": bool,
            "group_size": "int64", "groups": "int64",
            "bytes_per_device": "int64", "result_bytes": "int64", "operand_bytes": "int64",
            "seconds": object})

    def _crosses_hosts(self, c: Any) -> bool:
        owner = self.process_of_position
        if max(owner) == 0:
            return False
        if c.network == "dcn" and not c.groups:
            return True
        return any(len({owner[p] for p in group if p < len(owner)}) > 1 for group in c.groups)

    @functools.cached_property
    def memory(self) -> pd.DataFrame:
        """One row per device: the plan's variable bytes, and XLA's own
        memory analysis of the compiled program.

        Columns: ``device``; ``variable_bytes`` (the plan's layouts);
        ``optimizer_bytes`` and ``input_bytes`` (see :attr:`memory_parts`);
        ``activation_bytes`` (the sum over every layer output: more than is
        live at once, which XLA's temporaries hold); ``argument_bytes``, ``output_bytes``,
        ``temp_bytes`` and ``alias_bytes`` (XLA's ``memory_analysis()``);
        ``unread_bytes`` (arguments the program never reads, which ``jit``
        drops from it, but which live on the device all the same: an untied
        output embedding in a forward pass, say); ``total_bytes`` (arguments
        + unread + outputs + temporaries − aliased: the sum of
        :attr:`memory_parts`). The
        XLA columns are None without a forward pass. ``capacity_bytes``: the
        memory a program may use on the target chip (on TPU the compiler's own
        figure, a little below the chip's HBM; on GPU the published HBM; None
        on the simulated CPU); ``fits``: whether
        the device needs no more than that (``total_bytes``, or the variables
        alone without a forward pass; None on the CPU); ``estimate``: True
        when the figures come from a compiler for other devices than the
        target's (a GPU target, compiled for the simulated CPUs).
        """
        cols: dict[str, list] = {c: [] for c in MEMORY_COLUMNS}
        mem = self.trace.memory if self.trace else None
        parts = self.memory_parts
        activations = sum(a.bytes_per_device or 0 for a in self.trace.activations) \
            if self.trace else 0
        capacity = self.mesh.capacity_bytes
        needed = needed_bytes(self.variable_bytes_per_device, self.trace)
        oom = self.trace_error if isinstance(self.trace_error, OutOfMemory) else None
        refused = oom is not None
        if oom is not None and oom.needed:
            needed = oom.needed  # the compiler's own figure
        estimate = self.target.estimated
        for device in sorted(self.mesh.coords):
            cols["device"].append(device)
            cols["variable_bytes"].append(self.variable_bytes_per_device)
            for c, part in (("optimizer_bytes", "optimizer state"), ("input_bytes", "inputs")):
                cols[c].append(parts.get(part, 0) if mem else None)
            cols["activation_bytes"].append(activations if mem else None)
            for c in ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes",
                      "unread_bytes"):
                cols[c].append(mem.get(c, 0) if mem else None)
            cols["total_bytes"].append(needed if mem or refused else None)
            cols["capacity_bytes"].append(capacity)
            cols["fits"].append(False if refused else
                                None if capacity is None else needed <= capacity)
            cols["estimate"].append(estimate)
        dtypes = {c: "int64" if mem else object for c in MEMORY_COLUMNS}
        dtypes["device"] = dtypes["variable_bytes"] = "int64"
        dtypes["capacity_bytes"] = "int64" if capacity is not None else object
        dtypes["fits"] = bool if capacity is not None or refused else object
        if refused:
            dtypes["total_bytes"] = "int64" if oom is not None and oom.needed else object
        dtypes["estimate"] = bool
        return frame(cols, MEMORY_COLUMNS, dtypes)

    @property
    def fits(self) -> bool | None:
        """The one verdict: False when the compiler refused the program for
        memory or a chip needs more than it may use, True when every chip
        has room, None on the simulated CPU. Every view reads this (through
        ``report.memory.fits``)."""
        fits = self.memory["fits"]
        if not len(fits) or fits.isna().all():
            return None
        return bool(fits.all())

    @functools.cached_property
    def memory_parts(self) -> dict[str, int]:
        """Bytes per device by what holds them, in drawing order; they add
        up to ``report.memory.total_bytes``, the figure the verdict reads:
        ``variables`` (every model variable under the plan's layouts, read
        by the program or not), and after a forward pass ``optimizer
        state`` (train step), ``inputs`` (every other argument: the batch,
        labels and metric state, with any padding XLA gives the arguments),
        ``outputs`` (XLA's output bytes less those aliased to arguments) and
        ``temporaries`` (XLA's temp bytes, which hold the layer outputs while
        they are live). Parts that are zero are left out, except variables.
        """
        return memory_parts(self.variable_bytes_per_device, self.trace)

    @property
    def pass_name(self) -> str | None:
        """``"abstract forward pass"``, ``"concrete train step"``, ..., or
        None when nothing was traced."""
        if self.trace is None:
            return None
        return f"{self.trace.mode} {'train step' if self.trace.train_step else 'forward pass'}"

    @property
    def model_name(self) -> str:
        return getattr(self.scan.model, "name", None) or type(self.scan.model).__name__

    @property
    def notes(self) -> tuple[str, ...]:
        """What the scan noticed about the model (variables that carry their
        own layout, output paths that could not be found, ...)."""
        return tuple(self.scan.notes)

    @functools.cached_property
    def optimizer_variables(self) -> pd.DataFrame:
        """With ``train_step=True``: one row per optimizer slot and its layout,
        which Keras takes from the variable it mirrors. Empty otherwise.

        Columns: ``path`` (the slot's path, e.g. ``adam/up_kernel_momentum``);
        ``reference`` (the model variable it mirrors, whose layout it takes,
        or None for a slot such as the step counter, which the rules lay
        out); ``shape``; ``dtype``; ``spec``; ``shard_shape``;
        ``bytes_per_device``.
        """
        cols: dict[str, list] = {c: [] for c in OPTIMIZER_COLUMNS}
        for o in (self.trace.optimizer_variables if self.trace else []):
            for c in OPTIMIZER_COLUMNS:
                cols[c].append(getattr(o, c))
        return frame(cols, OPTIMIZER_COLUMNS, {"bytes_per_device": "int64"})

    @functools.cached_property
    def estimate(self) -> pd.DataFrame:
        """How long one step takes on the target, and what bounds it: one row
        per bound, every figure an estimate unless ``source`` says the
        compiler gave it.

        Columns: ``part`` (``"compute"``: flops / peak flops; ``"memory"``:
        bytes accessed / HBM bandwidth; ``"collectives"``: the sum of
        ``report.collectives.seconds``; ``"compiler"``: the TPU compiler's own
        ``optimal_seconds``, when it gives one); ``seconds``; ``bound`` (True
        for the largest of compute, memory and collectives: what limits the
        step); ``source`` (the formula, or the compiler). Empty without a
        forward pass or on the simulated CPU.
        """
        columns = ["part", "seconds", "bound", "source"]
        hardware = self.target.hardware
        if self.trace is None or not self.target.timed:
            return pd.DataFrame(columns=columns)
        mem = self.trace.memory
        flops, accessed = mem.get("flops"), mem.get("bytes_accessed")
        rows = []
        if flops is not None and hardware.peak_flops:
            rows.append(["compute", flops / hardware.peak_flops, False,
                         f"{flops:.3g} flops / {hardware.peak_flops:.3g} peak bf16 FLOP/s"])
        if accessed is not None and hardware.hbm_bandwidth:
            rows.append(["memory", accessed / hardware.hbm_bandwidth, False,
                         f"{accessed:.3g} bytes accessed / {hardware.hbm_bandwidth:.3g} B/s HBM"])
        timed = [c.seconds for c in self.trace.collectives if c.seconds is not None]
        rows.append(["collectives", float(sum(timed)), False,
                     f"sum over {len(timed)} collectives of bytes / link bandwidth "
                     "(published figures), with a latency floor"])
        if rows:
            top = max(range(len(rows)), key=lambda i: rows[i][1])
            rows[top][2] = True
        if mem.get("optimal_seconds") is not None:
            rows.append(["compiler", mem["optimal_seconds"], False,
                         f"the {hardware.name} compiler's optimal_seconds"])
        return pd.DataFrame(rows, columns=columns)

    @property
    def estimate_checked(self) -> str:
        """How far the step-time estimate may be from a real step, and why:
        what real chips of the target's kind measured against it, or that
        none did (:data:`shardviz.target.CHIP_CHECKS`)."""
        from .target import estimate_checks

        train = bool(self.trace and self.trace.train_step)
        checks = estimate_checks(self.target.hardware, train)
        unknown = ("It does not model kernel efficiency, Keras's per-step host work, nor "
                   "communication overlapping compute.")
        if not checks:
            return ("Not checked against a real chip of this kind: a roofline from published "
                    f"peak figures. {unknown}")
        measured = "; ".join(c.describe() for c in checks)
        return f"Measured {measured}. {unknown}"

    @property
    def flops(self) -> float | None:
        """Flops per device of the compiled pass, when XLA reports them."""
        return self.trace.memory.get("flops") if self.trace else None

    @property
    def values(self) -> dict:
        """Concrete mode: variable path to its real sharded ``jax.Array``.

        Pass one to ``jax.debug.visualize_array_sharding`` to see it as JAX does.
        """
        if self.trace is None or self.trace.variables is None:
            raise ShardvizError(
                "This report holds no arrays: the forward pass was not run in concrete mode.",
                hint="Call shardviz.analyze(model, plan, inputs=arrays, mode='concrete').",
            )
        return self.trace.variables

    @property
    def output_values(self) -> Any:
        """Concrete mode: the model's sharded outputs (``jax.Array``s)."""
        if self.trace is None or self.trace.variables is None:
            return self.values  # raises, saying why
        return self.trace.outputs

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

    def replicated_large(self, threshold: int) -> list[Problem]:
        """``replicated-large`` problems at another threshold (bytes) than the
        one the report was made with."""
        from .checks import replicated_large

        return replicated_large(self.variable_layouts, self.plan, self.mesh, threshold)

    def problems_of(self, kind: str) -> list[Problem]:
        return [p for p in self.problem_list if p.kind == kind]

    # ------------------------------------------------------------ lookups
    @property
    def paths(self) -> list[str]:
        return list(self._by_path)

    def variable(self, path: str) -> VariableLayout:
        """The layout of the variable at ``path``; a missing path gives an
        error that suggests the nearest paths."""
        self._check_path(path)
        try:
            return self._by_path[path]
        except KeyError:
            raise self._unknown_path(path) from None

    def output(self, path: str) -> OutputLayout | None:
        """The rule lookup of the layer output path ``path`` (an
        ``.../output`` path), or None when the model has no such path."""
        return self._outputs_by_path.get(path)

    @functools.cached_property
    def _outputs_by_path(self) -> dict[str, OutputLayout]:
        return {ol.info.path: ol for ol in self.output_layouts}

    def activation(self, path: str, index: int = 0, call: int = 0) -> Activation:
        """The traced layer output at ``path`` (an ``.../output`` path):
        output ``index`` of call ``call`` of the layer."""
        self._check_path(path)
        mine = [a for a in (self.trace.activations if self.trace else []) if a.path == path]
        for a in mine:
            if a.index == index and a.call == call:
                return a
        if mine:
            have = sorted({(a.call, a.index) for a in mine})
            raise ShardvizError(
                f"Layer output {path!r} has no output {index!r} in call {call!r}.",
                hint="It has " + ", ".join(f"call={c}, index={i}" for c, i in have) + ".",
                path=path)
        raise self._unknown_path(path)

    def _check_path(self, path: object) -> None:
        if not isinstance(path, str):
            raise self._unknown_path(path)

    def geometry(self, path: str, index: int = 0, call: int = 0) -> TensorGeometry:
        """The shards of the variable at ``path``, or of a traced layer
        output (as XLA laid it out)."""
        self._check_path(path)
        if path in self._by_path:
            return self._by_path[path].geometry
        # Any: a traced output is taken to have XLA's spec and shard shape (not None).
        a: Any = self.activation(path, index, call)
        self._refuse_uneven(a)
        import math

        from .geometry import itemsize

        replicated = a.replicated_over
        sizes = dict(self.mesh.mesh)
        replicas = math.prod(getattr(r, "size", None) or sizes.get(r, 1) for r in replicated)
        return TensorGeometry(
            shape=a.shape, dtype=a.dtype, axes=a.actual_spec, spec=a.actual_spec,
            shard_shape=a.shard_shape, bytes=math.prod(a.shape) * itemsize(a.dtype),
            bytes_per_device=a.bytes_per_device, replicated_over=replicated, replicas=replicas,
            mesh=self.mesh, sharded=any(e is not None for e in a.actual_spec), actual=a.actual)

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

    def indices(self, path: str, index: int = 0, call: int = 0) -> dict:
        """Device id to the index ranges it holds, for a variable or a traced
        layer output (from JAX's ``devices_indices_map``)."""
        self._check_path(path)
        if path in self._by_path:
            return self._by_path[path].geometry.indices()
        a = self.activation(path, index, call)
        self._refuse_uneven(a)
        return {d.id: idx for d, idx in a.actual.devices_indices_map(a.shape).items()}

    def _refuse_uneven(self, a: Activation) -> None:
        """JAX describes no per-device index ranges for an uneven split, which
        XLA may choose for an output whether or not a rule asked for it."""
        if not a.uneven_actual:
            return
        d, n, ax, k = a.uneven_actual[0]
        raise ShardvizError(
            f"The output {a.path!r} {a.shape} is split unevenly: dim {d} of size {n} over axis "
            f"{ax!r} of size {k}. XLA pads its shards to {a.shard_shape}, and JAX gives no "
            "per-device index ranges for an uneven split, so it cannot be drawn.",
            hint="See report.problems for the rule that asks for it, and make the dim divide.",
            path=a.path, layer=a.layer)

    # ----------------------------------------------------------- pictures
    def show(self, path: str, *, rows: int | None = None, cols: int | None = None,
             index: int = 0, call: int = 0) -> Figure:
        """A picture of how the tensor at ``path`` (a variable, or a traced
        ``.../output``) lands on the devices. Any rank: pick the tensor dims
        drawn as ``rows`` and ``cols``; other split dims become panels.
        Returns a matplotlib Figure."""
        from .render.mpl import tensor_figure

        self._check_path(path)
        spec: tuple | None
        if path in self._by_path:
            vl = self._by_path[path]
            shape, dtype, spec = vl.info.shape, vl.info.dtype, vl.geometry.spec
            title = path + ("  (Keras would refuse this layout; shown replicated)"
                            if vl.error is not None else "")
        else:
            a = self.activation(path, index, call)
            shape, dtype, spec = a.shape, a.dtype, a.actual_spec
            title = path + (f" (call {call})" if call else "")
        return tensor_figure(shape, dtype, self.indices(path, index, call), coords=self.mesh.coords,
                             title=title, spec=spec, rows=rows, cols=cols)

    def text(self, path: str, index: int = 0, call: int = 0) -> str:
        """What ``jax.debug.visualize_sharding`` prints for the tensor at
        ``path``: JAX's own drawing, for 1-D and 2-D tensors."""
        from .render.text import jax_text

        self._check_path(path)
        if path in self._by_path:
            g = self._by_path[path].geometry
            shape, sharding = g.shape, g.sharding
        else:
            a = self.activation(path, index, call)
            self._refuse_uneven(a)
            shape, sharding = a.shape, a.actual
        if len(shape) not in (1, 2):
            raise ShardvizError(
                f"JAX draws only 1-D and 2-D tensors as text; {path!r} has rank {len(shape)} "
                f"{shape}.", hint=f"Use report.show({path!r}) for a picture of any rank.",
                path=path)
        if self.mesh.abstract:
            raise ShardvizError(
                f"JAX needs real devices to draw a sharding, and the mesh {self.plan.mesh_dict} "
                f"is larger than the {self.device_count} devices here.",
                hint=f"Use report.show({path!r}), which works on abstract meshes.", path=path)
        return jax_text(shape, sharding)

    def show_mesh(self) -> Figure:
        """The device grid of the plan's mesh; with several hosts
        (``processes=``, or a TPU target's topology) each device says its
        host, and lines separate the hosts."""
        from .render.mpl import mesh_figure

        host_of = dict(zip((int(i) for i in self.mesh.device_ids.flat),
                           self.process_of_position))
        return mesh_figure(self.mesh, host_of)

    def show_memory(self) -> Figure:
        """Bytes per device, stacked by what holds them."""
        from .render.mpl import memory_figure

        return memory_figure(self)

    def show_flow(self, max_layers: int = 60, explain: bool = False) -> Figure:
        """Layers in call order, their output layouts, and the collectives,
        numbered as in :attr:`collectives`. Collectives whose explanation
        found a fix are marked "fix" (green); ``explain=True`` explains every
        collective first (see :meth:`why`)."""
        from .render.mpl import flow_figure

        if explain and self.trace is not None:
            self.explanations()
        return flow_figure(self, max_layers)

    def show_grid(self, paths: Sequence[str] | None = None, columns: int = 5) -> Figure:
        """Every variable's (or the given paths') tiles in one figure,
        ``columns`` to a row."""
        from .render.mpl import grid_figure

        return grid_figure(self, paths, columns)

    def why(self, which: object,
            progress: bool | Callable[[str], object] | None = None) -> Any:
        """Why collective ``which`` (an index into :attr:`collectives`, or one
        of its rows) is there, and what removes it: an
        :class:`~shardviz.why.Explanation` with ``text``, ``rules``,
        ``source`` and a ``fix`` plan (or None, with the reason). Finding
        the fix compiles a few counterfactual plans (on a train step, their
        forward passes); the result is kept, and so is each plan compiled,
        for the other collectives' explanations. While it compiles, one
        line on stderr says which plan it is trying: on a terminal by
        default, always with ``progress=True``, never with ``False``; a
        callable (``print``, say) hears each line instead. Interrupting it
        (Ctrl-C) leaves the report as it was."""
        from .why import _row, explain_collective

        index, _ = _row(self, which)
        if index not in self._explanations:
            if progress is None:
                import sys

                progress = sys.stderr.isatty()
            say = _stderr_line if progress is True else progress or None
            try:
                self._explanations[index] = explain_collective(self, index, progress=say)
            finally:
                if say is _stderr_line:
                    _stderr_line(None)
        return self._explanations[index]

    def explanations(self) -> list:
        """:meth:`why` for every collective, in order."""
        return [self.why(i) for i in range(len(self.collectives))]

    @property
    def explained(self) -> dict:
        """The explanations computed so far, by collective index."""
        return dict(self._explanations)

    def explain(self, path: str) -> str:
        """Why ``path`` has the layout it has, in a sentence or two."""
        from .render.explain import explain_path

        self._check_path(path)
        return explain_path(self, path)

    def _unknown_path(self, path: object) -> ShardvizError:
        if not isinstance(path, str):
            return ShardvizError(
                f"A path must be a string, got {type(path).__name__} {path!r:.60}.",
                hint="Pass a variable path such as 'dense/kernel' or a layer output path such "
                "as 'dense/output'; report.variables and report.activations list them.")
        known = self.paths + [ol.info.path for ol in self.output_layouts]
        if self.trace is not None:
            known += [a.path for a in self.trace.activations]
        known = list(dict.fromkeys(known))
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
            "target": self.target.label,
            "variables": len(self.variable_layouts),
            "sharded": statuses.count("sharded"),
            "replicated": statuses.count("replicated"),
            "failing": statuses.count("error"),
            "params": self.scan.param_count,
            "variable_bytes": self.variable_bytes,
            "variable_bytes_per_device": self.variable_bytes_per_device,
            "problems": counts,
            "traced": self.trace.mode if self.trace else None,
            "collectives": len(self.trace.collectives) if self.trace else None,
            "collective_bytes": sum(c.bytes_per_device for c in self.trace.collectives)
            if self.trace else None,
            "fits": self.fits,
        }

    def _repr_html_(self) -> str:
        from .render.html import report_html

        return report_html(self)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from .render.text import report_renderables

        yield from report_renderables(self, width=options.max_width)

    def __str__(self) -> str:
        from .render.text import report_text

        return report_text(self)

    def __repr__(self) -> str:
        s = self.summary()
        return (
            f"<Report {s['model']!r} on {s['mesh']}: {plural(s['variables'], 'variable')} "
            f"({s['sharded']} sharded, {s['replicated']} replicated, {s['failing']} failing), "
            f"{plural(s['problems']['error'], 'error')}, "
            f"{plural(s['problems']['warning'], 'warning')}>"
        )
