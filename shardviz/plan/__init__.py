"""Plan: an immutable description of a Keras distribution.

A Plan holds what a ``keras.distribution.ModelParallel`` holds: the mesh, the
ordered layout rules and the batch axis. It holds no devices and starts
nothing, so it can be built, compared, edited, saved and loaded anywhere.

>>> plan = Plan({"batch": 2, "model": 4}, {".*dense.*kernel": (None, "model")})
>>> Plan.from_json(plan.to_json()) == plan
True

Modules:

- ``value``: the :class:`Plan` class (properties, presets, edits) and :func:`as_plan`;
- ``rule``: :class:`Rule`, one layout rule, and the normalising of rules and axes;
- ``bounds``: the limits on a mesh (:data:`MAX_MESH_SIZE`, :data:`MAX_AXES`, ...)
  and the checks of numbers, sizes and axis names against them;
- ``validate``: the problems :meth:`Plan.check` finds in a plan on its own;
- ``serialize``: the versioned dict and JSON form of a plan;
- ``keras_convert``: a plan to and from Keras's ``ModelParallel`` and ``LayoutMap``;
- ``python_code``: :meth:`Plan.to_python`, the source that builds the distribution.
"""

from __future__ import annotations

from .bounds import (
    AXIS_NAME,
    MAX_AXES,
    MAX_AXIS_SIZE,
    MAX_MESH_SIZE,
    SIZE_UNITS,
    as_bytes,
    as_int,
    check_axis_name,
    check_device_count,
    check_processes,
)
from .bounds import normalize_mesh as normalize_mesh
from .rule import Axes, Rule
from .rule import normalize_rules as normalize_rules  # planner.sweep_meshes reads rules as given
from .serialize import SCHEMA, SCHEMA_VERSION
from .value import Plan, as_plan

__all__ = [
    "AXIS_NAME",
    "MAX_AXES",
    "MAX_AXIS_SIZE",
    "MAX_MESH_SIZE",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SIZE_UNITS",
    "Axes",
    "Plan",
    "Rule",
    "as_bytes",
    "as_int",
    "as_plan",
    "check_axis_name",
    "check_device_count",
    "check_processes",
]
