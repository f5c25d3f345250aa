"""The planner: layout rules suggested from a model's structure, and sweeps
of a rule set over mesh shapes.

:func:`suggest` recognises what a strong engineer looks for, from shapes and
layer kinds rather than names: Dense kernels that widen (column-parallel)
paired with the ones that narrow back (row-parallel), attention projections
with a heads dimension, embeddings, and everything large enough to split
over the data axis (fully sharded). It writes those as few, readable rules,
over every factorisation of the device count into ``batch`` × ``model``,
ranks them by geometry first (bytes per device, and the communication the
layouts imply, with no compile), then compiles the best few to confirm
their memory and collectives. Every candidate says which of its figures a
compiler gave and which are estimates.

>>> import shardviz
>>> from shardviz import examples
>>> best = shardviz.suggest(examples.mlp, devices=8, inputs=(8, 16), top=3)[0]
>>> best.compiled, best.report.errors
(True, [])
"""

from __future__ import annotations

import dataclasses
import html
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..errors import ShardvizError
from ..format import format_mesh, format_spec, human_bytes, human_seconds
from ..plan import MAX_AXES, MAX_MESH_SIZE, Plan, as_bytes, check_axis_name, check_device_count

if TYPE_CHECKING:
    from ..model.scan import Scan
    from ..report import Report

TIGHT = 0.75
"""Above this share of a chip's memory taken by variables alone, an
uncompiled candidate is ranked after the others: activations, temporaries
and the optimizer need the rest."""
FSDP_MIN_BYTES = 64 * 1024
"""Variables smaller than this stay replicated under fully sharded
strategies: gathering them costs more latency than their memory is worth."""


# ----------------------------------------------------------------- structure
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
        if v.trainable and len(v.shape) >= 2:
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


REASONS = {
    "column": "column-parallel: {layers} split{s} the output features over `{axis}`, and the "
              "row-parallel layer after takes them as they are, so a pair costs one all-reduce "
              "instead of two all-gathers",
    "row": "row-parallel: {layers} contract{s} over features split over `{axis}`; one all-reduce "
           "adds the partial sums (the price of the pair)",
    "column-bias": "the bias of a column-parallel layer is split like its output features",
    "heads-in": "attention split by heads over `{axis}`: {heads}",
    "heads-in-bias": "the bias of a head projection is split by heads, like its kernel",
    "heads-out": "the output projection takes the heads as they are split (row-parallel): one "
                 "all-reduce per attention block",
    "embedding": "the embedding table is split by vocabulary over `{axis}`",
    "embedding-hidden": "the embedding table is split by hidden size over `{axis}` (its "
                        "vocabulary does not divide)",
    "sequence": "sequence-parallel: norms and residual adds work on a slice of the sequence "
                "split over `{axis}`, so their activations take less memory, at the price of "
                "gathering the sequence before each tensor-parallel block (the compiled "
                "candidate shows that cost)",
    "fsdp": "fully sharded over `{axis}`: each device keeps 1/{k} of every large variable, and "
            "XLA gathers one layer's weights when it runs",
}


def tensor_parallel_specs(scan: Scan, axis: str, size: int) -> dict[str, tuple]:
    """Megatron layouts over ``axis`` of ``size`` devices, for every variable
    whose split dim divides; the rest are left out (replicated)."""
    shapes = {v.path: v.shape for v in scan.variables}
    specs: dict[str, tuple] = {}
    for r in roles(scan):
        if r.dim is None:
            continue
        shape = shapes[r.path]
        dim = r.dim
        if r.kind == "embedding" and shape[0] % size and shape[1] % size == 0:
            dim = 1  # a vocabulary that does not divide: split the hidden size instead
        if shape[dim] % size == 0:
            specs[r.path] = tuple(axis if d == dim else None for d in range(len(shape)))
    return specs


def fully_sharded_specs(scan: Scan, axis: str, size: int,
                        specs: dict[str, tuple] | None = None,
                        min_bytes: int = FSDP_MIN_BYTES) -> dict[str, tuple]:
    """``specs`` with every variable of at least ``min_bytes`` also split
    over ``axis`` on its largest free dim that divides."""
    from ..layout.geometry import itemsize

    out = dict(specs or {})
    for v in scan.variables:
        if v.size * itemsize(v.dtype) < min_bytes:
            continue
        spec = list(out.get(v.path, (None,) * len(v.shape)))
        if axis in spec:
            continue
        free = sorted((d for d in range(len(v.shape)) if spec[d] is None
                       and v.shape[d] % size == 0), key=lambda d: -v.shape[d])
        if not free:
            continue
        spec[free[0]] = axis
        out[v.path] = tuple(spec)
    return out


def _escape(text: str) -> str:
    return re.sub(r"([.^$*+?{}\[\]|()\\])", r"\\\1", text)


def rules_for(specs: dict[str, tuple], paths: Sequence[str]) -> list[tuple[str, tuple]]:
    """Few, readable rules that give each path in ``specs`` its layout and
    match no other path: ``.*up/kernel`` for every block's ``up`` kernel, and
    ``.*(query|key|value)/kernel`` for siblings with one layout.

    >>> rules_for({"b0/up/kernel": (None, "m"), "b1/up/kernel": (None, "m")},
    ...           ["b0/up/kernel", "b1/up/kernel", "b0/down/kernel"])
    [('.*up/kernel', (None, 'm'))]
    """
    def strip(spec):
        spec = list(spec)
        while spec and spec[-1] is None:
            spec.pop()
        return tuple(spec)

    groups: dict[tuple, list[str]] = {}
    for path, spec in specs.items():
        groups.setdefault(tuple(spec), []).append(path)
    out: list[tuple[str, tuple]] = []
    for spec, members in groups.items():
        if not strip(spec):
            continue
        remaining = list(members)
        while remaining:
            key, covered = _best_key(remaining, members, paths)
            out.append((key, spec))
            remaining = [p for p in remaining if p not in covered]
    order = {p: i for i, p in enumerate(paths)}
    out.sort(key=lambda kv: min(order.get(p, 0) for p in paths if re.fullmatch(kv[0], p)))
    return out


def _best_key(remaining: list[str], members: list[str], paths: Sequence[str]):
    """The key that matches the most of ``remaining`` and nothing outside
    ``members`` (the shortest among equals), and the paths it matches."""
    allowed = set(members)
    first = remaining[0]
    parts = first.split("/")
    tries = [_escape(first)]
    for k in (1, 2, 3):
        if k > len(parts):
            continue
        tail = "/".join(parts[-k:])
        prefix = ".*" if k < len(parts) else ""
        if prefix:
            tries.append(prefix + _escape(tail))
        # Numbered layers (block_0_q, block_1_q): one key for every number.
        if re.search(r"\d", tail):
            tries.append(prefix + re.sub(r"\d+", r"\\d+", _escape(tail)))
    if len(parts) >= 2:
        # Siblings: one leaf under several layers, e.g. (query|key|value)/kernel.
        leaf = parts[-1]
        siblings = sorted({p.split("/")[-2] for p in remaining
                           if "/" in p and p.split("/")[-1] == leaf})
        if len(siblings) > 1:
            tries.append(".*(" + "|".join(_escape(x) for x in siblings) + ")/" + _escape(leaf))
            generic = sorted({re.sub(r"\d+", r"\\d+", _escape(x)) for x in siblings})
            if len(generic) < len(siblings):
                tries.append(".*(" + "|".join(generic) + ")/" + _escape(leaf))
    best: tuple | None = None
    for key in tries:
        pattern = re.compile(key)
        hit = [p for p in paths if pattern.fullmatch(p)]
        covered = [p for p in hit if p in remaining]
        if not covered or not set(hit) <= allowed:
            continue
        score = (len(covered), -len(key))
        if best is None or score > best[0]:
            best = (score, key, hit)
    if best is None:
        return _escape(first), [first]
    return best[1], best[2]


# ----------------------------------------------------------------- candidates
@dataclasses.dataclass
class Candidate:
    """One suggested plan, with its reasons and its figures."""

    name: str
    plan: Plan
    reasons: dict[str, str]
    """A short reason for each rule key."""
    report: Report | None = None
    bytes_per_device: int = 0
    """Compiled memory per device (XLA's total) when ``compiled``, else the
    variables' bytes per device (exact) plus nothing for activations."""
    comm_bytes: int = 0
    """Collective bytes per device per step: from the compiled program when
    ``compiled``, else estimated from the layouts."""
    seconds: float | None = None
    """Estimated step time on the target (None without one)."""
    compiled: bool = False
    fits: bool = True
    tight: bool = False
    """Not compiled, and its variables alone take more than :data:`TIGHT` of
    a chip's memory: ranked after the candidates with room to spare."""
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def estimated(self) -> tuple[str, ...]:
        """Which figures are estimates rather than a compiler's."""
        out = ["seconds"] if self.seconds is not None else []
        if not self.compiled:
            out += ["bytes_per_device (variables only)", "comm_bytes"]
        return tuple(out)

    def row(self) -> dict:
        return {"name": self.name, "mesh": _mesh_text(self.plan), "rules": len(self.plan.rules),
                "note": "; ".join(self.notes) or "—",
                "bytes_per_device": self.bytes_per_device, "comm_bytes": self.comm_bytes,
                "seconds": self.seconds, "fits": self.fits, "compiled": self.compiled,
                "estimated": ", ".join(self.estimated) or "—"}

    def _repr_html_(self) -> str:
        esc = html.escape
        rules = "".join(f"<tr><td><code>{esc(k)}</code></td><td><code>{esc(format_spec(a))}</code>"
                        f"</td><td>{esc(self.reasons.get(k, ''))}</td></tr>"
                        for k, a in ((r.key, r.axes) for r in self.plan.rules))
        return (f"<div><b>{esc(self.name)}</b> on {esc(_mesh_text(self.plan))}: "
                f"{esc(human_bytes(self.bytes_per_device))} per device, "
                f"{esc(human_bytes(self.comm_bytes))} communicated per device"
                + (f", ~{esc(human_seconds(self.seconds))} per step" if self.seconds else "")
                + ("" if self.compiled else " <i>(estimated, not compiled)</i>")
                + f"<table>{rules}</table></div>")

    def __str__(self) -> str:
        lines = [f"{self.name} on {_mesh_text(self.plan)}: {human_bytes(self.bytes_per_device)} "
                 f"per device, {human_bytes(self.comm_bytes)} communicated"
                 + ("" if self.compiled else " (estimated)")]
        for r in self.plan.rules:
            lines.append(f"  {r.key!r}: {format_spec(r.axes)}  # {self.reasons.get(r.key, '')}")
        return "\n".join(lines)


def _mesh_text(plan: Plan) -> str:
    return format_mesh(plan.mesh_dict)


TABLE_COLUMNS = ["name", "mesh", "rules", "note", "bytes_per_device", "comm_bytes", "seconds",
                 "fits", "compiled", "estimated"]


class Suggestions(list):
    """Candidates, best first; shows itself as a table."""

    smallest: tuple[int, str, str] | None = None
    """``(bytes per device, mesh, strategy)`` of the smallest plan considered,
    kept or not: what a budget must allow."""

    @property
    def table(self) -> pd.DataFrame:
        """One row per candidate: ``name``, ``mesh``, ``rules`` (how many),
        ``note``, ``bytes_per_device``, ``comm_bytes``, ``seconds``, ``fits``,
        ``compiled`` and ``estimated`` (which figures are estimates)."""
        return pd.DataFrame([c.row() for c in self], columns=TABLE_COLUMNS)

    def _repr_html_(self) -> str:
        frame = self.table.copy()
        if len(frame):
            frame["bytes_per_device"] = frame["bytes_per_device"].map(human_bytes)
            frame["comm_bytes"] = frame["comm_bytes"].map(human_bytes)
            frame["seconds"] = frame["seconds"].map(lambda s: human_seconds(s) if s else "—")
        frame = frame.rename(columns={
            "name": "plan", "bytes_per_device": "per device", "comm_bytes": "communicated",
            "seconds": "step (estimate)", "estimated": "estimates"})
        return frame.to_html(index=True, escape=True)

    def __str__(self) -> str:
        return "\n\n".join(f"[{i}] {c}" for i, c in enumerate(self))


def factorisations(n: int) -> list[tuple[int, int]]:
    """``(batch, model)`` pairs with ``batch * model == n``.

    >>> factorisations(8)
    [(8, 1), (4, 2), (2, 4), (1, 8)]
    """
    return [(n // m, m) for m in divisors(n)]


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending, by trial division up to its square
    root.

    >>> divisors(12), divisors(1), divisors(2039)
    ([1, 2, 3, 4, 6, 12], [1], [1, 2039])
    """
    low, high = [], []
    k = 1
    while k * k <= n:
        if n % k == 0:
            low.append(k)
            if k * k != n:
                high.append(n // k)
        k += 1
    return low + high[::-1]


def _strategies(scan: Scan, n: int, sequence: bool = True
                ) -> list[tuple[str, Plan, dict[str, str]]]:
    """Every strategy on every factorisation of ``n``; sequence-parallel
    variants only with ``sequence`` (they differ from tensor parallel only in
    activation memory, which only a compile measures)."""
    paths = list(scan.variable_paths)
    layer_of = {v.path: v.layer for v in scan.variables}
    role_of = {r.path: r for r in roles(scan)}
    out = []

    def plan_of(mesh: dict[str, int], specs: dict[str, tuple], kinds: dict[str, str], axis_for):
        rules = rules_for(specs, paths)
        reasons = {}
        shape_of = {v.path: v.shape for v in scan.variables}
        for key, _ in rules:
            matched = [p for p in paths if re.fullmatch(key, p)]
            member = matched[0]
            kind = kinds.get(member, "fsdp")
            role = role_of.get(member)
            if kind == "embedding" and dict(rules)[key][0] != "model":
                kind = "embedding-hidden"
            axis = axis_for(kind)
            size = mesh.get(axis, 1)
            counts = {shape_of[p][role.dim] for p in matched
                      if role is not None and role.dim is not None
                      and role.kind in ("heads-in", "heads-in-bias")}
            heads = counts.pop() if len(counts) == 1 else None
            heads_text = (f"each device computes {heads // size} of the {heads} heads" if heads
                          else f"each device computes 1/{size} of each layer's heads")
            layers = sorted({layer_of[p] for p in matched})
            layers_text = (f"`{layers[0]}`" if len(layers) == 1 else
                           f"`{layers[0]}` and {len(layers) - 1} more like it")
            text = REASONS[kind].format(layers=layers_text, s="s" if len(layers) == 1 else "",
                                        axis=axis, k=size, heads=heads_text)
            if kind != "fsdp" and "batch" in dict(rules)[key]:
                text += "; and " + REASONS["fsdp"].format(axis="batch", k=mesh.get("batch", 1))
            reasons[key] = text
        return Plan(mesh, rules, batch_axis="batch"), reasons

    for batch, model in factorisations(n):
        mesh = {"batch": batch, "model": model}
        tp = tensor_parallel_specs(scan, "model", model) if model > 1 else {}
        kinds = {p: role_of[p].kind for p in tp}
        tp_axis = lambda kind: "batch" if kind == "fsdp" else "model"  # noqa: E731
        if model == 1:
            out.append(("data parallel", *plan_of(mesh, {}, {}, tp_axis)))
        elif tp:  # a model axis that splits nothing would only replicate
            label = "tensor parallel" if batch == 1 else "data × tensor parallel"
            out.append((label, *plan_of(mesh, tp, kinds, tp_axis)))
        if batch > 1:
            fs = fully_sharded_specs(scan, "batch", batch, tp)
            if fs != tp:
                label = "fully sharded" if model == 1 else "fully sharded × tensor parallel"
                out.append((label, *plan_of(mesh, fs, kinds, tp_axis)))
        if sequence and model > 1 and tp and activations_dominate(scan, model):
            sp = sequence_parallel_specs(scan, model)
            if sp:
                plan, reasons = plan_of(mesh, tp, kinds, tp_axis)
                extra = rules_for(sp, list(scan.output_paths))
                plan = plan.with_rules([(r.key, r.axes) for r in plan.rules] + extra)
                for key, _ in extra:
                    reasons[key] = REASONS["sequence"].format(axis="model")
                label = ("tensor × sequence parallel" if batch == 1
                         else "data × tensor × sequence parallel")
                out.append((label, plan, reasons))
    return out


SEQUENCE_LAYERS = ("LayerNormalization", "RMSNormalization", "Add", "Dropout", "Activation")
"""Layers that work on each position alone: between tensor-parallel blocks
their outputs can be split over the sequence."""


def activations_dominate(scan: Scan, model: int) -> bool:
    """Whether the layer outputs (taken as float32, split over the batch only)
    outweigh the variables split over ``model``: where sequence parallelism
    pays."""
    from ..layout.geometry import itemsize

    acts = sum(math.prod(o.shapes[0]) * 4 for o in scan.outputs if o.shapes)
    variables = sum(v.size * itemsize(v.dtype) for v in scan.variables) / model
    return acts > variables


def sequence_parallel_specs(scan: Scan, model: int) -> dict[str, tuple]:
    """``/output`` layouts that split the sequence dim of norm, residual and
    elementwise layers' ``(batch, sequence, features)`` outputs over
    ``model``, where it divides."""
    out = {}
    for o in scan.outputs:
        if o.layer_class in SEQUENCE_LAYERS and o.shapes and len(o.shapes[0]) == 3 \
                and len(o.shapes) == 1 and o.shapes[0][1] % model == 0:
            out[o.path] = ("batch", "model", None)
    return out


def _estimated_comm(report: Report, scan: Scan, train_step: bool) -> int:
    """Collective bytes per device per step implied by the layouts, with no
    compile: an all-reduce of the output of every row-parallel layer, a
    gather of every variable split over the batch axis (twice in a train
    step), and in a train step the gradients of what the batch axis
    replicates, reduced over it."""
    plan = report.plan
    batch = plan.mesh_dict.get("batch", 1)
    variables = report.variables.set_index("path")
    outputs = {o.layer_path: o for o in scan.outputs}
    total = 0
    for r in roles(scan):
        spec: tuple = tuple(variables.loc[r.path, "spec"])  # type: ignore[arg-type]
        if r.kind in ("row", "heads-out") and "model" in spec:
            o = outputs.get(r.path.rpartition("/")[0])
            if o is not None and o.shapes:  # activations taken as float32: an estimate
                total += math.prod(o.shapes[0]) * 4 // max(batch, 1)
    for _, row in variables.iterrows():
        spec = tuple(row["spec"])
        if "batch" in spec:
            total += int(row["bytes_per_device"]) * batch * (2 if train_step else 1)
        elif train_step and batch > 1 and row["trainable"]:
            total += int(row["bytes_per_device"])
    return total


def suggest(model_or_builder: object, devices: int | None = None, target: str | None = None,
            inputs: object = None, budget_bytes: int | str | None = None,
            train_step: bool = False, top: int = 5, compile_top: int | None = None,
            labels: object = None) -> Suggestions:
    """Plans to try for a model, best first.

    Candidates are data parallel, fully sharded, Megatron tensor parallel
    (column and row Dense pairs, attention split by heads, embeddings split
    by vocabulary) and their 2-D mixes, over every ``batch × model``
    factorisation of ``devices``. Splits that do not divide are avoided.
    Plans are first laid out without compiling (exact variable bytes per
    device; communication estimated from the layouts) and ranked by
    communication, then bytes (plans whose variables fill a chip last).
    The best ``compile_top`` (default ``top + 2``) are then compiled with
    ``inputs``; their figures become XLA's, a plan another beats on both
    bytes and communication is dropped, and the rest rank by estimated
    step time on a target, else by communication, then bytes. Each
    candidate says which of its figures are estimates.

    Args:
        devices: the device count (default: the target's chips, or the
            devices JAX has).
        target: the hardware to plan for, as in :func:`~shardviz.analyze`.
        inputs: model inputs; without them nothing is compiled.
        budget_bytes: keep only candidates needing at most this many bytes
            per device (XLA's total when compiled, else the variables'): a
            number, or a size such as ``"12GB"`` or ``"12GiB"``.
        train_step: plan for the train step ``model.fit`` runs rather than
            a forward pass.
        top: how many candidates to return.
        compile_top: how many of the best-ranked to compile (at least 1;
            default ``top + 2``).
        labels: with ``train_step``, the labels (y) as ``fit`` takes them.

    Raises:
        ShardvizError: for a device count outside 1 to
            :data:`~shardviz.plan.MAX_MESH_SIZE`, or another bad argument,
            before any work.
    """

    from ..analysis import analyze
    from ..model.scan import Scan
    from ..model.scan import scan as scan_model
    from ..target import parse_target

    if not _is_count(top):
        raise ShardvizError(f"suggest(top={top!r:.40}): give how many candidates to return, "
                            "at least 1.", hint="For example top=5.")
    if compile_top is not None and not _is_count(compile_top):
        raise ShardvizError(f"suggest(compile_top={compile_top!r:.40}): give how many of the "
                            "best candidates to compile, at least 1.",
                            hint="For example compile_top=3, or leave it out for top + 2.")
    budget = None if budget_bytes is None else as_bytes(budget_bytes, "budget_bytes")
    hardware = parse_target(target)
    if devices is not None:
        n = check_device_count(devices, "devices")
    else:
        n = hardware.plan_devices()
        if n > MAX_MESH_SIZE:
            raise ShardvizError(
                f"suggest(target={target!r}): the target has {n:,} chips; shardviz plans for "
                f"at most {MAX_MESH_SIZE:,} devices.", hint="Give a smaller target.")
    scan = model_or_builder if isinstance(model_or_builder, Scan) else scan_model(
        model_or_builder, inputs=inputs)
    found = []
    for name, plan, reasons in _strategies(scan, n, sequence=inputs is not None):
        report = analyze(scan, plan, target=hardware)
        if report.errors:
            continue
        c = Candidate(name, plan, reasons, report,
                      bytes_per_device=report.variable_bytes_per_device,
                      comm_bytes=_estimated_comm(report, scan, train_step))
        capacity = report.mesh.capacity_bytes
        if capacity and c.bytes_per_device > TIGHT * capacity:
            c.tight = True
            c.notes.append(f"the variables alone take {c.bytes_per_device / capacity:.0%} of a "
                           f"chip's {human_bytes(capacity)}; activations must fit in the rest")
        found.append(c)
    everything = list(found)
    if budget is not None:
        found = [c for c in found if c.bytes_per_device <= budget]
    found.sort(key=lambda c: (c.tight, c.comm_bytes, c.bytes_per_device, len(c.plan.rules)))
    if inputs is not None:
        confirmed = []
        for c in found[: (int(compile_top) if compile_top is not None else top + 2)]:
            full = analyze(scan, c.plan, inputs=inputs, train_step=train_step, target=target,
                           labels=labels)
            if full.errors or full.trace is None:
                c.notes.append("did not compile: " + (full.errors[0].message if full.errors
                                                      else "no pass"))
                continue
            c.report, c.compiled, c.tight = full, True, False
            totals = full.totals
            c.bytes_per_device = totals.bytes_per_device
            c.comm_bytes = totals.collective_bytes or 0
            if totals.fits is not None:
                c.fits = totals.fits
            if totals.step_seconds is not None:
                c.seconds = totals.step_seconds
            if budget is not None and c.bytes_per_device > budget:
                continue
            confirmed.append(c)
        found = _undominated(confirmed)
        found.sort(key=lambda c: (not c.fits, c.seconds if c.seconds is not None else 0.0,
                                  c.comm_bytes, c.bytes_per_device))
        everything = everything + confirmed
    out = Suggestions(found[:top])
    if everything:
        smallest = min(everything, key=lambda c: c.bytes_per_device)
        out.smallest = (smallest.bytes_per_device, _mesh_text(smallest.plan), smallest.name)
    return out


def _is_count(value: object) -> bool:
    """Whether ``value`` is a Python or NumPy integer of at least 1 (not a bool)."""
    import numbers

    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 1


def _undominated(candidates: list[Candidate]) -> list[Candidate]:
    """Compiled candidates that no other on the same mesh beats on both bytes
    per device and communication (and step time, when estimated): a variant
    (fully sharded, sequence parallel) worse on every count than its sibling
    is never the one to pick. Other meshes stay, as alternatives."""
    def key(c: Candidate) -> tuple:
        return (c.bytes_per_device, c.comm_bytes, c.seconds or 0.0)

    def beats(a: Candidate, b: Candidate) -> bool:
        ka, kb = key(a), key(b)
        return all(x <= y for x, y in zip(ka, kb)) and ka != kb

    return [c for c in candidates
            if not any(beats(d, c) for d in candidates
                       if d is not c and d.plan.mesh_dict == c.plan.mesh_dict)]


def plan_diff(old: Plan, new: Plan) -> list[str]:
    """What changes from ``old`` to ``new``, one line per change.

    >>> a = Plan({"batch": 8}, {})
    >>> b = Plan({"batch": 2, "model": 4}, {"up/kernel": (None, "model")})
    >>> plan_diff(a, b)
    ['mesh: batch=8 → batch=2 × model=4', "+ rule 'up/kernel': P(None, 'model')"]
    """
    out = []
    if old.mesh_dict != new.mesh_dict:
        out.append(f"mesh: {_mesh_text(old)} → {_mesh_text(new)}")
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


# ----------------------------------------------------------------- sweep
SWEEP_COLUMNS = ["mesh", "errors", "first_error", "bytes_per_device", "fits",
                 "collective_bytes", "seconds", "compiled"]


MAX_SWEEP_MESHES = 1000
"""The most mesh shapes one :func:`sweep` analyses: each is a full analysis
(and with inputs a compile)."""


def mesh_count(n: int, axes: int) -> int:
    """How many assignments of sizes to ``axes`` axes have the product ``n``,
    counted from the prime factors of ``n`` without listing them.

    >>> mesh_count(8, 2), mesh_count(12, 3)
    (4, 18)
    """
    count, k, rest = 1, 2, n
    while k * k <= rest:
        e = 0
        while rest % k == 0:
            rest //= k
            e += 1
        count *= math.comb(e + axes - 1, axes - 1)
        k += 1
    if rest > 1:
        count *= axes
    return count


def _meshes(axes: Sequence[str], n: int) -> list[dict[str, int]]:
    """Every assignment of sizes to ``axes`` whose product is ``n``."""
    if len(axes) == 1:
        return [{axes[0]: n}]
    out = []
    for k in divisors(n):
        out += [{axes[0]: k, **rest} for rest in _meshes(axes[1:], n // k)]
    return out


def sweep(model_or_builder: object, rules: Any = (), devices: int | None = None,
          meshes: Sequence[dict[str, int]] | None = None, target: str | None = None,
          inputs: object = None, train_step: bool = False, axes: Sequence[str] | None = None,
          batch_axis: str | None = None, labels: object = None) -> pd.DataFrame:
    """One rule set over many mesh shapes: on which of them does it work, and
    what does each cost?

    Give ``meshes`` (dicts of axis sizes), or ``devices``: then every
    assignment of sizes to the axes (default: the axes the rules name, with
    ``batch`` first) whose product is ``devices``. With ``inputs`` each mesh
    is compiled.

    Returns a DataFrame, one row per mesh, with columns ``mesh``; ``errors``
    (how many errors Keras or XLA would raise) and ``first_error`` (the
    first one's message); ``bytes_per_device`` (XLA's total when compiled,
    else the variables'); ``fits`` (on a target, or within nothing: None);
    ``collective_bytes`` (per device, from the compiled program, else None);
    ``seconds`` (estimated step time on a target); ``compiled``. Draw it
    with :func:`shardviz.show_sweep`. ``labels`` are the y of the train
    step, as in :func:`~shardviz.analyze`.
    """
    from ..analysis import analyze
    from ..model.scan import Scan
    from ..model.scan import scan as scan_model

    base_rules, batch_axis = _sweep_rules(rules, batch_axis)
    if devices is not None:
        devices = check_device_count(devices, "devices")
    if meshes is None:
        if devices is None:
            raise ShardvizError("sweep() needs devices=N or meshes=[...].",
                                hint="For example sweep(model, rules, devices=8).")
        if axes is None:
            named = [a for r in base_rules for a in r.axes if a is not None]
            axes = ["batch"] + [a for a in dict.fromkeys(named) if a != "batch"]
        axes = _sweep_axes(axes)
        count = mesh_count(devices, len(axes))
        if count > MAX_SWEEP_MESHES:
            raise ShardvizError(
                f"sweep(devices={devices}, axes={list(axes)}): that is {count:,} mesh shapes; "
                f"a sweep analyses at most {MAX_SWEEP_MESHES:,}.",
                hint="Sweep fewer axes, or give the shapes to try as meshes=[...].")
        meshes = _meshes(list(axes), devices)
    plans = _sweep_plans(meshes, base_rules, batch_axis)
    scan = model_or_builder if isinstance(model_or_builder, Scan) else scan_model(
        model_or_builder, inputs=inputs)
    rows = []
    for plan in plans:
        report = analyze(scan, plan, inputs=inputs, train_step=train_step, target=target,
                         labels=labels)
        errors = report.errors
        totals = report.totals
        rows.append({
            "mesh": format_mesh(plan.mesh_dict),
            "errors": len(errors), "first_error": errors[0].message if errors else "",
            "bytes_per_device": totals.bytes_per_device, "fits": totals.fits,
            "collective_bytes": totals.collective_bytes,
            "seconds": totals.step_seconds, "compiled": totals.compiled,
        })
    return pd.DataFrame(rows, columns=SWEEP_COLUMNS)


def _sweep_rules(rules: object, batch_axis: str | None) -> tuple[tuple[Any, ...], str | None]:
    """The rules of :func:`sweep` as Rules, and the batch axis (a Plan's own
    by default), or a :class:`ShardvizError` that names ``rules``."""
    from ..plan import _normalize_rules

    if isinstance(rules, Plan):
        return rules.rules, batch_axis or rules.batch_axis
    if rules is None:
        raise ShardvizError("sweep(rules=None): give the rules to sweep.",
                            hint="For example {'.*kernel': (None, 'model')}, a Plan, or () "
                            "for none.")
    try:
        return _normalize_rules(rules), batch_axis
    except ShardvizError as e:
        raise ShardvizError(f"sweep(rules=...): {e.message}", hint=e.hint, rule=e.rule) from None


def _sweep_axes(axes: object) -> tuple[str, ...]:
    """``axes`` of :func:`sweep` as distinct axis names."""
    if isinstance(axes, (str, bytes, set, frozenset)) or not isinstance(axes, Sequence):
        raise ShardvizError(f"sweep(axes={axes!r:.60}): give the mesh axes as a list, in order.",
                            hint="For example axes=['batch', 'model'].")
    if not 1 <= len(axes) <= MAX_AXES:
        raise ShardvizError(f"sweep(axes={list(axes)!r:.60}): give 1 to {MAX_AXES} mesh axes.",
                            hint="For example axes=['batch', 'model'].")
    for axis in axes:
        check_axis_name(axis, "sweep(axes=...): the axis")
    if len(set(axes)) != len(axes):
        twice = next(a for a in axes if list(axes).count(a) > 1)
        raise ShardvizError(f"sweep(axes={list(axes)!r}): the axis {twice!r} appears twice.",
                            hint="Name each mesh axis once.")
    return tuple(axes)


def _sweep_plans(meshes: object, rules: tuple[Any, ...], batch_axis: str | None) -> list[Plan]:
    """A Plan per entry of :func:`sweep`'s ``meshes`` (dicts of axis sizes, or
    Plans), or a :class:`ShardvizError` that names the entry."""
    from collections.abc import Mapping

    example = "meshes=[{'batch': 2, 'model': 4}, {'batch': 8}]"
    try:
        if isinstance(meshes, (str, bytes, Mapping)):
            raise TypeError
        entries: list[object] = list(meshes)  # type: ignore[call-overload]
    except TypeError:
        raise ShardvizError(f"sweep(meshes={meshes!r:.60}): give a list of meshes.",
                            hint=f"For example {example}.") from None
    if not entries:
        raise ShardvizError("sweep(meshes=[]): give at least one mesh.",
                            hint=f"For example {example}.")
    if len(entries) > MAX_SWEEP_MESHES:
        raise ShardvizError(f"sweep(meshes=...): give at most {MAX_SWEEP_MESHES:,} meshes, not "
                            f"{len(entries):,}.", hint="Sweep the shapes in several parts.")
    plans = []
    for i, mesh in enumerate(entries):
        if isinstance(mesh, Plan):
            plans.append(mesh)
            continue
        if not isinstance(mesh, Mapping):
            raise ShardvizError(
                f"sweep(meshes=...): entry {i} is {type(mesh).__name__} {mesh!r:.40}; each mesh "
                "must be a dict of axis name to size.", hint=f"For example {example}.")
        try:
            plans.append(Plan(mesh, rules, batch_axis=batch_axis))
        except ShardvizError as e:
            raise ShardvizError(f"sweep(meshes=...): entry {i}: {e.message}", hint=e.hint,
                                rule=e.rule) from None
    return plans
