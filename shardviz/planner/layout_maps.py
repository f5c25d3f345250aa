""":func:`layout_map_for`: a Keras ``LayoutMap`` for a model on a mesh, from
the planner's strategies for that mesh shape, the best one chosen by its
compiled figures when inputs are given (else by its variables' exact bytes
per device)."""

from __future__ import annotations

import math
from typing import Any

from ..analysis import analyze
from ..errors import ShardvizError
from ..model.scan import Scan
from ..model.scan import scan as scan_model
from ..plan import Plan
from .strategies import _strategies


def plan_for_mesh(model_or_builder: object, mesh: dict[str, int], *, inputs: object = None,
                  batch: int | None = None, seq: int | None = None,
                  target: str | None = None) -> Plan:
    """The planner's best plan on exactly this ``{"batch": b, "model": m}``
    mesh: the least memory per device, then the fewest collective bytes,
    from compiled programs when ``inputs`` (or ``batch`` and ``seq``) are
    given, else from the variables' exact bytes."""
    if set(mesh) != {"batch", "model"}:
        raise ShardvizError(f"The mesh {mesh} has other axes than 'batch' and 'model'.",
                            hint="Give {'batch': b, 'model': m}; layout_map_for renames them "
                            "to a DeviceMesh's own axis names.")
    scan = model_or_builder if isinstance(model_or_builder, Scan) else scan_model(model_or_builder)
    n = math.prod(mesh.values())
    found = [(label, plan) for label, plan, _ in _strategies(scan, n, sequence=False)
             if plan.mesh_dict == mesh]
    compiled = inputs is not None or batch is not None or seq is not None
    best: tuple[tuple, Plan] | None = None
    for _label, plan in found:
        report = analyze(scan, plan, inputs=inputs, batch=batch, seq=seq, target=target) \
            if compiled else analyze(scan, plan, target=target)
        if report.errors:
            continue
        t = report.totals
        key = (t.fits is False, t.bytes_per_device, t.collective_bytes or 0, len(plan.rules))
        if best is None or key < best[0]:
            best = (key, plan)
    if best is None:
        raise ShardvizError(f"No strategy of the planner builds on {mesh} for this model.",
                            hint="Try another mesh shape (shardviz.suggest lists them).")
    return best[1]


def layout_map_for(model_or_builder: object, device_mesh: Any, **kwargs: Any) -> Any:
    """A ``keras.distribution.LayoutMap`` for the model on ``device_mesh``
    (a Keras ``DeviceMesh`` with two axes, data first, or ``{"batch": b,
    "model": m}``), from :func:`plan_for_mesh` (``inputs=``, ``batch=``,
    ``seq=`` and ``target=`` pass on to it). With a dict, the map's mesh
    holds JAX's devices when there are enough, else only their names (a map
    to read or save; give a DeviceMesh to distribute with it).

    >>> import shardviz
    >>> from shardviz import examples
    >>> layout_map = shardviz.layout_map_for(examples.mlp, {"batch": 2, "model": 4})
    >>> layout_map["up/kernel"].axes, layout_map["down/kernel"].axes
    ((None, 'model'), ('model', None))
    """
    from .._adapters import keras as keras_adapter

    kd = keras_adapter.keras().distribution
    if isinstance(device_mesh, dict):
        sizes = dict(device_mesh)
        names = ("batch", "model")
        n = math.prod(sizes[a] for a in names)
        import jax

        devices = None if jax.device_count() >= n else [f"cpu:{i}" for i in range(n)]
        device_mesh = keras_adapter.device_mesh(tuple(sizes[a] for a in names), names, devices)
    elif isinstance(device_mesh, kd.DeviceMesh) and len(device_mesh.axis_names) == 2:
        names = tuple(device_mesh.axis_names)
        sizes = dict(zip(("batch", "model"), (int(s) for s in device_mesh.shape)))
    else:
        raise ShardvizError(f"{type(device_mesh).__name__} is not a two-axis mesh.",
                            hint="Give a keras.distribution.DeviceMesh with a data axis and a "
                            "model axis, or {'batch': 2, 'model': 4}.")
    plan = plan_for_mesh(model_or_builder, sizes, **kwargs)
    rename = dict(zip(("batch", "model"), names))
    layout_map = kd.LayoutMap(device_mesh)
    for rule in plan.rules:
        layout_map[rule.key] = tuple(_renamed(a, rename) for a in rule.axes)
    return layout_map


def _renamed(axis: object, rename: dict[str, str]) -> object:
    if isinstance(axis, str):
        return rename.get(axis, axis)
    if isinstance(axis, tuple):
        return tuple(rename.get(a, a) for a in axis)
    return axis
