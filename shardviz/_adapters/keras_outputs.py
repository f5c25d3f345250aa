"""Watching a Keras model run: every layer output Keras would constrain, and
the layer that raised an error.

``observing_outputs`` answers every ``<layer path>/output`` lookup with a
probe and hands the outputs to a callback; ``full_tracebacks`` and
``raising_layer`` find the layer whose call failed. Each function that
reaches a private API says why, and which public API would replace it.
"""

from __future__ import annotations

import contextlib

from . import Swap
from .keras_base import current_layer, is_conflict, keras, placeholder_mesh


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
