""":func:`layout_map_for`: a Keras ``LayoutMap`` for a model on a mesh, from
the planner's strategies for that mesh shape (and the map the model's class
ships, if any), the best one chosen by its compiled figures when inputs are
given (else by its variables' exact bytes per device), never worse than the
shipped map."""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import pandas as pd

from ..analysis import analyze
from ..errors import ShardvizError
from ..format import human_bytes
from ..model.scan import Scan
from ..model.scan import scan as scan_model
from ..plan import Plan
from ..report.settings import Settings
from ..strategy.sources import shipped_plan
from ..strategy.strategies import candidate_plans
from ..target import Target


@dataclasses.dataclass
class MapChoice:
    """The candidates :func:`choose_map` compared on one mesh, and its choice."""

    mesh: dict[str, int]
    label: str
    """The chosen candidate: a strategy's label, or ``"shipped"``."""
    plan: Plan
    candidates: pd.DataFrame
    """A row per candidate: label, builds, error (the first, where it does
    not build), bytes_per_device, collective_bytes, fits, rules, skipped
    (why it was not compiled, with ``skip_dominated``), chosen
    (``bytes_per_device`` and ``collective_bytes`` per device, from compiled
    programs when inputs were given, else variables only)."""
    compiled: bool

    @property
    def shipped(self) -> pd.Series | None:
        """The row of the map the model's class ships, or None."""
        rows = self.candidates[self.candidates.label == "shipped"]
        return None if rows.empty else rows.iloc[0]

    @property
    def chosen(self) -> pd.Series:
        return self.candidates[self.candidates.chosen].iloc[0]


def choose_map(model_or_builder: object, mesh: dict[str, int], *, inputs: object = None,
               batch: int | None = None, seq: int | None = None,
               target: str | Target | None = None, prefer: str = "memory",
               skip_dominated: bool = False, settings: Settings | None = None) -> MapChoice:
    """Compile every strategy of the planner on exactly this ``{"batch": b,
    "model": m}`` mesh and choose one: the least memory per device, then the
    fewest collective bytes, from compiled programs when ``inputs`` (or
    ``batch`` and ``seq``) are given, else from the variables' exact bytes.

    Where the model's class ships a layout map that builds on the mesh, it is
    a candidate too, and the choice is among the candidates no worse than it
    on both memory and collective bytes: never worse than the shipped map.

    ``prefer="communication"`` chooses the fewest collective bytes first, then
    the least memory: the trade is in ``candidates``.

    ``skip_dominated=True`` (with ``prefer="memory"`` and a compile) compiles
    the candidates in the order of their variables' bytes per device, and
    skips one whose variables alone take more than a compiled candidate's
    whole program: it cannot be chosen, since a compiled program holds its
    variables. The choice is the same, with fewer compiles; the skipped row
    says why and has no compiled figures. The shipped map is always compiled.

    ``settings`` (a :class:`~shardviz.report.settings.Settings`) is what every
    candidate is analysed with; ``inputs``, ``batch``, ``seq`` and ``target``
    given here replace its values where they differ from their defaults.
    """
    if prefer not in ("memory", "communication"):
        raise ShardvizError(f"prefer={prefer!r:.40} is not a choice.",
                            hint="Give 'memory' or 'communication'.")
    if set(mesh) != {"batch", "model"}:
        raise ShardvizError(f"The mesh {mesh} has other axes than 'batch' and 'model'.",
                            hint="Give {'batch': b, 'model': m}; layout_map_for renames them "
                            "to a DeviceMesh's own axis names.")
    bad = {a: s for a, s in mesh.items()
           if isinstance(s, bool) or not isinstance(s, int) or s < 1}
    if bad:
        said = ", ".join(f"{a!r} {s!r:.20}" for a, s in bad.items())
        raise ShardvizError(f"The mesh {mesh} gives {said} devices: each axis needs a whole "
                            "number of devices, at least 1.",
                            hint="Give sizes such as {'batch': 2, 'model': 4}.")
    asked = (settings if settings is not None else Settings()).given(
        inputs=inputs, batch=batch, seq=seq, target=target)
    target = asked.target
    scan = model_or_builder if isinstance(model_or_builder, Scan) else scan_model(
        model_or_builder, tuning=asked.tuning)
    n = math.prod(mesh.values())
    every = candidate_plans(scan, n, sequence=False)
    found = [(label, plan) for label, plan, _ in every if plan.mesh_dict == mesh]
    try:
        shipped = shipped_plan(scan, mesh)
    except Exception:  # noqa: BLE001  a shipped map that does not build is no candidate
        shipped = None
    if shipped is not None:
        found.append(("shipped", shipped))
    if not found:
        offered = sorted({(p.mesh_dict.get("batch", 1), p.mesh_dict.get("model", 1))
                          for _, p, _ in every})
        raise ShardvizError(
            f"None of the planner's strategies for this model on {n} devices makes the mesh "
            f"{mesh}.",
            hint="Give one of the meshes they make: "
            f"{', '.join(f'batch={b} × model={m}' for b, m in offered) or 'none'}.")
    compiled = asked.inputs is not None or asked.batch is not None or asked.seq is not None
    layouts = asked.layouts_only()
    skipping = skip_dominated and compiled and prefer == "memory"
    listed = [label for label, _ in found]
    if skipping:  # the shipped map first, then the least variable bytes first
        floors = {label: _variable_bytes(scan, plan, layouts) for label, plan in found}
        found.sort(key=lambda item: (item[0] != "shipped", floors[item[0]]))
    rows: list[dict] = []
    for label, plan in found:
        if skipping and label != "shipped" and math.isfinite(floors[label]):
            best = _best_so_far(rows)
            if best is not None and floors[label] > best["bytes_per_device"]:
                rows.append({"label": label, "builds": True, "error": None,
                             "bytes_per_device": None, "collective_bytes": None, "fits": None,
                             "rules": len(plan.rules), "plan": plan,
                             "skipped": f"not compiled: its variables alone take "
                             f"{human_bytes(floors[label])} per device, more than the "
                             f"{human_bytes(best['bytes_per_device'])} of {best['label']}'s "
                             "compiled program"})
                continue
        report = analyze(scan, plan, settings=asked if compiled else layouts)
        t = report.totals
        rows.append({"label": label, "builds": not report.errors,
                     "error": report.errors[0].message if report.errors else None,
                     "bytes_per_device": t.bytes_per_device,
                     "collective_bytes": t.collective_bytes or 0, "fits": t.fits,
                     "rules": len(plan.rules), "plan": plan, "skipped": None})
    rows.sort(key=lambda r: listed.index(r["label"]))  # ties keep the strategies' order
    table = pd.DataFrame(rows, columns=["label", "builds", "error", "bytes_per_device",
                                        "collective_bytes", "fits", "rules", "skipped", "plan"])
    pool = table[table.builds & table.skipped.isna()]
    base = pool[pool.label == "shipped"]
    if not base.empty:
        b = base.iloc[0]
        pool = pool[(pool.bytes_per_device <= b.bytes_per_device)
                    & (pool.collective_bytes <= b.collective_bytes)]
    if pool.empty:
        raise _none_chosen(mesh, table, target)
    figures = ["bytes_per_device", "collective_bytes"]
    if prefer == "communication":
        figures.reverse()
    order = pool.assign(over=pool.fits.eq(False)).sort_values(
        ["over", *figures, "rules"], kind="stable")
    best = order.index[0]
    table["chosen"] = table.index == best
    return MapChoice(dict(mesh), str(table.label[best]), table.plan[best],
                     table.drop(columns="plan"), compiled)


def _none_chosen(mesh: dict[str, int], table: pd.DataFrame,
                 target: str | Target | None) -> ShardvizError:
    """Why no candidate can be chosen: none fits the target's chips (said
    with the compiler's figures for the one that needs the least), or none
    builds (with the first error)."""
    over = table[table.fits.eq(False) & table.bytes_per_device.notna()]
    if target is not None and not over.empty:
        least = over.sort_values("bytes_per_device", kind="stable").iloc[0]
        return ShardvizError(
            f"No strategy of the planner fits {target} on {mesh} for this model: the one that "
            f"needs the least memory is {least.label}. {least.error}",
            hint=f"Try another mesh shape of the slice (shardviz.suggest(model, "
            f"target={target!r}, inputs=...) compiles each), a smaller batch, or a larger "
            "slice.")
    first = table.error.dropna()
    return ShardvizError(
        f"No strategy of the planner builds on {mesh} for this model"
        + (f": {first.iloc[0]}" if len(first) else "."),
        hint="Check the inputs, or try another mesh shape (shardviz.suggest lists them).")


def _variable_bytes(scan: Scan, plan: Plan, settings: Settings) -> float:
    """The bytes per device of a plan's variables (no compile): what any
    compiled program under it holds at least; infinite where Keras would
    refuse the plan (it is then compiled, to say why)."""
    report = analyze(scan, plan, settings=settings)
    return float(report.variable_bytes_per_device) if not report.errors else math.inf


def _best_so_far(rows: list[dict]) -> dict | None:
    """The compiled candidate with the least memory that builds and is no
    worse than the shipped map (the first row, where there is one)."""
    shipped = next((r for r in rows if r["label"] == "shipped" and r["builds"]), None)
    pool = [r for r in rows if r["builds"] and r["skipped"] is None
            and (shipped is None or (r["bytes_per_device"] <= shipped["bytes_per_device"]
                                     and r["collective_bytes"] <= shipped["collective_bytes"]))]
    return min(pool, key=lambda r: r["bytes_per_device"], default=None)


def plan_for_mesh(model_or_builder: object, mesh: dict[str, int], **kwargs: Any) -> Plan:
    """The plan :func:`choose_map` chooses on this mesh."""
    return choose_map(model_or_builder, mesh, **kwargs).plan


def layout_map_for(model_or_builder: object, device_mesh: Any, *, inputs: object = None,
                   batch: int | None = None, seq: int | None = None,
                   target: str | None = None, prefer: str = "memory",
                   skip_dominated: bool = False, settings: Settings | None = None) -> Any:
    """A ``keras.distribution.LayoutMap`` for the model on ``device_mesh``
    (a Keras ``DeviceMesh`` with two axes, or ``{"batch": b, "model": m}``;
    of a DeviceMesh's axes, the one not named ``model`` is the data axis, and
    with neither named ``model`` nor ``batch``, the first), from
    :func:`plan_for_mesh` (``inputs=``, ``batch=``, ``seq=``, ``target=``,
    ``prefer=`` and ``settings=`` pass on to :func:`choose_map`). With a dict, the map's
    mesh holds JAX's devices when there are enough, else only their names (a map
    to read or save; give a DeviceMesh to distribute with it).

    The keys name layers as a fresh session names them. Keras numbers a
    layer built without a name from a per-session counter (``dense_3``), so
    build such a model in a fresh session (``keras.backend.clear_session()``
    first) for the keys to match it; ``shardviz.audit(model, layout_map)``
    lists any rule that matches nothing.

    >>> import shardviz
    >>> from shardviz import examples
    >>> layout_map = shardviz.layout_map_for(examples.mlp, {"batch": 2, "model": 4})
    >>> layout_map["up/kernel"].axes, layout_map["down/kernel"].axes
    ((None, 'model'), ('model', None))
    """
    from .._adapters import keras as keras_adapter

    kd = keras_adapter.keras().distribution
    if isinstance(device_mesh, dict):
        if set(device_mesh) != {"batch", "model"}:
            raise ShardvizError(
                f"The mesh {device_mesh} names its axes {', '.join(map(repr, device_mesh))}; "
                "a mesh given as a dict names them 'batch' and 'model'.",
                hint="Give {'batch': 2, 'model': 4}, or a keras.distribution.DeviceMesh with "
                "your own axis names (the one not named 'model' is the data axis).")
        sizes = dict(device_mesh)
        names = ("batch", "model")
        n = math.prod(sizes[a] for a in names)
        import jax

        devices = None if jax.device_count() >= n else [f"cpu:{i}" for i in range(n)]
        device_mesh = keras_adapter.device_mesh(tuple(sizes[a] for a in names), names, devices)
    elif isinstance(device_mesh, kd.DeviceMesh) and len(device_mesh.axis_names) == 2:
        names = _data_and_model(tuple(device_mesh.axis_names))
        shape = dict(zip(device_mesh.axis_names, (int(s) for s in device_mesh.shape)))
        sizes = {"batch": shape[names[0]], "model": shape[names[1]]}
    else:
        raise ShardvizError(f"{type(device_mesh).__name__} is not a two-axis mesh.",
                            hint="Give a keras.distribution.DeviceMesh with a data axis and a "
                            "model axis, or {'batch': 2, 'model': 4}.")
    plan = plan_for_mesh(model_or_builder, sizes, inputs=inputs, batch=batch, seq=seq,
                         target=target, prefer=prefer, skip_dominated=skip_dominated,
                         settings=settings)
    if names[0] != tuple(device_mesh.axis_names)[0]:
        # ModelParallel splits the batch over the mesh's first axis unless told otherwise.
        warnings.warn(
            f"The map splits the batch over {names[0]!r}, the second axis of the DeviceMesh "
            f"{tuple(device_mesh.axis_names)}; keras.distribution.ModelParallel splits it "
            f"over the first, {names[1]!r}, unless given "
            f"ModelParallel(layout_map=..., batch_dim_name={names[0]!r}).",
            stacklevel=2)
    rename = dict(zip(("batch", "model"), names))
    layout_map = kd.LayoutMap(device_mesh)
    for rule in plan.rules:
        layout_map[rule.key] = tuple(_renamed(a, rename) for a in rule.axes)
    return layout_map


def _data_and_model(names: tuple[str, ...]) -> tuple[str, str]:
    """A DeviceMesh's data and model axes: by name where one is called
    ``model`` (or ``batch``), else the first is the data axis.

    >>> _data_and_model(("model", "batch")), _data_and_model(("data", "tp"))
    (('batch', 'model'), ('data', 'tp'))
    """
    first, second = names
    if "model" in names:
        return (second, first) if first == "model" else (first, second)
    if "batch" in names:
        return (first, second) if first == "batch" else (second, first)
    return first, second


def _renamed(axis: object, rename: dict[str, str]) -> object:
    if isinstance(axis, str):
        return rename.get(axis, axis)
    if isinstance(axis, tuple):
        return tuple(rename.get(a, a) for a in axis)
    return axis
