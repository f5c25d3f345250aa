""":func:`suggest`: plans to try for a model, laid out without compiling,
ranked by estimated communication and bytes, the best few compiled to
confirm, and dominated variants dropped."""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING

from ..analysis import analyze
from ..errors import Problem, ShardvizError
from ..format import human_bytes
from ..hub.presets import model_of
from ..model.scan import Scan
from ..model.scan import scan as scan_model
from ..plan import MAX_MESH_SIZE, Plan, as_bytes, check_device_count
from ..report.settings import Settings
from ..strategy.meshes import factorisations, spans_slices
from ..strategy.reason_checks import check_reasons
from ..strategy.roles import roles
from ..strategy.sources import layout_source, shipped_plan
from ..strategy.strategies import candidate_plans
from ..target import Target, parse_target
from .candidates import TIGHT, Candidate, Suggestions, mesh_text

if TYPE_CHECKING:
    from ..model.scan import Scan
    from ..report import Report


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
        if r.kind in ("row", "heads-out") and r.dim is not None and spec[r.dim] == "model":
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


PREFER = {
    "time": "the estimated step time on a target, then communication, then bytes per device",
    "communication": "communication, then bytes per device",
    "memory": "bytes per device, then communication",
}
"""What :func:`suggest` ranks by, for each ``prefer``."""


def suggest(model_or_builder: object, devices: int | None = None,
            target: str | Target | None = None,
            inputs: object = None, budget_bytes: int | str | None = None,
            train_step: bool = False, top: int = 5, compile_top: int | None = None,
            labels: object = None, prefer: str = "time",
            plans: object = None, settings: Settings | None = None) -> Suggestions:
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
            number, or a size such as ``"12GB"`` or ``"12GiB"``. Candidates
            are compiled down the ranking until ``top`` meet it, so a plan
            that meets the budget is found whenever one of the strategies
            does.
        prefer: the trade between memory and communication: ``"time"``
            (the default: the estimated step time on a target, else
            communication first), ``"communication"`` or ``"memory"``
            (bytes per device first). ``Suggestions.ranking`` says it.
        train_step: plan for the train step ``model.fit`` runs rather than
            a forward pass.
        top: how many candidates to return.
        compile_top: how many of the best-ranked to compile (at least 1;
            default ``top + 2``).
        labels: with ``train_step``, the labels (y) as ``fit`` takes them.
        plans: your own layout maps, ranked with the strategies' candidates:
            a Plan, a Keras ``LayoutMap`` or ``ModelParallel`` (on its own
            mesh, which must have ``devices`` devices), a function of a
            ``DeviceMesh`` returning a LayoutMap or a class with
            ``get_layout_map`` (on every ``batch × model`` shape it builds
            on); a list of them, or a dict that names each. A budget one of
            them meets is never met with an empty list. The map the model's
            class ships is always a candidate.
        settings: the analysis settings every candidate is analysed with
            (:class:`~shardviz.report.settings.Settings`, such as a report's
            ``report.settings``); ``target``, ``inputs``, ``train_step`` and
            ``labels`` given here replace its values where they differ from
            their defaults. Candidates are first laid out without their inputs.

    Raises:
        ShardvizError: for a device count outside 1 to
            :data:`~shardviz.plan.MAX_MESH_SIZE`, or another bad argument,
            before any work.
    """


    if not _is_count(top):
        raise ShardvizError(f"suggest(top={top!r:.40}): give how many candidates to return, "
                            "at least 1.", hint="For example top=5.")
    if compile_top is not None and not _is_count(compile_top):
        raise ShardvizError(f"suggest(compile_top={compile_top!r:.40}): give how many of the "
                            "best candidates to compile, at least 1.",
                            hint="For example compile_top=3, or leave it out for top + 2.")
    if prefer not in PREFER:
        raise ShardvizError(f"suggest(prefer={prefer!r:.40}) is not a ranking.",
                            hint="Give 'time', 'communication' or 'memory'.")
    budget = None if budget_bytes is None else as_bytes(budget_bytes, "budget_bytes")
    asked = (settings if settings is not None else Settings()).given(
        target=target, inputs=inputs, train_step=train_step, labels=labels)
    target, inputs, train_step = asked.target, asked.inputs, asked.train_step
    runs = inputs is not None or asked.batch is not None
    hardware = parse_target(target, asked.slices)
    if devices is not None:
        n = check_device_count(devices, "devices")
    else:
        n = hardware.plan_devices()
        if n > MAX_MESH_SIZE:
            raise ShardvizError(
                f"suggest(target={target!r}): the target has {n:,} chips; shardviz plans for "
                f"at most {MAX_MESH_SIZE:,} devices.", hint="Give a smaller target.")
    scan = model_or_builder if isinstance(model_or_builder, Scan) else scan_model(
        model_of(model_or_builder), inputs=inputs, tuning=asked.tuning)
    # Laid out without inputs first: the variables' exact bytes, no compile.
    layouts = asked.layouts_only()
    own = _own(plans, n)
    found: list[Candidate] = []
    refused: dict[str, Problem] = {}
    for name, plan, reasons in (candidate_plans(scan, n, sequence=runs)
                                + _shipped(scan, n) + own):
        if not spans_slices(plan.mesh_dict, plan.batch_axis, asked.slices, asked.dcn_axes):
            continue
        report = analyze(scan, plan, settings=layouts)
        if report.errors:
            refused.setdefault(name, report.errors[0])
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
    for name in dict.fromkeys(name for name, _, _ in own):
        if not any(c.name == name for c in found):
            problem = refused[name]
            raise ShardvizError(
                f"suggest(plans=...): Keras would refuse {name!r} on every mesh it builds on: "
                f"{problem.message}", hint=problem.hint or "shardviz.audit(model, your_map) "
                "lists what is wrong with it.", rule=problem.rule)
    everything = list(found)
    if budget is not None:
        found = [c for c in found if c.bytes_per_device <= budget]
    if prefer == "memory":
        found.sort(key=lambda c: (c.tight, c.bytes_per_device, c.comm_bytes, len(c.plan.rules)))
    else:
        found.sort(key=lambda c: (c.tight, c.comm_bytes, c.bytes_per_device, len(c.plan.rules)))
    if runs:
        confirmed: list[Candidate] = []
        failed: list[ShardvizError] = []  # passes that failed, not for memory
        tried = 0
        first = int(compile_top) if compile_top is not None else top + 2
        for i, c in enumerate(found):
            # With a budget, go on down the ranking until enough meet it.
            if i >= first and (budget is None or len(confirmed) >= top):
                break
            full = analyze(scan, c.plan, settings=asked)
            tried += 1
            if full.errors or full.trace is None:
                c.notes.append("did not compile: " + (full.errors[0].message if full.errors
                                                      else "no pass"))
                if full.trace_error is not None and full.totals.fits is not False:
                    failed.append(full.trace_error)
                continue
            c.report, c.compiled, c.tight = full, True, False
            c.reasons = check_reasons(c.reasons, full)
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
        if failed and len(failed) == tried:  # every pass failed: the inputs or labels
            what = "train step" if train_step else "forward pass"
            raise ShardvizError(f"No candidate's {what} ran: {failed[0].message}",
                                hint=failed[0].hint or "Check the inputs and labels against "
                                "the model.", layer=failed[0].layer)
        found = _undominated(confirmed)
        if prefer == "memory":
            found.sort(key=lambda c: (not c.fits, c.bytes_per_device, c.comm_bytes))
        elif prefer == "communication":
            found.sort(key=lambda c: (not c.fits, c.comm_bytes, c.bytes_per_device))
        else:
            found.sort(key=lambda c: (not c.fits, c.seconds if c.seconds is not None else 0.0,
                                      c.comm_bytes, c.bytes_per_device))
        everything = everything + confirmed
    out = Suggestions(found[:top])
    out.ranking = "ranked by " + PREFER[prefer]
    if everything:
        smallest = min(everything, key=lambda c: c.bytes_per_device)
        out.smallest = (smallest.bytes_per_device, mesh_text(smallest.plan), smallest.name)
    return out


def _shipped(scan: Scan, n: int) -> list[tuple[str, Plan, dict[str, str]]]:
    """The map the model's class ships (a keras-hub backbone's), on each mesh
    shape of ``n`` devices it builds on: a candidate like the strategies, so
    that a budget it meets is never met with nothing."""
    out = []
    for batch, model in factorisations(n):
        try:
            plan = shipped_plan(scan, {"batch": batch, "model": model})
        except Exception:  # noqa: BLE001  a shape the map does not build on
            continue
        if plan is None:
            return []
        out.append(("shipped map", plan, {r.key: "the map the model's class ships"
                                          for r in plan.rules}))
    return out


def _own(plans: object, n: int) -> list[tuple[str, Plan, dict[str, str]]]:
    """The user's own maps as candidates on ``n`` devices; a map on another
    device count, or one that builds on no mesh shape, is an error that names it."""
    if plans is None:
        return []
    if isinstance(plans, dict):
        named = list(plans.items())
    elif isinstance(plans, (list, tuple)):
        named = [(f"your map {i + 1}" if len(plans) > 1 else "your map", p)
                 for i, p in enumerate(plans)]
    else:
        named = [("your map", plans)]
    out = []
    for name, layout in named:
        try:
            plan_for, mesh = layout_source(layout)
        except ShardvizError as e:
            raise ShardvizError(f"suggest(plans=...): {name!r}: {e.message}", hint=e.hint,
                                rule=e.rule) from None
        if mesh is not None and math.prod(mesh.values()) != n:
            raise ShardvizError(
                f"suggest(plans=...): {name!r} is on {mesh_text(plan_for(mesh))} "
                f"({math.prod(mesh.values())} devices); suggest plans for {n}.",
                hint=f"Give devices={math.prod(mesh.values())}, or the map on a mesh of "
                f"{n} devices, or a function of a DeviceMesh that builds it on any.")
        shapes = [mesh] if mesh is not None else [
            {"batch": b, "model": m} for b, m in factorisations(n)]
        built = []
        for shape in shapes:
            try:
                built.append(plan_for(shape))
            except Exception:  # noqa: BLE001  a shape the map does not build on
                continue
        if not built:
            raise ShardvizError(f"suggest(plans=...): {name!r} builds on no mesh of {n} "
                                "devices.", hint="Call it with a DeviceMesh to see Keras's error.")
        out += [(str(name), plan, {r.key: f"{name}'s rule" for r in plan.rules})
                for plan in built]
    return out


def _is_count(value: object) -> bool:
    """Whether ``value`` is a Python or NumPy integer of at least 1 (not a bool)."""

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

