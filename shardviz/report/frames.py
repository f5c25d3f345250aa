"""A Report's DataFrames, built from :mod:`~shardviz.report.schema`.

:func:`frame` builds the frame the schema names from columns of values, each
of the schema's dtype. Below it, one function per frame of the schema
(``variables``, ``rules``, ``hosts``, ...): each takes the Report as ``self``,
and the Report caches it as a property of the same name (``report.variables``),
whose docstring the schema writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from ..checks import needed_bytes, rule_feedback
from ..errors import OutOfMemory
from ..target.calibration import expected_step
from . import schema

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

    from .report import Report


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


# ------------------------------------------------------------ the Report's frames
@schema.documented("variables")
def variables(self: Report) -> pd.DataFrame:
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


@schema.documented("outputs")
def outputs(self: Report) -> pd.DataFrame:
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


@schema.documented("rules")
def rules(self: Report) -> pd.DataFrame:

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


@schema.documented("problems")
def problems(self: Report) -> pd.DataFrame:
    cols = {c: [getattr(p, c) for p in self.problem_list]
            for c in schema.frame("problems").names()}
    return frame(cols, "problems")


@schema.documented("devices")
def devices(self: Report) -> pd.DataFrame:
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


@schema.documented("hosts")
def hosts(self: Report) -> pd.DataFrame:
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


def batch_rows_by_position(self: Report) -> dict[int, tuple[int, int]] | None:
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


@schema.documented("activations")
def activations(self: Report) -> pd.DataFrame:
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


@schema.documented("collectives")
def collectives(self: Report) -> pd.DataFrame:
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


def crosses_hosts(self: Report, c: Any) -> bool:
    owner = self.process_of_position
    if max(owner) == 0:
        return False
    if c.network == "dcn" and not c.groups:
        return True
    return any(len({owner[p] for p in group if p < len(owner)}) > 1 for group in c.groups)


@schema.documented("memory")
def memory(self: Report) -> pd.DataFrame:
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
        cols["peak_bytes"].append(mem.get("peak_bytes") if mem else None)
        cols["capacity_bytes"].append(capacity)
        # Nothing compiled: unknown, unless the variables alone are already too many.
        cols["fits"].append(False if refused else None if capacity is None else
                            True if mem and self.target.compiler_decides_fit
                            and not mem.get("unread_bytes") else
                            needed <= capacity if mem else
                            False if needed > capacity else None)
        cols["estimate"].append(estimate)
    # A refused program without the compiler's figure: the variables alone, a lower bound.
    dtypes = {"total_bytes": object} if oom is not None and not oom.needed else {}
    return frame(cols, "memory", dtypes)


@schema.documented("optimizer_variables")
def optimizer_variables(self: Report) -> pd.DataFrame:
    """Keras lays a slot out as the variable it mirrors. Empty without ``train_step=True``."""
    names = schema.frame("optimizer_variables").names()
    cols: dict[str, list] = {c: [] for c in names}
    for o in (self.trace.optimizer_variables if self.trace else []):
        for c in names:
            cols[c].append(getattr(o, c))
    return frame(cols, "optimizer_variables")


@schema.documented("estimate")
def estimate(self: Report) -> pd.DataFrame:
    """Every figure is an estimate unless ``source`` says the compiler
    gave it. Empty without a forward pass or on the simulated CPU. When the
    compiler refused the program for lack of memory, the compute row is the
    program's flops before partitioning, and the expected row says how long
    a step would take if it fitted."""
    columns = schema.frame("estimate").names()
    hardware = self.target.hardware
    oom = self.trace_error if isinstance(self.trace_error, OutOfMemory) else None
    refused_flops = oom.flops if oom is not None and self.trace is None else None
    if not self.target.timed or (self.trace is None and refused_flops is None):
        return frame({c: [] for c in columns}, "estimate")
    rows: list[list] = []
    mem = self.trace.memory if self.trace is not None else {}
    flops = mem.get("flops") if self.trace is not None else refused_flops
    if flops is not None and hardware.peak_flops:
        how = ("flops" if self.trace is not None else
               f"flops (XLA's count for the program before partitioning, over "
               f"{self.mesh.size} devices: the compiler refused it)")
        rows.append(["compute", flops / hardware.peak_flops, False,
                     f"{flops:.3g} {how} / {hardware.peak_flops:.3g} peak bf16 FLOP/s"])
    accessed = mem.get("bytes_accessed")
    if accessed is not None and hardware.hbm_bandwidth:
        rows.append(["memory", accessed / hardware.hbm_bandwidth, False,
                     f"{accessed:.3g} bytes accessed / {hardware.hbm_bandwidth:.3g} B/s HBM"])
    if self.trace is not None:
        timed = [c.seconds for c in self.trace.collectives if c.seconds is not None]
        rows.append(["collectives", float(sum(timed)), False,
                     f"sum over {len(timed)} collectives of bytes / link bandwidth "
                     "(published figures), with a latency floor"])
    if not rows:
        return frame({c: [] for c in columns}, "estimate")
    top = max(range(len(rows)), key=lambda i: rows[i][1])
    rows[top][2] = True
    if mem.get("optimal_seconds") is not None:
        rows.append(["compiler", mem["optimal_seconds"], False,
                     f"the {hardware.name} compiler's optimal_seconds"])
    program = "train step" if self.arguments.get("train_step") else "forward pass"
    timing = self._timed_program
    expected = None if timing is not None else expected_step(hardware.name, program,
                                                             rows[top][1])
    if timing is not None:
        mfu = f", MFU {flops / (timing.seconds * hardware.peak_flops):.0%}" if (
            flops is not None and hardware.peak_flops) else ""
        host = (f"; Keras's host work per step ({timing.model.host_step_seconds * 1e3:.1f} "
                f"ms on the chip's host) is longer than the device's "
                f"{timing.device_seconds:.3g} s" if timing.seconds > timing.device_seconds
                else "")
        unmodelled = (f"; {timing.unmodelled:.0%} of it in kernels timed by their roofline "
                      "(unmodelled)" if timing.unmodelled >= 0.005 else "")
        rows.append(["expected", timing.seconds, False,
                     f"the sum of the compiled program's {len(timing.ops):,} operations in "
                     f"the compiler's order (report.op_times){mfu}: "
                     f"{timing.model.describe(hardware)}{host}{unmodelled}"])
    if expected is not None:
        mfu = f", MFU {flops / (expected.seconds * hardware.peak_flops):.0%}" if (
            flops is not None and hardware.peak_flops) else ""
        fitted = "" if oom is None else "; if it fitted"
        rows.append(["expected", expected.seconds, False,
                     f"calibrated{fitted}{mfu}: {expected.describe()}"])
    return frame({c: [r[i] for r in rows] for i, c in enumerate(columns)}, "estimate")
