"""Report: everything shardviz found about one model under one plan.

The report is the one object every picture, widget and command reads. It
holds the plan, the scan, the per-variable layouts and the problems, and
offers them as pandas DataFrames (``report.variables``, ``report.rules``,
... every name in :data:`FRAMES`), each described, row and columns, in
:mod:`shardviz.report.schema` and in its own docstring (``help(Report.variables)``).

It displays itself in a notebook (``_repr_html_``) and a terminal
(``str(report)``, or ``rich.print(report)``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from ..checks import memory_parts, needed_bytes
from ..errors import SEVERITIES, OutOfMemory, Problem, ShardvizError
from ..format import plural
from ..layout.assign import OutputLayout, VariableLayout
from ..layout.geometry import MeshModel, TensorGeometry
from ..model.scan import Scan
from ..plan import Plan
from ..target import Target, parse_target
from . import schema

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from numpy.typing import DTypeLike
    from rich.console import Console, ConsoleOptions, RenderResult

    from ..trace import Activation, Trace

FRAMES = schema.NAMES
"""Every DataFrame a Report has, by attribute name (see :mod:`shardviz.report.schema`)."""


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


def frame(cols: Mapping[str, Sequence[object]], name: str, dtypes: dict | None = None,
          axes: tuple[str, ...] = ()) -> pd.DataFrame:
    """The frame :mod:`~shardviz.report.schema` calls ``name``, from ``cols`` (column
    name to values), each column of the schema's dtype (a nullable one is
    object when a value is None or there are none) or of ``dtypes[column]``
    where the builder decides at run time. Text, tuples and None stay Python
    objects, rather than pandas turning None into NaN.

    >>> frame({"part": ["memory"], "seconds": [0.5], "bound": [True], "source": ["x"]},
    ...       "estimate").dtypes.astype(str).tolist()
    ['object', 'float64', 'bool', 'object']
    """
    columns = schema.frame(name).by_name(axes)
    return pd.DataFrame(
        {c: _column(cols[c], (dtypes or {}).get(c) or _dtype(column, cols[c]))
         for c, column in columns.items()},
        columns=list(columns), copy=False,
    )


def _dtype(column: schema.Column, values: Sequence[object]) -> DTypeLike:
    if column.nullable and (not len(values) or any(v is None for v in values)):
        return object
    return column.dtype


@dataclasses.dataclass(frozen=True)
class Totals:
    """A report's totals, computed once: what ``summary()``, the planner,
    sweep, the fix search and the CLI read instead of adding frames up
    themselves."""

    bytes_per_device: int
    """The most any device needs: the compiled program's total (or the
    compiler's own figure when it refused the program), else the variables
    alone."""
    variable_bytes_per_device: int
    compiled: bool
    """Whether a pass (or train step) was compiled."""
    collectives: int | None
    """How many collectives the compiled program has; None untraced."""
    collective_bytes: int | None
    """Their bytes per device, summed; None untraced."""
    step_seconds: float | None
    """The step-time estimate's bound (the largest of compute, memory and
    collectives), or None where no step time applies."""
    fits: bool | None
    """The one verdict (``Report.fits``)."""


@dataclasses.dataclass(frozen=True)
class MeshView:
    """What renderers, widgets and notebooks read of a report's mesh: a
    frozen view, so that nothing outside the core holds JAX's mesh."""

    axis_names: tuple[str, ...]
    shape: tuple[int, ...]
    size: int
    abstract: bool
    """Whether the mesh has no devices here (layouts are exact; nothing runs)."""
    coords: dict[int, tuple[int, ...]]
    """Device id to its coordinates in the mesh."""
    slice_of_position: tuple[int, ...]
    """Per mesh position (flat), the slice (or node) it is in."""


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

    @functools.cached_property
    def _by_path(self) -> dict[str, VariableLayout]:
        return {vl.info.path: vl for vl in self.variable_layouts}

    # ------------------------------------------------------------ frames
    @functools.cached_property
    @schema.documented("variables")
    def variables(self) -> pd.DataFrame:
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
        return frame(cols, "variables")

    @functools.cached_property
    @schema.documented("outputs")
    def outputs(self) -> pd.DataFrame:
        rules = self.plan.rules
        cols: dict[str, list] = {c: [] for c in schema.frame("outputs").names()}
        for ol in self.output_layouts:
            cols["path"].append(ol.info.path)
            cols["layer"].append(ol.info.layer)
            cols["layer_class"].append(ol.info.layer_class)
            cols["rule"].append(rules[ol.match.rule].key if ol.match.rule is not None else None)
            cols["match"].append(ol.match.how)
            cols["requested_spec"].append(ol.axes)
        return frame(cols, "outputs")

    @functools.cached_property
    @schema.documented("rules")
    def rules(self) -> pd.DataFrame:
        from ..checks import rule_feedback

        feedback = rule_feedback(self.plan, self.variable_layouts, self.output_layouts,
                                 self.rule_usage, self.ranks_of)
        cols: dict[str, list] = {c: [] for c in schema.frame("rules").names()}
        for u, rule, f in zip(self.rule_usage, self.plan.rules, feedback):
            cols["index"].append(u["index"])
            cols["key"].append(rule.key)
            cols["axes"].append(rule.axes)
            cols["kind"].append("output" if rule.is_output else "variable")
            for c in ("matches", "wins", "status"):
                cols[c].append(u[c])
            for c in ("level", "feedback", "ranks"):
                cols[c].append(f[c])
        return frame(cols, "rules")

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
    @schema.documented("problems")
    def problems(self) -> pd.DataFrame:
        cols = {c: [getattr(p, c) for p in self.problem_list]
                for c in schema.frame("problems").names()}
        return frame(cols, "problems")

    @functools.cached_property
    @schema.documented("devices")
    def devices(self) -> pd.DataFrame:
        """Every device of a NamedSharding holds one shard of ``shard_shape``,
        so each variable adds its ``bytes_per_device`` to every device."""
        axes = tuple(self.mesh.axis_names)
        owner = dict(zip((int(i) for i in self.mesh.device_ids.flat), self.process_of_position))
        placed = sorted(self.mesh.coords.items())
        cols: dict[str, list] = {"device": [d for d, _ in placed], "coords": [c for _, c in placed]}
        for i, axis in enumerate(axes):
            cols[axis] = [c[i] for _, c in placed]
        cols["variable_bytes"] = [self.variable_bytes_per_device] * len(placed)
        cols["process"] = [owner.get(d, 0) for d, _ in placed]
        return frame(cols, "devices", axes=axes)

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
    @schema.documented("hosts")
    def hosts(self) -> pd.DataFrame:
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
        return frame({c: [row[c] for row in out] for c in schema.frame("hosts").names()},
                     "hosts")

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
    @schema.documented("activations")
    def activations(self) -> pd.DataFrame:
        """The layout an ``/output`` rule requested and the one XLA gave it.
        Empty without a forward pass."""
        cols: dict[str, list] = {c: [] for c in schema.frame("activations").names()}
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
        return frame(cols, "activations")

    @functools.cached_property
    @schema.documented("collectives")
    def collectives(self) -> pd.DataFrame:
        """Read from the compiled HLO; empty without a forward pass.
        :meth:`why` explains a row."""
        cols: dict[str, list] = {c: [] for c in schema.frame("collectives").names()}
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
        return frame(cols, "collectives")

    def _crosses_hosts(self, c: Any) -> bool:
        owner = self.process_of_position
        if max(owner) == 0:
            return False
        if c.network == "dcn" and not c.groups:
            return True
        return any(len({owner[p] for p in group if p < len(owner)}) > 1 for group in c.groups)

    @functools.cached_property
    @schema.documented("memory")
    def memory(self) -> pd.DataFrame:
        cols: dict[str, list] = {c: [] for c in schema.frame("memory").names()}
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
        # A refused program without the compiler's figure: the variables alone, a lower bound.
        dtypes = {"total_bytes": object} if oom is not None and not oom.needed else {}
        return frame(cols, "memory", dtypes)

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

    @functools.cached_property
    def mesh_view(self) -> MeshView:
        """The mesh as renderers and widgets read it (:class:`MeshView`)."""
        m = self.mesh
        return MeshView(tuple(m.axis_names), tuple(m.shape), m.size, m.abstract,
                        dict(m.coords), tuple(m.slice_of_position))

    @property
    def rule_paths(self) -> tuple[str, ...]:
        """Every path a rule can match: variable paths, then output paths."""
        return self.scan.paths

    @property
    def step_setup(self) -> Any:
        """With ``train_step=True``: the loss, optimizer and labels the train
        step was compiled with (a ``StepSetup``, with ``describe()``); else None."""
        return self.trace.step_setup if self.trace is not None else None

    @property
    def pass_mode(self) -> str | None:
        """``"abstract"`` or ``"concrete"``: how the pass was traced; None untraced."""
        return self.trace.mode if self.trace is not None else None

    @property
    def hlo_text(self) -> str:
        """The compiled program's HLO text ("" untraced)."""
        return self.trace.hlo_text if self.trace is not None else ""

    @property
    def xla_memory(self) -> dict | None:
        """XLA's own memory and cost analysis of the compiled program
        (``argument_bytes``, ``output_bytes``, ``temp_bytes``, ``alias_bytes``,
        ``unread_bytes``, ``flops``, ...), a copy; None untraced."""
        return dict(self.trace.memory) if self.trace is not None else None

    @property
    def timings(self) -> dict[str, float]:
        """Seconds each stage of the pass took (``forward_compile``, ...), a copy."""
        return dict(self.trace.seconds) if self.trace is not None else {}

    @property
    def model_name(self) -> str:
        return self.scan.model_name

    @property
    def notes(self) -> tuple[str, ...]:
        """What the scan noticed about the model (variables that carry their
        own layout, output paths that could not be found, ...)."""
        return tuple(self.scan.notes)

    @functools.cached_property
    @schema.documented("optimizer_variables")
    def optimizer_variables(self) -> pd.DataFrame:
        """Keras lays a slot out as the variable it mirrors. Empty without ``train_step=True``."""
        names = schema.frame("optimizer_variables").names()
        cols: dict[str, list] = {c: [] for c in names}
        for o in (self.trace.optimizer_variables if self.trace else []):
            for c in names:
                cols[c].append(getattr(o, c))
        return frame(cols, "optimizer_variables")

    @functools.cached_property
    @schema.documented("estimate")
    def estimate(self) -> pd.DataFrame:
        """Every figure is an estimate unless ``source`` says the compiler
        gave it. Empty without a forward pass or on the simulated CPU."""
        columns = schema.frame("estimate").names()
        hardware = self.target.hardware
        if self.trace is None or not self.target.timed:
            return frame({c: [] for c in columns}, "estimate")
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
        return frame({c: [r[i] for r in rows] for i, c in enumerate(columns)}, "estimate")

    @property
    def estimate_checked(self) -> str:
        """How far the step-time estimate may be from a real step, and why:
        what real chips of the target's kind measured against it, or that
        none did (:data:`shardviz.target.CHIP_CHECKS`)."""
        from ..target import estimate_checks

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

    @functools.cached_property
    def totals(self) -> Totals:
        """The report's totals (:class:`Totals`), computed once."""
        mem = self.memory
        compiled = self.trace is not None
        needed = mem["total_bytes"].dropna() if len(mem) else mem["total_bytes"]
        peak = int(needed.max()) if len(needed) else self.variable_bytes_per_device
        collectives = self.collectives if compiled else None
        est = self.estimate
        parts = est[est["part"].isin(["compute", "memory", "collectives"])] if len(est) else est
        return Totals(
            bytes_per_device=peak,
            variable_bytes_per_device=self.variable_bytes_per_device,
            compiled=compiled,
            collectives=len(collectives) if collectives is not None else None,
            collective_bytes=(int(collectives["bytes_per_device"].sum())
                              if collectives is not None and len(collectives) else
                              0 if collectives is not None else None),
            step_seconds=float(parts["seconds"].max()) if len(parts) else None,
            fits=self.fits)

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
        from ..checks import replicated_large

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

        from ..layout.geometry import itemsize

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
        from ..render.mpl import tensor_figure

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
        from ..render.text import jax_text

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
        from ..render.mpl import mesh_figure

        host_of = dict(zip((int(i) for i in self.mesh.device_ids.flat),
                           self.process_of_position))
        return mesh_figure(self.mesh, host_of)

    def show_memory(self) -> Figure:
        """Bytes per device, stacked by what holds them."""
        from ..render.mpl import memory_figure

        return memory_figure(self)

    def show_flow(self, max_layers: int = 60, explain: bool = False) -> Figure:
        """Layers in call order, their output layouts, and the collectives,
        numbered as in :attr:`collectives`. Collectives whose explanation
        found a fix are marked "fix" (green); ``explain=True`` explains every
        collective first (see :meth:`why`)."""
        from ..render.mpl import flow_figure

        if explain and self.trace is not None:
            self.explanations()
        return flow_figure(self, max_layers)

    def show_grid(self, paths: Sequence[str] | None = None, columns: int = 5) -> Figure:
        """Every variable's (or the given paths') tiles in one figure,
        ``columns`` to a row."""
        from ..render.mpl import grid_figure

        return grid_figure(self, paths, columns)

    def why(self, which: object,
            progress: bool | Callable[[str], object] | None = None) -> Any:
        """Why collective ``which`` (an index into :attr:`collectives`, or one
        of its rows) is there, and what removes it: an
        :class:`~shardviz.explain.Explanation` with ``text``, ``rules``,
        ``source`` and a ``fix`` plan (or None, with the reason). Finding
        the fix compiles a few counterfactual plans (on a train step, their
        forward passes); the result is kept, and so is each plan compiled,
        for the other collectives' explanations. While it compiles, one
        line on stderr says which plan it is trying: on a terminal by
        default, always with ``progress=True``, never with ``False``; a
        callable (``print``, say) hears each line instead. Interrupting it
        (Ctrl-C) leaves the report as it was."""
        from ..explain import _row, cache_of, explain_collective

        index, _ = _row(self, which)
        explained = cache_of(self).explanations
        if index not in explained:
            if progress is None:
                import sys

                progress = sys.stderr.isatty()
            say = _stderr_line if progress is True else progress or None
            try:
                explained[index] = explain_collective(self, index, progress=say)
            finally:
                if say is _stderr_line:
                    _stderr_line(None)
        return explained[index]

    def explanations(self) -> list:
        """:meth:`why` for every collective, in order."""
        return [self.why(i) for i in range(len(self.collectives))]

    @property
    def explained(self) -> dict:
        """The explanations computed so far, by collective index. They live
        in a cache of their own (:func:`shardviz.explain.cache_of`), not on the
        Report, which never changes after :func:`~shardviz.analyze`."""
        from ..explain import cache_of

        return dict(cache_of(self).explanations)

    def explain(self, path: str) -> str:
        """Why ``path`` has the layout it has, in a sentence or two."""
        from ..render.explain import explain_path

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
            "model": self.model_name,
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
            "collectives": self.totals.collectives,
            "collective_bytes": self.totals.collective_bytes,
            "fits": self.totals.fits,
        }

    def _repr_html_(self) -> str:
        from ..render.html import report_html

        return report_html(self)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from ..render.text import report_renderables

        yield from report_renderables(self, width=options.max_width)

    def __str__(self) -> str:
        from ..render.text import report_text

        return report_text(self)

    def __repr__(self) -> str:
        s = self.summary()
        return (
            f"<Report {s['model']!r} on {s['mesh']}: {plural(s['variables'], 'variable')} "
            f"({s['sharded']} sharded, {s['replicated']} replicated, {s['failing']} failing), "
            f"{plural(s['problems']['error'], 'error')}, "
            f"{plural(s['problems']['warning'], 'warning')}>"
        )
