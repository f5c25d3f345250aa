"""Compiling a traced pass: the program, its collectives, and a failure
that names the layer that raised."""

from __future__ import annotations

import dataclasses
import re
import time

from .._adapters import keras as keras_adapter
from .._adapters.jax import capturing_shardings
from ..errors import ShardvizError
from . import hlo

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _short_message(e: Exception) -> str:
    """The gist of an exception, without terminal colour codes: Keras wraps
    layer errors as "Exception encountered when calling X.call(). <message>
    Arguments received ..."."""
    lines = [line.strip() for line in _ANSI.sub("", str(e)).splitlines() if line.strip()]
    kept = []
    for line in lines:
        if line.startswith("Arguments received"):
            break
        kept.append(line)
        if len(kept) == 2:
            break
    return " ".join(kept)[:500]


def collectives_of(compiled, mesh, layer_paths):
    """The compiled program's collectives, each attributed to Keras layers."""
    out = []
    for c in hlo.collectives(compiled.as_text(), mesh.axis_names, mesh.shape):
        layers = []
        for scope in c.scopes:
            layer = hlo.layer_for_scope(scope, layer_paths) or scope
            if layer not in layers:
                layers.append(layer)
        out.append(dataclasses.replace(c, layer=", ".join(layers)))
    return out


def compile_pass(fn, args, name, recorder, seconds, what, progress=None):
    import jax

    progress = progress or (lambda stage: None)
    t = time.perf_counter()
    try:
        progress("tracing")
        with keras_adapter.full_tracebacks():
            lowered = jax.jit(fn).lower(*args)
        seconds[f"{what}_trace"] = time.perf_counter() - t
        t = time.perf_counter()
        progress("compiling")
        with capturing_shardings():
            compiled = lowered.compile()
        seconds[f"{what}_compile"] = time.perf_counter() - t
    except ShardvizError:
        raise
    except Exception as e:
        raised = keras_adapter.raising_layer(e)
        if raised is not None and raised is not recorder.model:
            layer = raised.name
            where = f" in layer {layer!r} ({type(raised).__name__})"
        else:
            layer = recorder.last_layer
            where = f" after layer {layer!r}" if layer else ""
        first = _short_message(e)
        raise ShardvizError(
            f"The {what} pass of model {name!r} failed{where}: {type(e).__name__}: {first}",
            hint="Check the input shapes and dtypes against the model, and the /output rules "
            "of the layer named in the message.",
            layer=layer,
        ) from e
    return compiled
