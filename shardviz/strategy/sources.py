"""Layout maps as users give them, read as plans: a Plan, a Keras
``LayoutMap`` or ``ModelParallel``, a function of a ``DeviceMesh``, a class
with ``get_layout_map`` (or a keras-hub class's name), and the map a model's
class ships. Nothing here compiles."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..devices import quiet_start_up
from ..errors import ShardvizError
from ..plan import Plan, as_plan
from .meshes import keras_mesh

if TYPE_CHECKING:
    from ..model.scan import Scan

LAYOUTS = ("Give a shardviz Plan, a Keras LayoutMap or ModelParallel, a function of a "
           "DeviceMesh that returns a LayoutMap, or a class with get_layout_map (a keras-hub "
           "backbone's, or its name, such as 'LlamaBackbone').")


def layout_source(layout: object) -> tuple[Callable[[dict[str, int]], Plan], dict[str, int] | None]:
    """``(plan_for, mesh)``: a function of a mesh shape that gives the map as
    a Plan on it, and the map's own mesh (None for a class, whose map is
    built for any mesh)."""
    from .._adapters import keras as keras_adapter

    if isinstance(layout, str):
        layout = hub_class(layout)
    if isinstance(layout, type) and not hasattr(layout, "get_layout_map"):
        raise ShardvizError(f"The class {layout.__name__} has no get_layout_map(device_mesh).",
                            hint=LAYOUTS)
    if isinstance(layout, type):
        cls: Any = layout

        def from_class(mesh: dict[str, int]) -> Plan:
            return Plan.from_keras(cls.get_layout_map(keras_mesh(mesh)))

        return from_class, None
    kd = keras_adapter.keras().distribution
    if callable(layout) and not isinstance(layout, (Plan, kd.LayoutMap, kd.ModelParallel,
                                                    kd.DataParallel)):
        make = layout
        return (lambda mesh: Plan.from_keras(make(keras_mesh(mesh)))), None
    if isinstance(layout, dict) and "format" not in layout:
        raise ShardvizError("A dict of rules is not a layout map on its own: it names no mesh.",
                            hint="Give shardviz.Plan({'batch': 2, 'model': 4}, rules), a Keras "
                            "LayoutMap, or a class with get_layout_map.")
    if not isinstance(layout, (Plan, dict, kd.LayoutMap, kd.ModelParallel, kd.DataParallel)):
        raise ShardvizError(f"audit takes the layout map to audit; got {type(layout).__name__}.",
                            hint=LAYOUTS)
    plan = as_plan(layout)

    def resized(mesh: dict[str, int]) -> Plan:
        return Plan(mesh, [(r.key, r.axes) for r in plan.rules], plan.batch_axis)

    return resized, plan.mesh_dict


def hub_class(name: str) -> type:
    """A keras-hub backbone class by name (``"LlamaBackbone"``,
    ``"keras_hub.models.LlamaBackbone"``)."""
    import importlib

    module, _, attr = name.rpartition(".")
    try:
        with quiet_start_up():
            owner = importlib.import_module(module or "keras_hub.models")
        cls = getattr(owner, attr)
    except (ImportError, AttributeError):
        raise ShardvizError(f"{name!r} names no class with a layout map.",
                            hint="Give the name of a keras-hub backbone class that ships "
                            "get_layout_map, such as 'LlamaBackbone', or a class of your own "
                            "with get_layout_map (module.path:Class on the command line).") \
            from None
    if not hasattr(cls, "get_layout_map"):
        raise ShardvizError(f"{name} ships no get_layout_map.",
                            hint="shardviz.suggest(...) proposes a plan for it.")
    return cls


def shipped_plan(scan: Scan, mesh: dict[str, int]) -> Plan | None:
    """The map the model's class ships (keras-hub's ``get_layout_map``) on
    this mesh as a Plan, None when it ships none. Raises what building it
    raises (an indivisible map raises Keras's error)."""
    get_layout_map = getattr(type(scan.model), "get_layout_map", None)
    if not callable(get_layout_map):
        return None
    return Plan.from_keras(get_layout_map(keras_mesh(mesh)))
