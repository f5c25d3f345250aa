"""Deferred Keras variables: shape, dtype and path, but no value, even for
those made from a concrete value, and never given one later behind
shardviz's back.

Each function that reaches a private API says why, and which public API
would replace it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading

from . import Swap
from .keras_base import keras

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
