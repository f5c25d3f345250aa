"""A plan as Keras's own objects: a ``ModelParallel`` to use, and back.

:func:`plan_to_keras` and :func:`plan_from_keras` are the bodies of
:meth:`Plan.to_keras <shardviz.plan.value.Plan.to_keras>` and
:meth:`Plan.from_keras <shardviz.plan.value.Plan.from_keras>`. Keras is
imported only when they run, through ``shardviz._adapters.keras``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ShardvizError

if TYPE_CHECKING:
    from .value import Plan


def plan_to_keras(plan: Plan, devices: Sequence[object] | None = None) -> Any:
    """What :meth:`Plan.to_keras <shardviz.plan.value.Plan.to_keras>` returns."""
    from .._adapters import keras as keras_adapter

    plan.refuse_errors()
    kd = keras_adapter.keras().distribution
    if devices is None:
        available = kd.list_devices()
        if len(available) < plan.mesh_size:
            raise ShardvizError(
                f"The mesh {plan.mesh_dict} needs {plan.mesh_size} devices, "
                f"but only {len(available)} are available.",
                hint=f"Call shardviz.simulate_devices({plan.mesh_size}) before any JAX "
                "operation (restart the kernel first), or shrink the mesh.",
            )
        devices = available[: plan.mesh_size]
    mesh = kd.DeviceMesh(shape=plan.mesh_shape, axis_names=plan.axis_names, devices=devices)
    layout_map = kd.LayoutMap(mesh)
    for rule in plan.rules:
        layout_map[rule.key] = tuple(rule.axes)
    return kd.ModelParallel(layout_map=layout_map, batch_dim_name=plan.batch_axis)


def plan_from_keras(cls: type[Plan], obj: object) -> Plan:
    """What :meth:`Plan.from_keras <shardviz.plan.value.Plan.from_keras>` returns,
    built with ``cls``."""
    from .._adapters import keras as keras_adapter

    kd = keras_adapter.keras().distribution
    if isinstance(obj, kd.LayoutMap):
        mesh, items, batch = obj.device_mesh, keras_adapter.layout_map_items(obj), None
    elif isinstance(obj, kd.ModelParallel):
        layout_map = keras_adapter.model_parallel_layout_map(obj)
        items = keras_adapter.layout_map_items(layout_map)
        mesh, batch = obj.device_mesh, obj.batch_dim_name
    elif isinstance(obj, kd.DataParallel):
        mesh, items, batch = obj.device_mesh, [], obj.batch_dim_name
    else:
        raise ShardvizError(
            f"Plan.from_keras expects a keras.distribution ModelParallel, DataParallel "
            f"or LayoutMap, got {type(obj).__name__}.",
        )
    if mesh is None:
        raise ShardvizError("The LayoutMap has no device mesh; create it with LayoutMap(mesh).")
    return cls(zip(mesh.axis_names, (int(s) for s in mesh.shape)), items, batch)
