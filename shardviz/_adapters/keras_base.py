"""Keras on the JAX backend, and what it knows about meshes, layout maps,
variables and models: the Keras adapter every other one builds on.

Importing Keras on the JAX backend, building a ``DeviceMesh``, reading a
LayoutMap and the layouts variables carry, telling a functional model and a
rule conflict apart, giving a deferred variable its value, and seeding Keras.
Each function that reaches a private API says why, and which public API
would replace it.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import random

from ..errors import ShardvizError


def keras():
    """Import keras on the JAX backend, or say clearly why not."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras as _keras

    backend = _keras.backend.backend()
    if backend != "jax":
        raise ShardvizError(
            f"Keras is running on the {backend!r} backend; shardviz needs 'jax'.",
            hint="Set KERAS_BACKEND=jax before Keras is first imported "
            "(restart the kernel), or import shardviz before keras.",
        )
    return _keras


def device_mesh(shape, axis_names, devices=None):
    """A ``keras.distribution.DeviceMesh``; ``devices`` defaults to the first
    ``prod(shape)`` of ``list_devices()``, as a mesh smaller than the machine
    must be given an explicit device list."""
    kd = keras().distribution
    if devices is None:

        devices = kd.list_devices()[: math.prod(shape)]
    return kd.DeviceMesh(shape=tuple(shape), axis_names=tuple(axis_names), devices=devices)


def placeholder_mesh():
    """A one-device mesh that does not start the JAX backend.

    A Distribution needs a mesh, even one that is only used to observe
    which paths Keras looks up.
    """
    kd = keras().distribution
    return kd.DeviceMesh(shape=(1,), axis_names=("batch",), devices=["cpu:0"])


def layout_map_items(layout_map):
    """``(key, axes)`` pairs of a LayoutMap, in insertion order."""
    return [(key, tuple(layout_map[key].axes)) for key in layout_map]


def model_parallel_layout_map(distribution):
    """The LayoutMap of a ModelParallel.

    Reason: Keras keeps it private (``_layout_map``); ``Plan.from_keras``
    and the rule names of applied layouts need it. Waits for a public
    ``ModelParallel.layout_map``.
    """
    return distribution._layout_map


def is_conflict(error: Exception) -> bool:
    """Whether ``error`` is the ValueError a LayoutMap raises when a path
    matches several keys ("Path '...' matches multiple layout specification
    keys"), rather than any other failure of a lookup.

    Reason: Keras raises a plain ValueError; only its message tells a
    conflict apart. Waits for a dedicated exception type in Keras.
    """
    return isinstance(error, ValueError) and "matches multiple layout" in str(error)


def is_functional(model) -> bool:
    """Whether ``model`` is a functional model (built from ``keras.Input``),
    Sequential models included.

    Reason: the class ``Functional`` is not exported; ``keras.Model(inputs,
    outputs)`` returns one. Waits for ``keras.models.Functional`` in the
    public API.
    """
    from keras.src.models.functional import Functional

    return isinstance(model, Functional)


def all_layers(model) -> list:
    """Every layer inside ``model``, nested ones included, each once, in
    Keras's order (the model itself left out).

    Reason: ``model.layers`` lists only the top level; keras-hub's own
    ``Backbone.enable_lora`` walks ``_flatten_layers`` the same way. Waits for
    a public recursive layer iterator.
    """
    return list(model._flatten_layers(include_self=False))


def unique_variables(model) -> list:
    """``model.variables`` without repeats (a shared variable appears once),
    in Keras's order."""
    seen, out = set(), []
    for v in model.variables:
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


def initial_value(variable, sharding):
    """A variable's value placed by ``sharding``: its own value if it has one,
    else its initializer, run under jit straight into the shards.

    Reason: a deferred variable (made in a ``StatelessScope`` that does not
    initialise) raises on ``.value``; whether it holds one, and its
    initializer, are private (``_value``, ``_initializer``). Waits for a
    public ``Variable.initializer`` and ``Variable.is_initialized``.
    """
    import jax

    if getattr(variable, "_value", None) is not None:
        return jax.device_put(variable.value, sharding)
    initializer = variable._initializer
    shape, dtype = tuple(variable.shape), variable.dtype
    return jax.jit(lambda: initializer(shape, dtype=dtype), out_shardings=sharding)()


@contextlib.contextmanager
def slot_references(optimizer):
    """Inside this block, record which model variable each optimizer slot
    mirrors: yields a dict ``id(slot) -> reference variable``, filled as the
    optimizer is built.

    Reason: Keras gives a slot the layout of the variable it mirrors, inside
    ``optimizer.add_variable_from_reference``, and keeps no record of the
    pair; the method is wrapped on this one (private, fresh) optimizer
    instance only. Waits for a public slot-to-variable mapping.
    """
    references: dict = {}
    original = optimizer.add_variable_from_reference

    def add_variable_from_reference(reference_variable, *args, **kwargs):
        variable = original(reference_variable, *args, **kwargs)
        references[id(variable)] = reference_variable
        return variable

    optimizer.add_variable_from_reference = add_variable_from_reference
    try:
        yield references
    finally:
        del optimizer.add_variable_from_reference


def layout_keys(distribution) -> dict:
    """``id(layout) -> key`` for the layouts of a ModelParallel's LayoutMap,
    so that a layout Keras returns for a lookup names the rule it came from."""
    layout_map = model_parallel_layout_map(distribution)
    return {id(layout_map[key]): key for key in layout_map}


def current_layer():
    """The layer whose name scope is innermost right now, or None.

    Keras opens a name scope with ``caller=layer`` around every layer call,
    and looks up ``current_path() + "/output"`` inside it; this tells which
    layer a ``get_tensor_layout`` lookup is for.

    Reason: the name-scope stack is private Keras state. Waits for a public
    "current layer" query (or a lookup that passes the layer).
    """
    from keras.src.backend.common import global_state

    stack = global_state.get_global_attribute("name_scope_stack") or []
    return stack[-1].caller if stack else None


def build_shapes(model) -> dict:
    """The input shapes Keras recorded when a subclassed model was built by a
    call (``model._build_shapes_dict``); a model that was called on data knows
    the shape of its input, which no public attribute gives. Waits for a
    public ``model.input_shape`` on subclassed models."""
    return dict(getattr(model, "_build_shapes_dict", None) or {})


def is_symbolic_structure(outputs) -> bool:
    """Whether ``outputs`` is a structure (not a single tensor) holding
    KerasTensors: what a multi-output layer returns while a functional model
    is built. ``keras.distribution.distribute_tensor`` passes a single
    KerasTensor through untouched, but hands such a structure to
    ``jax.device_put``, which raises."""
    k = keras()
    if isinstance(outputs, k.KerasTensor):
        return False
    import jax

    leaves = jax.tree_util.tree_leaves(outputs)
    return any(isinstance(leaf, k.KerasTensor) for leaf in leaves)


def variable_own_layout(variable):
    """The axes of a layout the variable carries itself, or None.

    Keras's ``ModelParallel.get_variable_layout`` returns ``variable._layout``
    before it consults the LayoutMap.

    Reason: that layout is private (``_layout``). Waits for a public
    ``Variable.layout``.
    """
    layout = getattr(variable, "_layout", None)
    if layout is None:
        return None
    axes = getattr(layout, "axes", None)
    if axes is not None:
        return tuple(axes)
    spec = getattr(layout, "spec", None)  # a jax Sharding given directly
    return tuple(spec) if spec is not None else None


def set_random_seed(seed: int) -> None:
    """Seed Keras (its global seed, Python's and NumPy's) as
    ``keras.utils.set_random_seed`` does, without TensorFlow.

    Reason: ``keras.utils.set_random_seed`` imports TensorFlow whenever it is
    installed, only to seed it; shardviz never uses it, and the import costs
    seconds and prints TensorFlow's start-up log. Waits for a Keras seed
    function that seeds only the backend in use.
    """

    import numpy as np
    from keras.src.backend.common import global_state
    from keras.src.random import seed_generator
    from keras.src.utils import rng_utils

    global_state.set_global_attribute(rng_utils.GLOBAL_RANDOM_SEED, seed)
    global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, None)
    random.seed(seed)
    np.random.seed(seed)


@contextlib.contextmanager
def fresh_names():
    """Build with Keras's automatic layer names as a new process gives them.

    Reason: Keras numbers a layer built without a name (keras-hub's mixture-of-
    experts blocks, ``mixtral_sparse_moe_block_6``) from a process-wide counter,
    ``object_name_uids`` in ``keras.src.backend.common.global_state``, so the same
    builder gives other variable paths after other models were built. shardviz
    builds with the counter empty, so that its scan, its workers and its
    single-process references name every variable alike; the counter is restored
    after (each name at the larger of its counts), so the session's own names go on.
    Waits for a public way to scope Keras's automatic names.
    """
    from keras.src.backend.common import global_state

    key = "object_name_uids"
    saved = global_state.get_global_attribute(key)
    global_state.set_global_attribute(key, collections.defaultdict(int))
    try:
        yield
    finally:
        made = global_state.get_global_attribute(key) or {}
        merged = collections.defaultdict(int, saved or {})
        for name, count in made.items():
            merged[name] = max(merged[name], count)
        global_state.set_global_attribute(key, merged)

