""":func:`audit`: what is wrong with a layout map, what each mistake costs in
compiled bytes, and the fix as an edit of a rule.

A layout map is taken as a :class:`~shardviz.Plan`, a Keras ``LayoutMap`` or
``ModelParallel``, a function of a ``DeviceMesh`` that returns a LayoutMap,
or a class with Keras's ``get_layout_map(device_mesh)`` (a keras-hub
backbone class, or its name). The findings:

- ``replicated``: a variable no rule splits, with its bytes on every device
  (``experts-replicated`` for a mixture-of-experts weight), and the rule
  that would split it; variables under ``replicated_bytes`` are one
  finding when together they are over half the model's bytes;
- ``unused-rule``: a rule that matches nothing, with the paths closest to
  it (a renamed layer);
- ``indivisible``: a split that does not divide on some mesh shape (kv heads,
  vocabularies), per mesh shape; ``does-not-build``: a map that cannot be
  built for a mesh shape at all;
- ``wrong-dimension``: a rule whose mesh axes on other dims of the same
  variables compile to fewer collective bytes per device, with no more
  memory: found by compiling each alternative, never by names;
- ``not-compiled`` (or ``does-not-fit``, when the compiler refused it for
  memory): the forward pass asked for did not compile under the map, so no
  split was checked against a compiled program. An audit that compiled
  nothing is never shown as a clean one.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
from collections.abc import Callable
from typing import Any

import pandas as pd

from ..analysis import analyze
from ..errors import OutOfMemory, ShardvizError
from ..format import human_bytes, plural
from ..hub.presets import model_of
from ..layout.geometry import itemsize
from ..model.scan import Scan
from ..model.scan import scan as scan_model
from ..plan import Plan
from ..report import Report, Settings
from ..strategy.meshes import mesh_shapes, spans_slices
from ..strategy.rules import rules_for
from ..strategy.sources import hub_class, layout_source
from ..strategy.specs import tensor_parallel_specs
from .splits import Split, better_splits

FINDING_COLUMNS = ["kind", "severity", "where", "mesh", "message", "bytes_per_device",
                   "fixed_bytes_per_device", "collective_bytes", "fixed_collective_bytes", "fix"]


CLASS_MESH = {"batch": 1, "model": 8}
"""The main mesh of a class's own map when none is given."""

REPLICATED_BYTES = 1 << 20
"""Variables smaller than this (1 MiB) left replicated are not findings."""


@dataclasses.dataclass
class Audit:
    """An audit of one layout map for one model (:func:`audit`), shown as
    text and HTML by :mod:`shardviz.render.audit_view`."""

    model_name: str
    plan: Plan
    """The map audited, as a Plan on the main mesh."""
    findings: pd.DataFrame
    """One row per finding: ``kind``, ``severity``, ``where`` (a path or a
    rule), ``mesh`` (the mesh shape it is about), ``message``, the compiled
    bytes per device and collective bytes per device before and after the
    fix (where compiled), and ``fix``: the rule to add or the edit."""
    report: Report
    """The map's report on the main mesh."""
    meshes: list[dict[str, int]]
    """The mesh shapes the map was built on."""
    fixed: Plan | None = None
    """The map with every ``wrong-dimension`` edit applied, compiled in
    ``fixed_report`` (None when there is none). The other findings' fixes are
    rules to add or change by hand: which split is right for a replicated
    variable, or which key a renamed layer's rule meant, is the user's call."""
    fixed_report: Report | None = None

    def of(self, kind: str) -> pd.DataFrame:
        """The findings of one kind."""
        return self.findings[self.findings.kind == kind]

    def __str__(self) -> str:
        from ..render.audit_view import text

        return text(self)

    def __repr__(self) -> str:
        return f"<Audit {self.model_name}: {len(self.findings)} findings>"

    def _repr_html_(self) -> str:
        from ..render.audit_view import html

        return html(self)


# ------------------------------------------------------------------ the audit
def audit(model_or_builder: object, layout: object, *, mesh: dict[str, int] | None = None,
          meshes: list[dict[str, int]] | None = None, inputs: object = None,
          batch: int | None = None, seq: int | None = None, target: str | None = None,
          compare: bool = True, replicated_bytes: int = REPLICATED_BYTES,
          progress: Callable[[str], object] | None = None,
          settings: Settings | None = None) -> Audit:
    """Audit a layout map for a model.

    Args:
        model_or_builder: a builder, a built model or a :class:`~shardviz.Scan`.
        layout: the map: a Plan, a Keras ``LayoutMap`` or ``ModelParallel``,
            a function of a ``DeviceMesh`` returning a LayoutMap, or a class
            with ``get_layout_map`` (or its keras-hub name, ``"LlamaBackbone"``).
        mesh: the main mesh shape (``{"batch": 2, "model": 4}``); by default
            the map's own, or ``batch=1 × model=8`` for a class.
        meshes: the mesh shapes on which to check that the map builds and
            divides; by default every shape of the main mesh's axes over its devices.
        inputs, batch, seq: the inputs of a compiled forward pass, as in
            :func:`~shardviz.analyze`; with none, nothing is compiled and no
            ``wrong-dimension`` finding can be made.
        target: compile for this target (``"v5e:2x4"``).
        compare: compile the alternatives of each rule (``wrong-dimension``).
        replicated_bytes: the smallest replicated variable that is a finding
            of its own; smaller ones are one finding when together they are
            over half the model's bytes.
        progress: a callable given a line per step.
        settings: the analysis settings every analysis carries
            (:class:`~shardviz.report.settings.Settings`, such as a report's
            ``report.settings``); ``inputs``, ``batch``, ``seq`` and ``target``
            given here replace its values where they differ from their defaults.
    """
    say = progress or (lambda line: None)
    asked = (settings if settings is not None else Settings()).given(
        inputs=inputs, batch=batch, seq=seq, target=target)
    inputs = asked.inputs
    scan = model_or_builder if isinstance(model_or_builder, Scan) else scan_model(
        model_of(model_or_builder), tuning=asked.tuning)
    plan_for, own = layout_source(layout)
    main = dict(mesh or own or CLASS_MESH)
    _check_class(scan, layout, main)
    axes = tuple(main)
    rows: list[dict] = []
    plan = _build(plan_for, main, rows)
    if plan is None:
        raise ShardvizError(f"The layout map does not build on {main}: {rows[-1]['message']}",
                            hint="Fix the map's code so that it returns a keras.distribution."
                            "LayoutMap for a DeviceMesh of this shape, or give a mesh= shape "
                            "it builds on.")
    shapes = meshes if meshes is not None else [  # on several slices, those that span them
        shape for shape in mesh_shapes(axes, math.prod(main.values()))
        if spans_slices(shape, plan.batch_axis, asked.slices, asked.dcn_axes)]
    compiled = inputs is not None or asked.batch is not None or asked.seq is not None
    if inputs is not None:  # inputs the model cannot take are the user's to fix, not the map's
        _check_inputs(scan, inputs)
    layouts = asked.layouts_only()
    run = asked if compiled else layouts
    say(f"audit: the map on {main}" + (", compiling its forward pass" if compiled else ""))
    base = analyze(scan, plan, settings=run)
    broken = [p for p in base.errors if p.kind in ("invalid-regex", "unknown-axis",
                                                   "duplicate-axis")]
    if broken:  # Keras would refuse the map itself: nothing else is worth auditing
        raise ShardvizError(broken[0].message, hint=broken[0].hint, rule=broken[0].rule)
    if compiled and base.trace_error is not None:
        rows.append(_not_compiled(base.trace_error, main))
    rows += _reported(base, main, rows)
    rows += _replicated(scan, plan, base, replicated_bytes)
    rows += _unused(base)
    for shape in shapes:
        say(f"audit: the map built on {shape}")
        rows += _indivisible(scan, plan_for, shape, rows, layouts)
    fixed = fixed_report = None
    if compiled and compare and base.trace_error is None:
        found = better_splits(scan, plan, base, run, say)
        if found is not None:
            fixed, fixed_report, splits = found
            rows += _split_rows(splits, base, fixed_report, plan)
    frame = pd.DataFrame(rows, columns=FINDING_COLUMNS)
    return Audit(scan.model_name, plan, frame, base, shapes, fixed, fixed_report)


def _check_inputs(scan: Scan, inputs: object) -> None:
    """Raise what the forward pass would say of inputs whose names, ranks
    or fixed sizes the model does not take."""
    from ..model.inputs import check_against_model, input_names, model_input_specs, normalize_inputs

    model_specs, names = model_input_specs(scan.model), input_names(scan.model)
    specs, _ = normalize_inputs(inputs, model_specs, names=names)
    check_against_model(specs, model_specs, scan.model_name, names)


def _check_class(scan: Scan, layout: object, mesh: dict[str, int]) -> None:
    """A class's own map is audited on a model of that class only, and on a
    mesh whose axes have the names it splits over (keras-hub's: ``batch``
    and ``model``, its ``get_layout_map`` defaults), before the class's own
    code fails on another."""
    cls = hub_class(layout) if isinstance(layout, str) else layout
    if not (isinstance(cls, type) and hasattr(cls, "get_layout_map")):
        return
    if not isinstance(scan.model, cls):
        raise ShardvizError(
            f"The map is {cls.__name__}'s, and the model {scan.model_name!r} is a "
            f"{type(scan.model).__name__}, not a {cls.__name__}.",
            hint=f"Audit a model built with {cls.__name__}(...), or pass the map itself "
            f"({cls.__name__}.get_layout_map(device_mesh)) to audit it on this model.")
    try:
        params = inspect.signature(cls.get_layout_map).parameters
    except (TypeError, ValueError):
        return
    names = [params[p].default for p in ("data_parallel_dim_name", "model_parallel_dim_name")
             if p in params and isinstance(params[p].default, str)]
    if len(names) == 2 and set(mesh) != set(names):
        raise ShardvizError(
            f"{cls.__name__}.get_layout_map splits over mesh axes named {names[0]!r} and "
            f"{names[1]!r}; the mesh {mesh} names its axes "
            f"{', '.join(map(repr, mesh))}.",
            hint=f"Give mesh={{{names[0]!r}: 2, {names[1]!r}: 4}} (the sizes your slice has).")


def _build(plan_for: Callable[[dict[str, int]], Plan], mesh: dict[str, int],
           rows: list[dict]) -> Plan | None:
    try:
        return plan_for(mesh)
    except Exception as e:  # noqa: BLE001  the map's own code raised: a finding
        rows.append(_row("does-not-build", "error", "", mesh,
                         f"the layout map cannot be built: {type(e).__name__}: "
                         f"{str(e).splitlines()[0][:200]}",
                         fix="a map that takes the mesh's axis sizes into account"))
        return None


def _not_compiled(error: ShardvizError, mesh: dict[str, int]) -> dict:
    """The forward pass asked for did not compile under the map: a finding,
    so that an audit whose compiled checks did not run is not read as clean."""
    if isinstance(error, OutOfMemory):
        return _row("does-not-fit", "error", "", mesh,
                    f"the forward pass under the map does not fit: {error.message}",
                    fix=error.hint)
    return _row("not-compiled", "error", error.layer or error.path or "", mesh,
                "the forward pass under the map failed, so no split was checked against a "
                f"compiled program: {error.message}",
                fix=error.hint or "Give the inputs the model takes (a keras-hub backbone's: "
                "batch= and seq=), or audit without inputs to check the rules alone.")


def _row(kind: str, severity: str, where: str, mesh: dict[str, int] | None, message: str,
         fix: str = "", **figures: int | None) -> dict:
    row = dict.fromkeys(FINDING_COLUMNS)
    row.update(kind=kind, severity=severity, where=where, message=message, fix=fix,
               mesh=" x ".join(f"{a}={s}" for a, s in mesh.items()) if mesh else "")
    row.update(figures)
    return row


def _replicated(scan: Scan, plan: Plan, report: Report, threshold: int) -> list[dict]:
    """Large variables no rule splits, with their bytes, and the rule that
    would split them (one rule for the same variable of every block). The
    smaller ones, each under ``threshold``, are one finding when together
    they are over half the model's bytes: a map that splits nothing of a
    small model is not a clean one."""
    model_axes = [(a, s) for a, s in plan.mesh if a != plan.batch_axis and s > 1]
    axis, size = max(model_axes, key=lambda m: m[1]) if model_axes else (plan.batch_axis, 1)
    suggested = tensor_parallel_specs(scan, axis, size) if size > 1 else {}
    shapes = {v.path: v for v in scan.variables}
    large: list[tuple[str, Any, int, tuple | None]] = []
    small: dict[str, tuple] = {}
    small_bytes = 0
    for row in report.variables.to_dict("records"):
        path, layout = str(row["path"]), tuple(row["spec"])
        v = shapes.get(path)
        if v is None or any(a is not None for a in layout):
            continue
        nbytes = v.size * itemsize(v.dtype)
        spec = suggested.get(path) or _largest_dim_spec(v.shape, axis, size)
        if nbytes >= threshold:
            large.append((path, v, nbytes, spec))
        elif spec is not None and len(v.shape) >= 2:
            small[path] = spec
            small_bytes += nbytes
    paths = scan.variable_paths + scan.other_paths
    rules = rules_for({p: spec for p, _, _, spec in large if spec is not None}, paths)
    rows = []
    for path, v, nbytes, _spec in large:
        expert = bool(re.search(r"expert", path, re.IGNORECASE)) and len(v.shape) >= 3
        rule = next(((k, r) for k, r in rules if re.fullmatch(k, path)), None)
        rows.append(_row(
            "experts-replicated" if expert else "replicated", "warning", path, plan.mesh_dict,
            f"{path} {tuple(v.shape)} is matched by no rule that splits it: every device "
            f"holds all {human_bytes(nbytes)} of it"
            + (" (a mixture-of-experts weight: split its experts)" if expert else ""),
            fix=f"add {rule[0]!r}: {rule[1]}" if rule else "", bytes_per_device=nbytes))
    total = sum(v.size * itemsize(v.dtype) for v in scan.variables)
    if small and small_bytes > total / 2:
        grouped = rules_for(small, paths)
        shown = ", ".join(f"{k!r}: {r}" for k, r in grouped[:6])
        rows.append(_row(
            "replicated", "warning", plural(len(small), "variable"), plan.mesh_dict,
            f"{plural(len(small), 'variable')}, each under the {human_bytes(threshold)} a "
            f"finding of its own needs, {'is' if len(small) == 1 else 'are'} matched by no "
            f"rule that splits {'it' if len(small) == 1 else 'them'}: "
            f"{human_bytes(small_bytes)} "
            f"in all, {small_bytes / total:.0%} of the model's bytes, on every device",
            fix=f"add {shown}" + (f" and {len(grouped) - 6} more" if len(grouped) > 6 else "")
            + "; replicated_bytes=1 (--replicated-bytes 1) lists each",
            bytes_per_device=small_bytes))
    return rows


def _largest_dim_spec(shape: tuple[int, ...], axis: str, size: int) -> tuple | None:
    dims = [d for d in range(len(shape)) if size > 1 and shape[d] % size == 0]
    if not dims:
        return None
    dim = max(dims, key=lambda d: shape[d])
    return tuple(axis if d == dim else None for d in range(len(shape)))


AUDITED = {"invalid-regex", "unknown-axis", "duplicate-axis", "trace-failed", "unused-rule",
           "replicated-large", "indivisible"}
"""The report's problem kinds the audit finds its own way (raised, or one
row per mesh shape or per group of variables); every other error or warning
of the report is a finding as it is."""


def _reported(report: Report, mesh: dict[str, int], rows: list[dict]) -> list[dict]:
    """The report's other errors and warnings (rules Keras refuses: two keys
    for one path, a layout longer than its variable, a batch axis the mesh
    lacks; a constraint XLA dropped), so that an audit is never cleaner than
    the report of the same map."""
    seen = {row["kind"] for row in rows}
    return [_row(p.kind, p.severity, p.path or p.rule or p.layer or "", mesh, p.message,
                 fix=p.hint)
            for p in report.problem_list if p.severity in ("error", "warning")
            and p.kind not in AUDITED and p.kind not in seen]


def _unused(report: Report) -> list[dict]:
    return [_row("unused-rule", "warning", p.rule or "", None, p.message, fix=p.hint)
            for p in report.problems_of("unused-rule")]


def _indivisible(scan: Scan, plan_for: Callable[[dict[str, int]], Plan],
                 mesh: dict[str, int], rows: list[dict], settings: Settings) -> list[dict]:
    """The splits that do not divide on ``mesh``, one row per rule."""
    plan = _build(plan_for, mesh, rows)
    if plan is None:
        return []
    report = analyze(scan, plan, settings=settings)
    by_rule: dict[str, list] = {}
    for p in report.problems_of("indivisible"):
        by_rule.setdefault(p.rule or p.path or "", []).append(p)
    out = []
    for rule, problems in by_rule.items():
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        out.append(_row("indivisible", "error", rule, mesh, f"{first.message}{more}",
                        fix=first.hint))
    return out


def _split_rows(splits: list[Split], base: Report, fixed: Report, plan: Plan) -> list[dict]:
    """One ``wrong-dimension`` row per rule the best alternative changes,
    each with the figures of the alternative compiled as a whole."""
    b, t = base.totals, fixed.totals
    rows = []
    for split in splits:
        rule = split.rule
        others = [s.rule.key for s in splits if s is not split]
        moved = next(a for k, a in split.replacement
                     if any(re.fullmatch(k, p) for p in split.moved))
        which = ("" if len(split.moved) == len(split.matched)
                 else f" for {_listed(split.moved)}")
        rows.append(_row(
            "wrong-dimension", "warning", rule.key, plan.mesh_dict,
            f"{rule.key} splits {_dims(tuple(rule.axes))} of {_listed(split.matched)}; "
            f"splitting {_dims(moved)} instead{which}"
            + (f", with {', '.join(others)} changed too," if others else "")
            + f" compiles to {human_bytes(b.collective_bytes or 0)} → "
            f"{human_bytes(t.collective_bytes or 0)} of collectives per device, at "
            f"{human_bytes(b.bytes_per_device)} → {human_bytes(t.bytes_per_device)} per device",
            fix=f"replace {rule.key!r}: {tuple(rule.axes)} by "
            + "; ".join(f"{k!r}: {a}" for k, a in split.replacement),
            bytes_per_device=b.bytes_per_device, fixed_bytes_per_device=t.bytes_per_device,
            collective_bytes=b.collective_bytes, fixed_collective_bytes=t.collective_bytes))
    return rows


def _dims(axes: tuple) -> str:
    return ", ".join(f"dim {d} over {a!r}" for d, a in enumerate(axes) if a is not None)


def _listed(paths: list[str]) -> str:
    """``a/kernel`` or ``a/kernel and 3 more``."""
    return paths[0] + (f" and {len(paths) - 1} more" if len(paths) > 1 else "")


__all__ = ["Audit", "audit"]
