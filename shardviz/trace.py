"""Trace: a jitted forward pass (or train step) of a model under a plan.

The model is never rebuilt. Its variables are handed to ``stateless_call``
already laid out by the plan: as ``jax.ShapeDtypeStruct``s carrying
shardings (abstract mode, nothing allocated), or as real sharded arrays
(concrete mode). Inputs are sharded by the plan's data layout. The pass is
traced inside the plan's distribution, so ``.../output`` rules are applied
exactly as Keras applies them (``with_sharding_constraint`` under jit).

Every layer output is watched with ``jax.debug.inspect_array_sharding``,
which reports the sharding XLA actually gives it after propagation. That is
how a constraint XLA silently dropped becomes visible. The compiled program
then gives the collectives and the memory per device.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import time

import numpy as np

from . import _keras, hlo
from ._adapters.jax import capturing_shardings, watch_sharding
from .errors import ShardvizError
from .geometry import (MeshModel, SubAxis, entry_size, geometry_of, itemsize, spec_from_hlo,
                       spec_from_sharding)
from .inputs import (call_args, check_against_model, input_arrays, model_input_specs,
                     normalize_inputs)
from .match import RuleMatcher


@dataclasses.dataclass
class Activation:
    """One layer output, in one call of the layer, as XLA lays it out inside
    the jitted pass."""

    path: str
    layer: str
    layer_class: str
    index: int
    """Which output of the layer (0 for single-output layers)."""
    shape: tuple
    dtype: str
    requested: tuple | None
    """The layout an ``/output`` rule asks for, or None."""
    rule: str | None = None
    actual: object = None
    """The sharding XLA gave it: a ``NamedSharding``, or, when XLA split it
    over part of a mesh axis, a sharding over the mesh's devices that no
    PartitionSpec can name (it still answers ``devices_indices_map``)."""
    call: int = 0
    """Which call of the layer this is (a layer reused in a model, such as a
    tied embedding, is called several times under one output path)."""
    output_index: int | None = None
    """Its position among the model's outputs, if the model returns it."""
    returned: object = None
    """For a model output: the sharding the jitted pass returns it with."""
    hlo_sharding: object = dataclasses.field(default=None, repr=False)
    """XLA's own description of ``actual`` (an HloSharding), when known."""
    mesh: MeshModel | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def label(self) -> str:
        """The path, with the call and the output index when they matter:
        ``token_embedding/output (call 1)``, ``mha/output[1]``."""
        return (self.path + (f"[{self.index}]" if self.index else "")
                + (f" (call {self.call})" if self.call else ""))

    @property
    def _mesh_sizes(self) -> dict:
        if self.mesh is not None:
            return dict(self.mesh.mesh)
        return dict(zip(self.actual.mesh.axis_names, self.actual.mesh.axis_sizes))

    @functools.cached_property
    def _decoded(self):
        """``(spec, replicated_over)`` of ``actual``, sub-axes included."""
        if self.actual is None:
            return None
        from jax.sharding import NamedSharding

        if isinstance(self.actual, NamedSharding):
            spec = spec_from_sharding(self.actual, len(self.shape))
            used = {a for e in spec for a in (e if isinstance(e, tuple) else (e,)) if a}
            return spec, tuple(a for a in self._mesh_sizes if a not in used)
        if self.hlo_sharding is None or self.mesh is None:
            return None
        mesh = self.mesh
        return spec_from_hlo(self.hlo_sharding, mesh.axis_names, mesh.shape, mesh.device_ids,
                             len(self.shape))

    @property
    def hlo(self) -> str | None:
        """XLA's HloSharding of the output, as text."""
        return None if self.hlo_sharding is None else str(self.hlo_sharding)

    @property
    def partial(self) -> bool:
        """Whether XLA split this output over part of a mesh axis, a layout
        that no PartitionSpec can name."""
        spec = self.actual_spec
        return spec is not None and any(
            isinstance(e, SubAxis) or (isinstance(e, tuple) and any(isinstance(x, SubAxis)
                                                                   for x in e))
            for e in spec)

    @property
    def actual_note(self) -> str:
        """The actual layout in words, when it splits part of an axis."""
        if self.actual is None or not self.partial:
            return ""
        spec, replicated = self._decoded
        parts = []
        for d, entry in enumerate(spec):
            for e in (entry if isinstance(entry, tuple) else (entry,)):
                if isinstance(e, SubAxis):
                    parts.append(f"dim {d} is split over {e.describe()}")
        rest = [e.describe() if isinstance(e, SubAxis) else repr(e) for e in replicated
                if isinstance(e, SubAxis)]
        text = "; ".join(parts)
        if rest:
            text += f", and replicated over the other {', '.join(r.split(' of ')[0] for r in rest)}"
        return text

    @property
    def replicated_over(self) -> tuple:
        decoded = self._decoded
        return decoded[1] if decoded else ()

    @property
    def uneven(self) -> list[tuple[int, int, object, int]]:
        """``(dim, size, axis, axis size)`` for each *requested* split that does
        not divide: eager Keras raises there, jit pads or replicates."""
        if self.requested is None or self.actual is None:
            return []
        return uneven_dims(self.shape, self.requested_spec, self._mesh_sizes)

    @property
    def uneven_actual(self) -> list[tuple[int, int, object, int]]:
        """The same for XLA's *actual* layout, whether or not a rule asked."""
        spec = self.actual_spec
        if spec is None:
            return []
        return uneven_dims(self.shape, spec, self._mesh_sizes)

    @property
    def padded(self) -> bool:
        """Whether XLA's actual layout splits some dim unevenly (padding the
        shards), whether or not a rule asked for it."""
        return bool(self.uneven_actual)

    @property
    def returned_spec(self) -> tuple | None:
        if self.returned is None:
            return None
        return spec_from_sharding(self.returned, len(self.shape))

    @property
    def actual_spec(self) -> tuple | None:
        """The actual layout as a spec; a dim split over part of an axis
        shows a :class:`~shardviz.geometry.SubAxis` such as ``'model:(1)2'``.
        None if XLA's layout is not a product of mesh (sub-)axes."""
        decoded = self._decoded
        return decoded[0] if decoded else None

    @property
    def requested_spec(self) -> tuple | None:
        if self.requested is None:
            return None
        return tuple(self.requested) + (None,) * (len(self.shape) - len(self.requested))

    @property
    def shard_shape(self) -> tuple | None:
        if self.actual is None:
            return None
        if not self.padded:
            return tuple(int(d) for d in self.actual.shard_shape(self.shape))
        # JAX refuses the shard shape of an uneven split; XLA pads each split
        # dim up to the next multiple of its axes' size.
        sizes = self._mesh_sizes
        return tuple(-(-n // entry_size(a, sizes)) for n, a in zip(self.shape, self.actual_spec))

    @property
    def bytes_per_device(self) -> int | None:
        shard = self.shard_shape
        if shard is None:
            return None
        return math.prod(shard) * itemsize(self.dtype)

    def _equivalent(self, sharding) -> bool:
        from jax.sharding import NamedSharding, PartitionSpec

        mesh = self.mesh.jax_mesh if self.mesh is not None else self.actual.mesh
        want = NamedSharding(mesh, PartitionSpec(*self.requested_spec))
        return bool(want.is_equivalent_to(sharding, len(self.shape)))

    @property
    def honored_inside(self) -> bool | None:
        """Whether XLA gave the output the requested layout inside the pass."""
        if self.requested is None or self.actual is None:
            return None
        return self._equivalent(self.actual)

    @property
    def honored(self) -> bool | None:
        """Whether XLA gave the output the requested layout, inside the pass
        and, for a model output, as returned (None: nothing was requested)."""
        inside = self.honored_inside
        if inside is None:
            return None
        return inside and (self.returned is None or self._equivalent(self.returned))


def _axes_size(entry, mesh_sizes) -> int:
    return entry_size(entry, mesh_sizes)


def uneven_dims(shape, spec, mesh_sizes) -> list[tuple[int, int, object, int]]:
    """``(dim, size, axis entry, axes size)`` for each dim of ``spec`` whose
    mesh axes do not divide it (axes missing from the mesh are ignored).

    >>> uneven_dims((6, 8), ("model", None), {"model": 4})
    [(0, 6, 'model', 4)]
    """
    out = []
    for d, (n, entry) in enumerate(zip(shape, spec)):
        names = entry if isinstance(entry, tuple) else ((entry,) if entry else ())
        if names and all(getattr(a, "axis", a) in mesh_sizes for a in names):
            k = _axes_size(entry, mesh_sizes)
            if n % k:
                out.append((d, n, entry, k))
    return out


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


class _Recorder:
    """Watches layer outputs inside the trace: one record per output of
    every call of every layer, in call order."""

    def __init__(self, key_of=None, inspect: bool = True, mesh: MeshModel | None = None,
                 model=None):
        self.model = model
        self.inspect = inspect
        """False to only apply the layouts (the activations come from the
        forward pass; the train step need not watch them again)."""
        self.key_of = key_of or {}
        """id of a LayoutMap layout to its key: which rule Keras applied."""
        self.mesh = mesh
        self.records: dict[tuple[str, int, int], Activation] = {}
        self.order: list[tuple[str, int, int]] = []
        self.calls: dict[str, int] = {}
        self.last_layer = None
        self.by_tracer: dict[int, tuple[str, int, int]] = {}

    def on_output(self, path, layer, outputs, layout, apply, error):
        import jax

        name = getattr(layer, "name", path)
        if error is not None:
            raise ShardvizError(
                f"Layer {name!r}: its output path {path!r} matches several rules, so Keras "
                f"raises: {error}",
                hint=f"Make the /output keys more specific, or add the exact key {path!r}.",
                path=path, layer=name,
            )
        out = apply(outputs) if apply is not None else outputs
        self.last_layer = name
        if not self.inspect:
            return out
        call = self.calls.get(path, 0)
        self.calls[path] = call + 1
        leaves = jax.tree_util.tree_leaves(out)
        for i, leaf in enumerate(leaves):
            if not hasattr(leaf, "shape"):
                continue
            key = (path, call, i)
            rec = Activation(
                path=path, layer=name, layer_class=type(layer).__name__, index=i, call=call,
                shape=tuple(int(d) for d in leaf.shape), dtype=str(leaf.dtype),
                requested=tuple(layout.axes) if layout is not None else None,
                rule=self.key_of.get(id(layout)) if layout is not None else None,
                mesh=self.mesh,
            )
            self.records[key] = rec
            self.order.append(key)
            self.by_tracer[id(leaf)] = key
            watch_sharding(leaf, functools.partial(self._seen, key))
        return out

    def _seen(self, key, sharding, hlo_sharding):
        record = self.records[key]
        record.actual, record.hlo_sharding = sharding, hlo_sharding

    def mark_outputs(self, outputs):
        """Remember which records the model returns, by tracer identity."""
        import jax

        for i, leaf in enumerate(jax.tree_util.tree_leaves(outputs)):
            key = self.by_tracer.get(id(leaf))
            if key is not None and self.records[key].output_index is None:
                self.records[key].output_index = i

    def set_returned(self, output_shardings):
        import jax

        shardings = jax.tree_util.tree_leaves(output_shardings)
        for rec in self.records.values():
            if rec.output_index is not None and rec.output_index < len(shardings):
                rec.returned = shardings[rec.output_index]

    def activations(self) -> list[Activation]:
        return [self.records[k] for k in self.order]


def _initial_value(variable, sharding):
    """A variable's value placed by ``sharding``: its own value if it has one,
    else its initializer run under jit straight into the shards."""
    import jax

    if getattr(variable, "_value", None) is not None:
        return jax.device_put(variable.value, sharding)
    initializer = variable._initializer
    shape, dtype = tuple(variable.shape), variable.dtype
    return jax.jit(lambda: initializer(shape, dtype=dtype), out_shardings=sharding)()


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


def _data_shardings(dist, mesh: MeshModel, specs, model_name):
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
                f"Input {i} of model {model_name!r} has batch size {spec.shape[0]}, which the "
                f"batch axis {batch!r} of size {size} does not divide; Keras shards inputs on "
                "their first dimension.",
                hint=f"Use a batch that is a multiple of {size} (e.g. {good}), or make the "
                "batch axis smaller.",
            )
        axes = tuple(dist.get_data_layout(spec.shape).axes)
        placed.append(jax.ShapeDtypeStruct(spec.shape, spec.dtype,
                                           sharding=NamedSharding(mesh.jax_mesh, PartitionSpec(*axes))))
    return jax.tree_util.tree_unflatten(treedef, placed)


def _model_variables(model):
    seen, out = set(), []
    for v in model.variables:
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


def _optimizer_layouts(optimizer, model, plan, mesh, sharding_of):
    """Build the optimizer on the model's (deferred) variables and give each
    slot the layout Keras would: its reference variable's, else the rules'."""
    references = {}
    original = optimizer.add_variable_from_reference

    def add_variable_from_reference(reference_variable, *args, **kwargs):
        variable = original(reference_variable, *args, **kwargs)
        references[id(variable)] = reference_variable
        return variable

    optimizer.add_variable_from_reference = add_variable_from_reference
    try:
        with _keras.deferred_variables():
            optimizer.build(model.trainable_variables)
    finally:
        del optimizer.add_variable_from_reference
    rest = [v for v in optimizer.variables if id(v) not in references]
    matches = RuleMatcher([v.path for v in rest]).match(plan.rule_keys)
    by_rule = {id(v): m for v, m in zip(rest, matches)}
    shardings, records = [], []
    for v in optimizer.variables:
        ref = references.get(id(v))
        shape, dtype = tuple(int(d) for d in v.shape), str(v.dtype)
        if ref is not None:
            sharding = sharding_of[id(ref)]
            spec = spec_from_sharding(sharding, len(shape))
        else:
            m = by_rule[id(v)]
            axes = plan.rules[m.rule].axes if m.rule is not None else ()
            try:
                g = geometry_of(mesh, shape, dtype, tuple(axes))
            except Exception:
                g = geometry_of(mesh, shape, dtype, ())
            sharding, spec = g.sharding, g.spec
        shard = tuple(int(d) for d in sharding.shard_shape(shape))
        import jax.numpy as jnp

        records.append(OptimizerVariable(
            path=v.path, reference=ref.path if ref is not None else None, shape=shape,
            dtype=dtype, spec=spec, shard_shape=shard,
            bytes_per_device=math.prod(shard) * jnp.dtype(dtype).itemsize,
        ))
        shardings.append(sharding)
    return shardings, records


def trace(scan, plan, mesh: MeshModel, variable_layouts, inputs, *, mode: str | None = None,
          train_step: bool = False, optimizer=None, seed: int = 0, progress=None) -> Trace:
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
    name = getattr(model, "name", type(model).__name__)
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
    dist = plan.to_keras()
    model_specs = model_input_specs(model)
    specs, concrete_inputs = normalize_inputs(inputs, model_specs)
    check_against_model(specs, model_specs, name)
    if mode is None:
        mode = "concrete" if concrete_inputs and not scan.built_by_shardviz else "abstract"
    if mode not in ("abstract", "concrete"):
        raise ShardvizError(f"mode must be 'abstract' or 'concrete', got {mode!r}.")
    input_specs = _data_shardings(dist, mesh, specs, name)

    variables = _model_variables(model)
    sharding_of = {id(v): vl.geometry.sharding for v, vl in zip(variables, variable_layouts)}
    trainable = list(model.trainable_variables)
    non_trainable = list(model.non_trainable_variables)

    def placed(vs):
        if mode == "abstract":
            return [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype, sharding=sharding_of[id(v)])
                    for v in vs]
        return [_initial_value(v, sharding_of[id(v)]) for v in vs]

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

    recorder = _Recorder(_keras.layout_keys(dist), mesh=mesh, model=model)

    def forward(tv, ntv, x):
        with _keras.deferred_variables(), _keras.observing_outputs(recorder.on_output, base=dist):
            outputs, _ = model.stateless_call(tv, ntv, *call_args(model, x))
        recorder.mark_outputs(outputs)
        return outputs

    compiled = _compile(forward, (tv, ntv, x), name, recorder, seconds, "forward", progress)
    recorder.set_returned(compiled.output_shardings)
    activations = recorder.activations()
    layer_paths = [o.layer_path for o in scan.outputs] or [a.path[: -len("/output")]
                                                            for a in activations]
    forward_collectives = _collectives(compiled, mesh, layer_paths)
    result = Trace(
        mode=mode, train_step=train_step, activations=activations,
        collectives=forward_collectives, memory=hlo.memory(compiled),
        input_specs=input_specs, hlo_text=compiled.as_text(), compiled=compiled,
        seconds=seconds,
    )
    if mode == "concrete":
        progress("running")
        t = time.perf_counter()
        result.outputs = jax.block_until_ready(compiled(tv, ntv, x))
        seconds["run"] = time.perf_counter() - t
        result.variables = {v.path: value for v, value in zip(trainable + non_trainable, tv + ntv)}

    if train_step:
        progress("train step")
        _add_train_step(result, model, plan, mesh, dist, sharding_of, tv, ntv, x, optimizer,
                        name, seconds)
    progress("done")
    return result


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


def _collectives(compiled, mesh, layer_paths):
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


def _compile(fn, args, name, recorder, seconds, what, progress=None):
    import jax

    progress = progress or (lambda stage: None)
    t = time.perf_counter()
    try:
        progress("tracing")
        with _keras.full_tracebacks():
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
        raised = _keras.raising_layer(e)
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


def _fresh_optimizer(optimizer):
    """An unbuilt copy of ``optimizer``: shardviz builds it on the model's
    deferred variables, and must neither add slots to the user's optimizer
    nor build one twice (a compiled model's optimizer may be built)."""
    with _keras.deferred_variables():
        return type(optimizer).from_config(optimizer.get_config())


def _add_train_step(result, model, plan, mesh, dist, sharding_of, tv, ntv, x, optimizer, name,
                    seconds):
    import jax
    import jax.numpy as jnp

    keras = _keras.keras()
    optimizer = _fresh_optimizer(optimizer or getattr(model, "optimizer", None)
                                 or keras.optimizers.Adam())
    opt_shardings, records = _optimizer_layouts(optimizer, model, plan, mesh, sharding_of)
    if result.mode == "abstract":
        ov = [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype, sharding=s)
              for v, s in zip(optimizer.variables, opt_shardings)]
    else:
        ov = [_initial_value(v, s) for v, s in zip(optimizer.variables, opt_shardings)]
    recorder = _Recorder(_keras.layout_keys(dist), inspect=False, model=model)

    def step(tv, ntv, ov, x):
        def loss_fn(tv):
            with _keras.observing_outputs(recorder.on_output, base=dist):
                y, new_ntv = model.stateless_call(tv, ntv, *call_args(model, x), training=True)
            leaves = jax.tree_util.tree_leaves(y)
            loss = sum(jnp.mean(jnp.square(leaf.astype("float32"))) for leaf in leaves)
            return loss, new_ntv

        with _keras.deferred_variables():
            (loss, new_ntv), grads = jax.value_and_grad(loss_fn, has_aux=True)(tv)
            new_tv, new_ov = optimizer.stateless_apply(ov, grads, tv)
        return loss, new_tv, new_ntv, new_ov

    compiled = _compile(step, (tv, ntv, ov, x), name, recorder, seconds, "train_step")
    layer_paths = [a.path[: -len("/output")] for a in result.activations]
    collectives = _collectives(compiled, mesh, layer_paths)
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
    if result.mode == "concrete":
        t = time.perf_counter()
        jax.block_until_ready(compiled(tv, ntv, ov, x))
        seconds["train_step_run"] = time.perf_counter() - t
