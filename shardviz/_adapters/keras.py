"""Keras, as shardviz reaches it: every private Keras API, each with its reason.

Everything shardviz needs from Keras that no public API gives lives here:
each function says why it is needed and which public API would replace it,
so that a change in Keras breaks one file. A few public helpers that every
layer above needs (importing Keras on the JAX backend, building a
``DeviceMesh``) sit here too, so that Keras is reached one way.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import threading

from ..errors import ShardvizError
from . import Swap


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
        import math

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


class _Probe:
    """What the observing distribution returns for an output lookup: it is
    truthy, so Keras calls ``distribute_tensor``, which hands the outputs to
    ``observer``."""

    __slots__ = ("observer",)

    def __init__(self, observer):
        self.observer = observer


def _observed(original):
    """``distribute_tensor`` that hands a probe's outputs to its observer,
    and is Keras's own for every other layout."""

    def distribute_tensor(tensor, layout):
        if isinstance(layout, _Probe):
            return layout.observer(tensor, original)
        return original(tensor, layout)

    return distribute_tensor


def _distribution_lib():
    from keras.src.distribution import distribution_lib

    return distribution_lib


_output_hook = Swap(_distribution_lib, "distribute_tensor", _observed)
"""Keras offers no public per-layer hook that sees an output tensor; only
``Layer.__call__`` calls ``distribute_tensor``, right after it looks up
``<layer path>/output``. While an analysis observes outputs, that function
routes probes to their observers; it is Keras's own again when no analysis
runs. Waits for a public per-layer output hook in Keras."""


@contextlib.contextmanager
def observing_outputs(on_output, base=None):
    """Observe every layer output Keras would constrain, inside this block.

    After each layer call Keras looks up ``current_path() + "/output"`` with
    ``distribution.get_tensor_layout`` and, if a layout comes back, applies it
    with ``keras.distribution.distribute_tensor``. Inside this block (in this
    thread) a distribution derived from ``base`` (a ModelParallel, or None
    for a placeholder that constrains nothing) answers every lookup with a
    probe, and ``distribute_tensor`` hands it to
    ``on_output(path, layer, outputs, layout, apply, error)``, which returns
    the outputs to use. ``layout`` is the TensorLayout ``base`` returned (None
    when nothing matched) and ``apply(outputs)`` applies it exactly as Keras
    would; ``error`` is the exception ``base``'s lookup raised (a rule
    conflict), or None.

    Reason: the observing distribution subclasses Keras's ``Distribution``
    base class, which is not exported. Waits for a public per-layer output
    hook (see ``_output_hook``).
    """
    keras()
    from keras.src.distribution import distribution_lib as dl  # the base class is not exported

    class _Observer(dl.Distribution):
        def __init__(self):
            if base is None:
                super().__init__(placeholder_mesh())
            else:
                super().__init__(base.device_mesh, base.batch_dim_name)

        def get_data_layout(self, data_shape):
            return None if base is None else base.get_data_layout(data_shape)

        def get_variable_layout(self, variable):
            return None if base is None else base.get_variable_layout(variable)

        def get_tensor_layout(self, path):
            layout = error = None
            if base is not None:
                try:
                    layout = base.get_tensor_layout(path)
                except ValueError as e:
                    if not is_conflict(e):
                        raise
                    error = e
            layer = current_layer()

            def observer(tensor, original):
                apply = (lambda t: original(t, layout)) if layout is not None else None
                return on_output(path, layer, tensor, layout, apply, error)

            return _Probe(observer)

    with _output_hook.held(), _Observer().scope():
        yield


@contextlib.contextmanager
def full_tracebacks():
    """Keep Keras's own frames in tracebacks raised inside this block (in this
    thread), so that :func:`raising_layer` can find the layer that raised."""
    config = keras().config
    enabled = config.is_traceback_filtering_enabled()
    config.disable_traceback_filtering()
    try:
        yield
    finally:
        if enabled:
            config.enable_traceback_filtering()


def raising_layer(error):
    """The innermost Keras layer whose call was running when ``error`` was
    raised (from the traceback's ``Layer.__call__`` frames), or None."""
    layer_class = keras().layers.Layer
    found = None
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name in ("__call__", "call"):
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, layer_class):
                found = candidate
        tb = tb.tb_next
    return found


_deferring = threading.local()


class _Constant:
    """An initializer that returns a fixed value."""

    def __init__(self, value):
        self.value = value

    def __call__(self, shape, dtype=None):
        return keras().ops.convert_to_tensor(self.value, dtype=dtype)


def _deferring_constants(original):
    """``Variable.__init__`` that, while shardviz defers variables in this
    thread, turns a concrete initial value into an initializer returning it;
    Keras's own everywhere else.

    Keras's ``StatelessScope(initialize_variables=False)`` defers variables
    made from an initializer, but refuses one made from a value, such as the
    ``iterations`` counter every optimizer creates. So a builder that calls
    ``model.compile()`` (every keras-hub Task does, in ``__init__``) fails
    in that scope although Keras builds it fine. Waits for Keras to defer
    concrete values in a stateless scope.
    """
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        if not getattr(_deferring, "on", False):
            return original(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        initializer = bound.arguments.get("initializer")
        if initializer is not None and not callable(initializer) and not isinstance(
                initializer, str):
            import numpy as np
            from keras.src.backend.common.variables import standardize_dtype

            value = np.asarray(initializer)
            if bound.arguments.get("shape") is None:
                bound.arguments["shape"] = tuple(value.shape)
            if bound.arguments.get("dtype") is None:
                bound.arguments["dtype"] = standardize_dtype(value.dtype)
            bound.arguments["initializer"] = _Constant(value)
        return original(*bound.args, **bound.kwargs)

    return __init__


def _variable_class():
    from keras.src.backend.common import variables

    return variables.Variable


_constant_deferral = Swap(_variable_class, "__init__", _deferring_constants)


@contextlib.contextmanager
def deferred_variables():
    """Create variables with shape, dtype and path, but no value, even those
    created from a concrete value (an optimizer's step counter); and keep
    Keras from giving them one later (see :func:`_forgetting_deferred`)."""
    k = keras()
    previous = getattr(_deferring, "on", False)
    _deferring.on = True
    try:
        with _forgetting_deferred(), _constant_deferral.held(), \
                k.StatelessScope(initialize_variables=False):
            yield
    finally:
        _deferring.on = previous


@contextlib.contextmanager
def _forgetting_deferred():
    """Take the variables deferred inside the block off Keras's list of
    variables to initialize.

    Reason: Keras registers every variable deferred in a
    ``StatelessScope(initialize_variables=False)`` in a global list, and the
    next ``StatelessScope`` that closes at top level (``model.fit`` opens
    one) initializes every variable on it. A model shardviz built only to
    plan (a 70B decoder, say) would then be allocated whole, with random
    weights, by the user's next unrelated ``fit``: the kernel runs out of
    memory. Waits for a public way to defer variables for good.
    """
    from keras.src.backend.common import global_state

    name = "uninitialized_variables"
    before = {id(v) for v in (global_state.get_global_attribute(name) or [])}
    try:
        yield
    finally:
        now = global_state.get_global_attribute(name) or []
        global_state.set_global_attribute(name, [v for v in now if id(v) in before])


def set_random_seed(seed: int) -> None:
    """Seed Keras (its global seed, Python's and NumPy's) as
    ``keras.utils.set_random_seed`` does, without TensorFlow.

    Reason: ``keras.utils.set_random_seed`` imports TensorFlow whenever it is
    installed, only to seed it; shardviz never uses it, and the import costs
    seconds and prints TensorFlow's start-up log. Waits for a Keras seed
    function that seeds only the backend in use.
    """
    import random

    import numpy as np
    from keras.src.backend.common import global_state
    from keras.src.random import seed_generator
    from keras.src.utils import rng_utils

    global_state.set_global_attribute(rng_utils.GLOBAL_RANDOM_SEED, seed)
    global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, None)
    random.seed(seed)
    np.random.seed(seed)


def keras_train_step(model, state_shardings):
    """``model.train_step`` jitted as Keras's JAX trainer jits it for
    ``model.fit``: the state (trainable, non-trainable, optimizer and metric
    variables) donated, and, under a distribution, the new state given the
    old state's shardings (``out_shardings=(None, state_shardings)``).

    Reason: ``JAXTrainer.make_train_function`` builds exactly this, but
    reads every variable's ``.value.sharding`` (which a deferred variable
    lacks) and hides the jitted step in a private iterator closure. Waits
    for a public way to get the jitted train step for given state layouts.
    """
    import jax

    return jax.jit(model.train_step, donate_argnums=0, out_shardings=(None, state_shardings))


def keras_train_function(model):
    """The jitted ``train_step`` inside ``model.train_function``, as
    ``model.fit`` made it (for tests that compare with Keras's own program).

    Reason: ``make_train_function`` wraps the jitted step in a closure
    (``_make_function``'s ``iterator_step``) and keeps no attribute for it.
    Waits for a public accessor of the compiled step.
    """
    model.make_train_function()
    pending, seen = [model.train_function], set()
    while pending:
        fn = pending.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        if hasattr(fn, "lower"):
            return fn
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                pending.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
    raise ShardvizError("Keras's train function holds no jitted step (run_eagerly or "
                        "jit_compile=False?).")


def is_compiled(model) -> bool:
    """Whether ``model.compile()`` was called (the public ``compiled`` flag)."""
    return bool(getattr(model, "compiled", False))


def compiled_loss_name(model) -> str | None:
    """The loss the model was compiled with, by name (``"SparseCategoricalCrossentropy"``),
    or None when it was compiled with none (a model that overrides
    ``compute_loss``).

    Reason: ``model.loss`` is public but holds what the user passed, which
    may be a function, an object, a string or a structure of these.
    """
    loss = getattr(model, "loss", None)
    if loss is None:
        return None
    import jax

    names = []
    for leaf in jax.tree_util.tree_leaves(loss, is_leaf=lambda x: not isinstance(
            x, (list, tuple, dict))):
        if isinstance(leaf, str):
            names.append(leaf)
        else:
            names.append(getattr(leaf, "name", None) or getattr(leaf, "__name__", None)
                         or type(leaf).__name__)
    return ", ".join(names) if names else None


@contextlib.contextmanager
def training_state(model, optimizer, loss, deferred: bool):
    """Inside this block, ``model`` is ready for its own ``train_step``:
    compiled (with ``loss`` and ``optimizer`` when it was not), its
    ``optimizer`` the given (fresh, unbuilt) one, and everything is restored
    on exit, so the user's model keeps its own optimizer and compile state.

    Reason: ``train_step`` reads ``self.optimizer`` and the compiled loss
    and metrics; Keras has no public way to run it with another optimizer
    without re-compiling the user's model. ``compile`` does no dependency
    tracking, so restoring the instance dictionary restores the model.
    """
    saved = dict(model.__dict__)
    try:
        if not is_compiled(model):
            if deferred:
                with deferred_variables():
                    model.compile(optimizer=optimizer, loss=loss)
            else:
                model.compile(optimizer=optimizer, loss=loss)
        object.__setattr__(model, "optimizer", optimizer)
        object.__setattr__(model, "train_function", None)
        yield model
    finally:
        for key in [k for k in model.__dict__ if k not in saved]:
            object.__delattr__(model, key)
        for key, value in saved.items():
            if model.__dict__.get(key, _MISSING) is not value:
                object.__setattr__(model, key, value)


_MISSING = object()


def build_compiled_metrics(model, x, y, deferred: bool) -> None:
    """Build the compiled loss and metrics for data of this structure, as
    ``model.fit`` does before its first step (``_symbolic_build``); the
    optimizer must be built already.

    Reason: ``Trainer._symbolic_build`` is private. Waits for a public
    "build for this data" method on the trainer.
    """
    if deferred:
        with deferred_variables():
            model._symbolic_build(data_batch=(x, y))
    else:
        model._symbolic_build(data_batch=(x, y))
