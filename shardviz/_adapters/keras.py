"""Keras, as shardviz reaches it: every private Keras API, each with its reason.

Everything shardviz needs from Keras that no public API gives lives in these
modules: each function says why it is needed and which public API would
replace it, so that a change in Keras breaks one file. A few public helpers
that every layer above needs (importing Keras on the JAX backend, building a
``DeviceMesh``) sit here too, so that Keras is reached one way. The layers
above import this module; the functions live in

- ``keras_base``: importing Keras, meshes, layout maps, variables, models, seeding;
- ``keras_outputs``: observing layer outputs, and the layer that raised;
- ``keras_deferred``: variables with no value (deferred), constants included;
- ``keras_train``: the jitted train step, compiled loss and metrics, training state;
- ``keras_attention``: which attention Keras runs while it traces.
"""

from __future__ import annotations

from .keras_attention import AttentionCall, watching_attention
from .keras_base import (
    all_layers,
    build_shapes,
    current_layer,
    device_mesh,
    fresh_names,
    initial_value,
    is_conflict,
    is_functional,
    is_symbolic_structure,
    keras,
    layout_keys,
    layout_map_items,
    model_parallel_layout_map,
    placeholder_mesh,
    set_random_seed,
    slot_references,
    unique_variables,
    variable_own_layout,
)
from .keras_deferred import deferred_variables
from .keras_outputs import full_tracebacks, observing_outputs, raising_layer
from .keras_train import (
    build_compiled_metrics,
    compiled_loss_name,
    is_compiled,
    keras_train_function,
    keras_train_step,
    training_state,
)

__all__ = [
    "AttentionCall",
    "all_layers",
    "build_compiled_metrics",
    "build_shapes",
    "compiled_loss_name",
    "current_layer",
    "deferred_variables",
    "device_mesh",
    "fresh_names",
    "full_tracebacks",
    "initial_value",
    "is_compiled",
    "is_conflict",
    "is_functional",
    "is_symbolic_structure",
    "keras",
    "keras_train_function",
    "keras_train_step",
    "layout_keys",
    "layout_map_items",
    "model_parallel_layout_map",
    "observing_outputs",
    "placeholder_mesh",
    "raising_layer",
    "set_random_seed",
    "slot_references",
    "training_state",
    "unique_variables",
    "variable_own_layout",
    "watching_attention",
]
