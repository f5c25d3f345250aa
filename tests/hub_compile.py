"""A keras-hub backbone's forward pass compiled outside shardviz: built
under Keras's own ModelParallel with a layout map, jitted as a stateless
call, and measured from the compiled program itself. The truth the
backbone tests compare layout maps with."""

import re

import jax
import keras
import numpy as np

COLLECTIVE = re.compile(
    r"=\s*(?P<result>\([^=]*?\)|\S+)\s+(?P<op>all-reduce|all-gather|reduce-scatter|all-to-all|"
    r"collective-permute)(?:-start)?\((?P<operands>[^)]*)\)")
SHAPE = re.compile(r"\b(pred|[a-z]+\d+)\[([\d,]*)\]")
ITEMSIZE = {"pred": 1}


def shape_bytes(text: str) -> int:
    total = 0
    for dtype, dims in SHAPE.findall(text):
        size = ITEMSIZE.get(dtype) or max(1, int(re.sub(r"\D", "", dtype) or 8) // 8)
        total += size * int(np.prod([int(d) for d in dims.split(",") if d] or [1]))
    return total


def collective_bytes(hlo: str) -> int:
    """Per device: for each collective, the larger of its result and operands."""
    return sum(max(shape_bytes(m["result"]), shape_bytes(m["operands"]))
               for m in COLLECTIVE.finditer(hlo))


def inputs_for(model, batch: int, seq: int, fixed: dict | None = None):
    """Ones for every input (valid token ids and padding masks), the open
    dims after the batch set to ``seq``, or to the length in ``fixed`` of
    an input the model fixes (Whisper's audio frames)."""
    fixed = fixed or {}

    def one(t, name=None):
        dims = list(t.shape[1:])
        if name in fixed:
            dims[0] = fixed[name]
        shape = (batch,) + tuple(seq if d is None else d for d in dims)
        return np.ones(shape, dtype=str(t.dtype))
    given = model.input
    if isinstance(given, dict):
        return {k: one(t, k) for k, t in given.items()}
    if isinstance(given, (list, tuple)):
        return [one(t, getattr(t, "name", None)) for t in given]
    return one(given, getattr(given, "name", None))


def build_and_compile(build, layout_map, batch: int = 8, seq: int = 32, fixed=None):
    """``(model, bytes per device, collective bytes per device)`` of the
    forward pass under ``ModelParallel(layout_map)``; raises what Keras
    raises when the map does not build."""
    # A fresh session, as a new process builds: unnamed layers (MiT's, ViTDet's) are named
    # from a process-wide counter, and the map was made from a build in a fresh one.
    keras.backend.clear_session()
    dist = keras.distribution.ModelParallel(
        layout_map=layout_map, batch_dim_name=layout_map.device_mesh.axis_names[0])
    with dist.scope():
        model = build()
        x = inputs_for(model, batch, seq, fixed)
        x = jax.tree.map(lambda a: jax.device_put(
            a, dist.get_data_layout(a.shape).backend_layout), x)
        trainable = [v.value for v in model.trainable_variables]
        other = [v.value for v in model.non_trainable_variables]
        fn = jax.jit(lambda t, o, data: model.stateless_call(t, o, data)[0])
        compiled = fn.lower(trainable, other, x).compile()
    stats = compiled.memory_analysis()
    memory = (stats.argument_size_in_bytes + stats.output_size_in_bytes
              + stats.temp_size_in_bytes - stats.alias_size_in_bytes)
    return model, int(memory), collective_bytes(compiled.as_text())
