"""The train step: forward, backward and the optimizer update, compiled on
the plan's mesh, with the layout Keras gives every optimizer slot."""

from __future__ import annotations

import dataclasses
import math
import time

from .._adapters import keras as keras_adapter
from ..errors import Problem
from ..geometry import GeometryError, geometry_of, itemsize, spec_from_sharding
from ..inputs import call_args
from ..match import RuleMatcher
from . import hlo
from .activations import Recorder
from .compile import collectives_of, compile_pass, reshard_problems
from .cost import priced


@dataclasses.dataclass
class OptimizerVariable:
    """An optimizer slot and the layout Keras gives it."""

    path: str
    reference: str | None
    """The model variable it mirrors (its layout is taken from it), or None."""
    shape: tuple
    dtype: str
    spec: tuple
    shard_shape: tuple
    bytes_per_device: int


def _optimizer_layouts(optimizer, model, plan, mesh, sharding_of):
    """Build the optimizer on the model's (deferred) variables and give each
    slot the layout Keras would: its reference variable's, else the rules'."""
    with keras_adapter.slot_references(optimizer) as references, \
            keras_adapter.deferred_variables():
        optimizer.build(model.trainable_variables)
    rest = [v for v in optimizer.variables if id(v) not in references]
    matches = RuleMatcher([v.path for v in rest]).match(plan.rule_keys)
    by_rule = {id(v): m for v, m in zip(rest, matches)}
    shardings, records, problems = [], [], []
    for v in optimizer.variables:
        ref = references.get(id(v))
        shape, dtype = tuple(int(d) for d in v.shape), str(v.dtype)
        if ref is not None:
            sharding = sharding_of[ref.path]
            spec = spec_from_sharding(sharding, len(shape))
        else:
            m = by_rule[id(v)]
            axes = plan.rules[m.rule].axes if m.rule is not None else ()
            try:
                g = geometry_of(mesh, shape, dtype, tuple(axes))
            except GeometryError as e:
                rule = plan.rules[m.rule].key
                problems.append(Problem(
                    "error", e.kind,
                    f"Optimizer slot {v.path!r} {shape}: rule {rule!r} gives it {tuple(axes)}, "
                    f"which Keras refuses ({e.message}). shardviz counted it replicated.",
                    hint=e.hint or "Make the rule's axes fit the slot, or add a more specific "
                    "rule for it.", path=v.path, rule=rule))
                g = geometry_of(mesh, shape, dtype, ())
            sharding, spec = g.sharding, g.spec
        shard = tuple(int(d) for d in sharding.shard_shape(shape))
        records.append(OptimizerVariable(
            path=v.path, reference=ref.path if ref is not None else None, shape=shape,
            dtype=dtype, spec=spec, shard_shape=shard,
            bytes_per_device=math.prod(shard) * itemsize(dtype),
        ))
        shardings.append(sharding)
    return shardings, records, problems


def _fresh_optimizer(optimizer):
    """An unbuilt copy of ``optimizer``: shardviz builds it on the model's
    deferred variables, and must neither add slots to the user's optimizer
    nor build one twice (a compiled model's optimizer may be built)."""
    with keras_adapter.deferred_variables():
        return type(optimizer).from_config(optimizer.get_config())


def add_train_step(result, model, plan, mesh, dist, sharding_of, tv, ntv, x, optimizer, name,
                    seconds):
    import jax
    import jax.numpy as jnp

    keras = keras_adapter.keras()
    optimizer = _fresh_optimizer(optimizer or getattr(model, "optimizer", None)
                                 or keras.optimizers.Adam())
    opt_shardings, records, problems = _optimizer_layouts(optimizer, model, plan, mesh, sharding_of)
    if result.mode == "abstract":
        ov = [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype, sharding=s)
              for v, s in zip(optimizer.variables, opt_shardings)]
    else:
        ov = [keras_adapter.initial_value(v, s) for v, s in zip(optimizer.variables, opt_shardings)]
    recorder = Recorder(keras_adapter.layout_keys(dist), inspect=False, model=model)

    def step(tv, ntv, ov, x):
        def loss_fn(tv):
            with keras_adapter.observing_outputs(recorder.on_output, base=dist):
                y, new_ntv = model.stateless_call(tv, ntv, *call_args(model, x), training=True)
            leaves = jax.tree_util.tree_leaves(y)
            loss = sum(jnp.mean(jnp.square(leaf.astype("float32"))) for leaf in leaves)
            return loss, new_ntv

        with keras_adapter.deferred_variables():
            (loss, new_ntv), grads = jax.value_and_grad(loss_fn, has_aux=True)(tv)
            new_tv, new_ov = optimizer.stateless_apply(ov, grads, tv)
        return loss, new_tv, new_ntv, new_ov

    xla_warnings: list = []
    compiled = compile_pass(step, (tv, ntv, ov, x), name, recorder, seconds, "train_step",
                            log=xla_warnings)
    layer_paths = [a.layer_path for a in result.activations]
    from .forward import parameter_paths

    parameters = parameter_paths(model.trainable_variables, model.non_trainable_variables,
                                 optimizer.variables)
    collectives = priced(collectives_of(compiled, mesh, layer_paths, parameters), mesh)
    prefix = optimizer.name
    result.forward_collectives = result.collectives
    result.collectives = [
        dataclasses.replace(c, pass_="update")
        if any(s.split("/")[0] == prefix for s in c.scopes) else c
        for c in collectives
    ]
    result.memory = hlo.memory(compiled)
    result.hlo_text = compiled.as_text()
    result.compiled = compiled
    result.optimizer_variables = records
    result.problems += problems
    seen = {(p.layer, p.message.split(" efficiently")[0]) for p in result.problems
            if p.kind == "xla-resharding"}
    result.problems += [p for p in reshard_problems(compiled, xla_warnings, layer_paths, plan,
                                                    "train step", result.activations)
                        if (p.layer, p.message.split(" efficiently")[0]) not in seen]
    if result.mode == "concrete":
        t = time.perf_counter()
        jax.block_until_ready(compiled(tv, ntv, ov, x))
        seconds["train_step_run"] = time.perf_counter() - t
