""":func:`sweep`: one rule set over many mesh shapes, one row per mesh with
its errors and costs, and the checks on its arguments."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from ..analysis import analyze
from ..errors import ShardvizError
from ..format import format_mesh
from ..hub.presets import model_of
from ..model.scan import Scan
from ..model.scan import scan as scan_model
from ..plan import MAX_AXES, Plan, check_axis_name, check_device_count
from ..plan.rule import normalize_rules
from ..report.settings import Settings
from ..strategy.meshes import mesh_count, mesh_shapes

SWEEP_COLUMNS = ["mesh", "errors", "first_error", "bytes_per_device", "fits",
                 "collective_bytes", "seconds", "compiled"]


MAX_SWEEP_MESHES = 1000
"""The most mesh shapes one :func:`sweep` analyses: each is a full analysis
(and with inputs a compile)."""


def sweep(model_or_builder: object, rules: Any = (), devices: int | None = None,
          meshes: Sequence[dict[str, int]] | None = None, target: str | None = None,
          inputs: object = None, train_step: bool = False, axes: Sequence[str] | None = None,
          batch_axis: str | None = None, labels: object = None,
          settings: Settings | None = None) -> pd.DataFrame:
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
    step, as in :func:`~shardviz.analyze`. ``settings`` (a
    :class:`~shardviz.report.settings.Settings`, such as a report's
    ``report.settings``) is what every mesh is analysed with; ``target``,
    ``inputs``, ``train_step`` and ``labels`` given here replace its values
    where they differ from their defaults.
    """

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
        meshes = mesh_shapes(list(axes), devices)
    plans = _sweep_plans(meshes, base_rules, batch_axis)
    asked = (settings if settings is not None else Settings()).given(
        target=target, inputs=inputs, train_step=train_step, labels=labels)
    scan = model_or_builder if isinstance(model_or_builder, Scan) else scan_model(
        model_of(model_or_builder), inputs=asked.inputs, tuning=asked.tuning)
    rows = []
    for plan in plans:
        report = analyze(scan, plan, settings=asked)
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

    if isinstance(rules, Plan):
        return rules.rules, batch_axis or rules.batch_axis
    if rules is None:
        raise ShardvizError("sweep(rules=None): give the rules to sweep.",
                            hint="For example {'.*kernel': (None, 'model')}, a Plan, or () "
                            "for none.")
    try:
        return normalize_rules(rules), batch_axis
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
