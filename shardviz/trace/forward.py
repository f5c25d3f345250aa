"""The forward pass: a jitted ``stateless_call`` of the model under a plan.

The model is never rebuilt. Its variables are handed to ``stateless_call``
already laid out by the plan: as ``jax.ShapeDtypeStruct``s carrying
shardings (abstract mode, nothing allocated), or as real sharded arrays
(concrete mode). Inputs are sharded by the plan's data layout. The pass is
traced inside the plan's distribution, so ``.../output`` rules are applied
exactly as Keras applies them (``with_sharding_constraint`` under jit).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from .._adapters import keras as keras_adapter
from ..errors import OutOfMemory, Problem, ShardvizError
from ..layout.geometry import MeshModel
from ..model.inputs import (
    call_args,
    check_against_model,
    input_arrays,
    input_names,
    model_input_specs,
    normalize_inputs,
)
from . import hlo
from .activations import Activation, Recorder
from .compile import collectives_of, compile_pass, reshard_problems
from .cost import priced
from .peak import NO_DUMP, PeakSource, model_output
from .train_step import OptimizerVariable, StepSetup, add_train_step


@dataclasses.dataclass
class Trace:
    """What one jitted pass shows: activations, collectives, memory."""

    mode: str
    """``"abstract"`` (ShapeDtypeStructs only) or ``"concrete"`` (executed)."""
    train_step: bool
    activations: list[Activation]
    collectives: list[hlo.Collective]
    memory: dict
    input_specs: object
    hlo_text: str
    compiled: object = dataclasses.field(repr=False)
    seconds: dict = dataclasses.field(default_factory=dict)
    outputs: object = None
    """Concrete mode: the model's sharded outputs (jax.Arrays)."""
    variables: dict | None = None
    """Concrete mode: variable path to its sharded value (jax.Array)."""
    optimizer_variables: list[OptimizerVariable] = dataclasses.field(default_factory=list)
    forward_collectives: list[hlo.Collective] | None = None
    problems: list[Problem] = dataclasses.field(default_factory=list)
    """What the pass found that Keras would refuse (an optimizer slot a rule
    cannot lay out)."""
    step_setup: StepSetup | None = None
    """With a train step: its loss, optimizer and labels, as ``model.fit``
    would run it."""
    attention: list = dataclasses.field(default_factory=list)
    """Each call of ``keras.ops.dot_product_attention`` the compiled program
    traced, and whether Keras ran its kernel for it
    (:class:`~shardviz._adapters.keras.AttentionCall`)."""
    peak_source: PeakSource | None = None
    """The compiler's buffer assignment of the pass and what reads it by role
    (:mod:`~shardviz.trace.peak`)."""
    grouped_convolutions: list[str] = dataclasses.field(default_factory=list)
    """With a train step: the layer paths of the grouped convolutions in its
    compiled program (:func:`~shardviz.trace.scopes.grouped_convolution_layers`),
    layers and ops called inside custom layers alike."""


def _sample_input(spec, seed: int):
    import jax

    rng = np.random.default_rng(seed)
    if np.issubdtype(np.dtype(spec.dtype), np.integer):
        value = np.zeros(spec.shape, spec.dtype)
    elif np.dtype(spec.dtype) == np.bool_:
        value = np.zeros(spec.shape, bool)
    else:
        value = rng.standard_normal(spec.shape).astype(spec.dtype)
    return jax.device_put(value, spec.sharding)


def _data_shardings(dist, mesh: MeshModel, specs, model_name, what: str = "Input"):
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    batch = dist.batch_dim_name
    size = mesh.axis_size(batch)
    leaves, treedef = jax.tree_util.tree_flatten(specs)
    placed = []
    for i, spec in enumerate(leaves):
        if len(spec.shape) == 0:
            placed.append(jax.ShapeDtypeStruct(spec.shape, spec.dtype,
                                               sharding=NamedSharding(mesh.jax_mesh, PartitionSpec())))
            continue
        if spec.shape[0] % size:
            good = max(size, (spec.shape[0] // size) * size)
            raise ShardvizError(
                f"{what} {i} of model {model_name!r} has batch size {spec.shape[0]}, which the "
                f"batch axis {batch!r} of size {size} does not divide; Keras shards inputs on "
                "their first dimension.",
                hint=f"Use a batch that is a multiple of {size} (e.g. {good}), or make the "
                "batch axis smaller.",
            )
        axes = tuple(dist.get_data_layout(spec.shape).axes)
        placed.append(jax.ShapeDtypeStruct(spec.shape, spec.dtype,
                                           sharding=NamedSharding(mesh.jax_mesh, PartitionSpec(*axes))))
    return jax.tree_util.tree_unflatten(treedef, placed)


def parameter_paths(trainable, non_trainable, optimizer_variables=()) -> dict[str, str]:
    """The names JAX gives the jitted pass's arguments (``tv[0]``, from the
    argument names of ``forward`` and ``step``), to variable paths."""
    out = {f"tv[{i}]": v.path for i, v in enumerate(trainable)}
    out.update({f"ntv[{i}]": v.path for i, v in enumerate(non_trainable)})
    out.update({f"ov[{i}]": v.path for i, v in enumerate(optimizer_variables)})
    return out


def trace(scan, plan, mesh: MeshModel, variable_layouts, inputs, *, mode: str | None = None,
          train_step: bool = False, optimizer=None, labels=None, seed: int = 0,
          progress=None) -> Trace:
    """Trace, compile and (in concrete mode) run the model under ``plan``.

    ``progress(stage)``, if given, is called as each stage starts:
    ``"placing"``, ``"tracing"``, ``"compiling"``, ``"running"``,
    ``"train step"`` and finally ``"done"``.

    Raises:
        ShardvizError: for too few devices, inputs that do not fit the model
            or the batch axis, or a forward pass that fails (naming the layer).
    """
    import jax

    model = scan.model
    name = scan.model_name
    if mesh.abstract and jax.device_count() >= plan.mesh_size:
        raise ShardvizError(
            f"The mesh {plan.mesh_dict} was made abstract (abstract_mesh=True), and nothing "
            "compiles on an abstract mesh, so the forward pass was not run.",
            hint="Leave abstract_mesh unset (or False) to run the forward pass on the "
            f"{jax.device_count()} devices here.",
        )
    if mesh.abstract:
        raise ShardvizError(
            f"The plan's mesh {plan.mesh_dict} needs {plan.mesh_size} devices, but only "
            f"{jax.device_count()} exist, so the forward pass cannot be compiled here.",
            hint=f"Restart the kernel and call shardviz.simulate_devices({plan.mesh_size}) "
            "before any JAX operation, or shrink the mesh. The variable layouts above are "
            "still exact.",
        )
    dist = plan.to_keras(devices=mesh.device_list)
    model_specs = model_input_specs(model)
    names = input_names(model)
    specs, concrete_inputs = normalize_inputs(inputs, model_specs, names=names)
    check_against_model(specs, model_specs, name, names)
    runs_here = mesh.target.can_execute
    if mode is None:
        mode = ("concrete" if concrete_inputs and not scan.built_by_shardviz and runs_here
                else "abstract")
    if mode not in ("abstract", "concrete"):
        raise ShardvizError(f"mode must be 'abstract' or 'concrete', got {mode!r}.")
    if mode == "concrete" and not runs_here:
        raise ShardvizError(
            f"The target {mesh.target.label} is compiled for, not run: there is no TPU here, "
            "so mode='concrete' cannot execute on it.",
            hint="Leave mode unset (abstract), or drop target= to run on the simulated CPUs.")
    input_specs = _data_shardings(dist, mesh, specs, name)

    # Keyed by path, as Keras's LayoutMap is: the layout of a variable is
    # the one its path gets.
    sharding_of = {vl.info.path: vl.geometry.sharding for vl in variable_layouts}
    trainable = list(model.trainable_variables)
    non_trainable = list(model.non_trainable_variables)

    made_late = [v.path for v in trainable + non_trainable if v.path not in sharding_of]
    if made_late:
        raise ShardvizError(
            f"Model {name!r} has the variable {made_late[0]!r}, which it did not have when "
            "shardviz read its variables: a layer made it on its first call (a model marked "
            "built by model.build() whose layers have no build() of their own does this).",
            hint="Call the model once on data (model(x)) before handing it over, or pass a "
            "builder that does; a subclassed layer should make its variables in build().",
            path=made_late[0])

    def placed(vs):
        if mode == "abstract":
            return [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype, sharding=sharding_of[v.path])
                    for v in vs]
        return [keras_adapter.initial_value(v, sharding_of[v.path]) for v in vs]

    progress = progress or (lambda stage: None)
    seconds = {}
    progress("placing")
    t = time.perf_counter()
    tv, ntv = placed(trainable), placed(non_trainable)
    if mode == "concrete":
        if concrete_inputs:
            arrays = input_arrays(inputs)
            x = jax.tree_util.tree_map(lambda a, s: jax.device_put(a, s.sharding), arrays,
                                       input_specs)
        else:
            leaves, treedef = jax.tree_util.tree_flatten(input_specs)
            x = jax.tree_util.tree_unflatten(
                treedef, [_sample_input(s, seed + i) for i, s in enumerate(leaves)])
    else:
        x = input_specs
    seconds["place"] = time.perf_counter() - t

    recorder = Recorder(keras_adapter.layout_keys(dist), mesh=mesh, model=model)

    def forward(tv, ntv, x):
        with keras_adapter.deferred_variables(), keras_adapter.observing_outputs(
                recorder.on_output, base=dist):
            outputs, _ = model.stateless_call(tv, ntv, *call_args(model, x))
        recorder.mark_outputs(outputs)
        return outputs

    if train_step and mode == "abstract":
        # One program, the one model.fit runs: its forward part gives the
        # activations and the forward collectives. The forward pass alone
        # is not compiled (it would cost a second compile).
        result = Trace(mode=mode, train_step=True, activations=[], collectives=[], memory={},
                       input_specs=input_specs, hlo_text="", compiled=None, seconds=seconds)
        progress("train step")
        add_train_step(result, scan, plan, mesh, dist, sharding_of, tv, ntv, x, labels,
                       optimizer, name, seconds,
                       lambda specs, what: _data_shardings(dist, mesh, specs, name, what),
                       recorder=recorder, forward=forward)
        progress("done")
        return result

    xla_warnings: list = []
    attention: list = []
    peak: list = []
    arguments = parameter_paths(trainable, non_trainable)
    try:
        compiled = compile_pass(forward, (tv, ntv, x), name, recorder, seconds, "forward",
                                progress, log=xla_warnings, devices=mesh.device_list,
                                attention=attention, peak=peak)
    except OutOfMemory as e:
        e.peak_source = PeakSource(peak[0] if peak else NO_DUMP, arguments,
                                   [o.layer_path for o in scan.outputs], (None, []))
        raise
    recorder.set_returned(compiled.output_shardings)
    activations = recorder.activations()
    layer_paths = [o.layer_path for o in scan.outputs] or [a.layer_path for a in activations]
    forward_collectives = priced(collectives_of(
        compiled, mesh, layer_paths, parameter_paths(trainable, non_trainable)), mesh)
    result = Trace(
        mode=mode, train_step=train_step, activations=activations,
        collectives=forward_collectives, memory=hlo.memory(compiled, (tv, ntv, x)),
        input_specs=input_specs, hlo_text=compiled.as_text(), compiled=compiled,
        seconds=seconds, attention=attention,
        peak_source=PeakSource(peak[0] if peak else NO_DUMP, arguments, layer_paths,
                               model_output(activations)),
    )
    result.problems += reshard_problems(compiled, xla_warnings, layer_paths, plan,
                                        activations=activations)
    if mode == "concrete":
        progress("running")
        t = time.perf_counter()
        result.outputs = jax.block_until_ready(compiled(tv, ntv, x))
        seconds["run"] = time.perf_counter() - t
        result.variables = {v.path: value for v, value in zip(trainable + non_trainable, tv + ntv)}

    if train_step:
        progress("train step")
        def data_shardings(specs, what):
            placed_specs = _data_shardings(dist, mesh, specs, name, what)
            if mode == "abstract":
                return placed_specs
            given = input_arrays(labels) if labels is not None and all(
                hasattr(a, "__array__") for a in jax.tree_util.tree_leaves(labels)) else None
            if given is None:
                return jax.tree_util.tree_map(
                    lambda s: jax.device_put(np.zeros(s.shape, s.dtype), s.sharding), placed_specs)
            return jax.tree_util.tree_map(lambda a, s: jax.device_put(a, s.sharding), given,
                                          placed_specs)

        add_train_step(result, scan, plan, mesh, dist, sharding_of, tv, ntv, x, labels,
                       optimizer, name, seconds, data_shardings)
    progress("done")
    return result
