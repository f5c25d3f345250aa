"""The train step ``model.fit`` runs: the model's own ``train_step`` (its
compiled loss, metrics and optimizer, or a user's override), jitted as
Keras's JAX trainer jits it (the state donated, the new state given the old
state's layouts), compiled on the plan's mesh.

The state is laid out as Keras lays it out under the plan's distribution:
model variables by the plan, each optimizer slot like the variable it
mirrors, and the other slots and metric variables by the rules (or
replicated). The data is ``(x, y)`` as ``fit`` passes it, split on the batch
axis. A model that was never compiled is compiled for the step with
:data:`DEFAULT_LOSS`, and the report says so.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time

from .._adapters import keras as keras_adapter
from ..errors import OutOfMemory, Problem, ShardvizError
from ..layout.geometry import GeometryError, geometry_of, itemsize, spec_from_sharding
from ..matching.match import RuleMatcher
from ..model.inputs import normalize_inputs
from . import hlo
from .activations import Recorder
from .compile import collectives_of, compile_pass, reshard_problems, short_message
from .cost import priced
from .peak import NO_DUMP, PeakSource, model_output
from .scopes import grouped_convolution_layers

DEFAULT_LOSS = "mean_squared_error"
"""The loss a model that was never compiled is trained with, against labels
of its outputs' shapes when none are given."""


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


@dataclasses.dataclass(frozen=True)
class StepSetup:
    """How the train step was set up: what ``model.fit`` would use."""

    loss: str | None
    """The loss by name (None: the model computes its own)."""
    default_loss: bool
    """True when the model was not compiled and shardviz chose the loss."""
    optimizer: str
    """The optimizer's class name."""
    labels: str
    """``"given"``, or how shardviz made them (``"zeros of the outputs' shapes"``)."""
    donated: bool = True
    """The state is donated, as Keras's trainer donates it."""

    def describe(self) -> str:
        """One line for reports:

        >>> StepSetup("mse", False, "Adam", "given").describe()
        'model.train_step with loss mse, Adam, state donated'
        """
        loss = "its own compute_loss" if self.loss is None else f"loss {self.loss}"
        if self.default_loss:
            loss += " (a default: the model was not compiled)"
        labels = "" if self.labels == "given" else f", labels: {self.labels}"
        return (f"model.train_step with {loss}, {self.optimizer}"
                f"{', state donated' if self.donated else ''}{labels}")


def _state_layouts(variables, references, plan, mesh, sharding_of, what):
    """The sharding Keras gives each of ``variables`` (optimizer slots or
    metric variables): its reference variable's, else the rules', else
    replicated. Returns ``(shardings, records, problems)``."""
    rest = [v for v in variables if id(v) not in references]
    matches = RuleMatcher([v.path for v in rest]).match(plan.rule_keys)
    by_rule = {id(v): m for v, m in zip(rest, matches)}
    shardings, records, problems = [], [], []
    for v in variables:
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
                    f"{what} {v.path!r} {shape}: rule {rule!r} gives it {tuple(axes)}, "
                    f"which Keras refuses ({e.message}). shardviz counted it replicated.",
                    hint=e.hint or "Make the rule's axes fit it, or add a more specific "
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
    config = optimizer.get_config()
    config["name"] = _stable_name(type(optimizer).__name__, config.get("name"))
    with keras_adapter.deferred_variables():
        return type(optimizer).from_config(config)


def _stable_name(class_name: str, name: str | None) -> str | None:
    """An optimizer's name without the number Keras adds to make each new
    optimizer's name unique in the process (``adam_3``): the name scope of
    the update's ops in the program, which would otherwise make every train
    step another program (and a compile cache miss).

    >>> _stable_name("Adam", "adam_3"), _stable_name("AdamW", "adam_w"), _stable_name("SGD", "mine_2")
    ('adam', 'adam_w', 'mine_2')
    """
    base = re.sub("([a-z])([A-Z])", r"\1_\2", re.sub("(.)([A-Z][a-z]+)", r"\1_\2", class_name))
    base = base.lower()
    if name is not None and re.fullmatch(rf"{re.escape(base)}(_\d+)?", name):
        return base
    return name


def _labels(labels, outputs, data_shardings):
    """Label specs placed like the data: the given ones, or zeros shaped like
    the model's ``outputs`` (a callable giving their specs). Returns
    ``(specs, how)``."""
    import jax


    if labels is None:
        outputs = outputs()
        specs = jax.tree_util.tree_map(lambda o: jax.ShapeDtypeStruct(o.shape, "float32"),
                                       outputs)
        how = "zeros of the outputs' shapes"
    else:
        specs, _ = normalize_inputs(labels, None, what="Label")
        how = "given"
    return data_shardings(specs, "Label"), how


def add_train_step(result, scan, plan, mesh, dist, sharding_of, tv, ntv, x, labels, optimizer,
                   name, seconds, data_shardings, recorder=None, forward=None):
    """Compile the model's own train step and put its program on ``result``.

    With ``recorder`` (one that inspects), the activations are those of the
    train step's own forward part, and ``result`` holds no forward pass yet;
    ``forward(tv, ntv, x)`` is then lowered, not compiled, only when the
    default labels need the outputs' shapes."""
    import jax

    def outputs():
        if result.compiled is not None:
            return result.compiled.out_info
        quiet = Recorder(keras_adapter.layout_keys(dist), inspect=False, model=model)
        return compile_pass(forward, (tv, ntv, x), name, quiet, seconds, "forward",
                            lower_only=True, devices=mesh.device_list).out_info

    model = scan.model
    keras = keras_adapter.keras()
    compiled_before = keras_adapter.is_compiled(model)
    chosen = optimizer or (getattr(model, "optimizer", None) if compiled_before else None) \
        or keras.optimizers.Adam()
    optimizer = _fresh_optimizer(chosen)
    # Only a model shardviz built may keep deferred metric variables: a user's
    # compiled metrics are built for real, as fit would build them.
    deferred = scan.built_by_shardviz
    y, how = _labels(labels, outputs, data_shardings)
    if labels is None and compiled_before and keras_adapter.compiled_loss_name(model):
        raise ShardvizError(
            f"Model {name!r} is compiled with the loss "
            f"{keras_adapter.compiled_loss_name(model)}, which needs labels, and none were "
            "given.", hint="Give labels= (--labels on the command line): arrays, shapes such "
            "as (8, 1024), or jax.ShapeDtypeStructs, one per model output, as model.fit takes "
            "y.")
    with keras_adapter.training_state(model, optimizer, DEFAULT_LOSS, deferred):
        setup = StepSetup(
            loss=keras_adapter.compiled_loss_name(model), default_loss=not compiled_before,
            optimizer=type(optimizer).__name__, labels=how)
        with keras_adapter.slot_references(optimizer) as references, \
                keras_adapter.deferred_variables():
            optimizer.build(model.trainable_variables)
        try:
            keras_adapter.build_compiled_metrics(model, x, y, deferred)
        except Exception as e:
            raise (_layer_error(e, name, scan.tuning.remat)
                   or _data_error(e, name, y, setup)) from None
        opt_shardings, records, problems = _state_layouts(
            optimizer.variables, references, plan, mesh, sharding_of, "Optimizer slot")
        metrics = list(model.metrics_variables)
        metric_shardings, _, metric_problems = _state_layouts(
            metrics, {}, plan, mesh, sharding_of, "Metric variable")
        if result.mode == "abstract":
            ov = [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype, sharding=s)
                  for v, s in zip(optimizer.variables, opt_shardings)]
            mv = [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype, sharding=s)
                  for v, s in zip(metrics, metric_shardings)]
        else:
            ov = [keras_adapter.initial_value(v, s)
                  for v, s in zip(optimizer.variables, opt_shardings)]
            mv = [keras_adapter.initial_value(v, s) for v, s in zip(metrics, metric_shardings)]
        state_shardings = ([v.sharding for v in tv], [v.sharding for v in ntv],
                           opt_shardings, metric_shardings)
        step = keras_adapter.keras_train_step(model, state_shardings)
        fused = recorder is not None
        if not fused:
            recorder = Recorder(keras_adapter.layout_keys(dist), inspect=False, model=model)
        xla_warnings: list = []
        attention: list = []
        peak: list = []
        state, data = (tv, ntv, ov, mv), (x, y)
        parameters = {f"state[{k}][{i}]": v.path
                      for k, vs in enumerate((model.trainable_variables,
                                              model.non_trainable_variables,
                                              optimizer.variables, metrics))
                      for i, v in enumerate(vs)}
        try:
            compiled = compile_pass(step, (state, data), name, recorder, seconds, "train step",
                                    log=xla_warnings, observe=(recorder.on_output, dist),
                                    devices=mesh.device_list, attention=attention, peak=peak)
        except OutOfMemory as e:
            e.peak_source = PeakSource(peak[0] if peak else NO_DUMP, parameters,
                                       [a.layer_path for a in recorder.activations()],
                                       model_output(recorder.activations()), optimizer.name)
            raise
        except ShardvizError as e:
            if e.__cause__ is not None and recorder.last_layer is None:
                raise (_layer_error(e.__cause__, name, scan.tuning.remat)
                       or _data_error(e.__cause__, name, y, setup)) from None
            raise
        result.attention = attention
        if fused:
            result.activations = recorder.activations()
        layer_paths = [a.layer_path for a in result.activations]
        result.peak_source = PeakSource(peak[0] if peak else NO_DUMP, parameters, layer_paths,
                                        model_output(result.activations), optimizer.name)
        collectives = priced(collectives_of(compiled, mesh, layer_paths, parameters), mesh)
        prefix = optimizer.name
    collectives = [
        dataclasses.replace(c, pass_="update")
        if any(s.split("/")[0] == prefix for s in c.scopes) else c
        for c in collectives
    ]
    result.forward_collectives = ([c for c in collectives if c.pass_ == "forward"] if fused
                                  else result.collectives)
    result.collectives = collectives
    result.memory = hlo.memory(compiled, (state, data))
    result.hlo_text = compiled.as_text()
    result.grouped_convolutions = grouped_convolution_layers(result.hlo_text, layer_paths)
    result.compiled = compiled
    result.optimizer_variables = records
    result.step_setup = setup
    result.problems += problems + metric_problems
    seen = {(p.layer, p.message.split(" efficiently")[0]) for p in result.problems
            if p.kind == "xla-resharding"}
    result.problems += [p for p in reshard_problems(compiled, xla_warnings, layer_paths, plan,
                                                    "train step", result.activations)
                        if (p.layer, p.message.split(" efficiently")[0]) not in seen]
    if result.mode == "concrete":
        # The state is donated: run on copies, so the report keeps its arrays.
        copies = jax.tree_util.tree_map(lambda a: a.copy(), state)
        t = time.perf_counter()
        jax.block_until_ready(compiled(copies, data))
        seconds["train_step_run"] = time.perf_counter() - t


def _layer_error(error, name, remat) -> ShardvizError | None:
    """A layer that raised inside the train step (Keras names it in its
    message), said plainly; with remat, that Keras's remat wraps its call."""
    calls = list(re.finditer(r"when calling (\w+)\.call\(\)", str(error)))
    if not calls:
        return None
    found = calls[-1]  # the innermost layer Keras names
    layer = _innermost_layer(error) or found.group(1)
    if remat:
        hint = (f"Keras's RematScope wraps each {layer}'s call in jax.checkpoint, and the layer "
                "fails there (its arguments become traced values). Analyse without remat=, "
                "or name other layers: remat=[layer names].")
    else:
        hint = f"Check that a {layer} layer runs under model.fit with these inputs."
    after = str(error)[found.end():].splitlines()
    inner = next((line for line in after if line.strip(" .'")), "")
    said = short_message(RuntimeError(inner)) if inner else short_message(error)
    return ShardvizError(
        f"The train step of model {name!r} failed in a {layer} layer"
        f"{' under remat=' + repr(remat) if remat else ''}: {said}", hint=hint, layer=layer)


def _innermost_layer(error) -> str | None:
    """The class of the innermost layer (not a model) running when ``error``
    or an error it was raised from was raised, from their tracebacks."""
    model_class = keras_adapter.keras().Model
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        layer = keras_adapter.raising_layer(error)
        if layer is not None and not isinstance(layer, model_class):
            return type(layer).__name__
        error = error.__cause__ or error.__context__
    return None


def _data_error(error, name, labels, setup) -> ShardvizError:
    """A failure of the loss or metrics on the labels, said plainly."""
    import jax


    shapes = [tuple(s.shape) for s in jax.tree_util.tree_leaves(labels)]
    what = shapes[0] if len(shapes) == 1 else shapes
    loss = setup.loss or "the model's own compute_loss"
    if setup.default_loss:  # the model was never compiled: say whose loss this is
        loss += " (the model was not compiled, so shardviz compiled it with SGD and this loss)"
    return ShardvizError(
        f"The train step of model {name!r} failed on labels {what} with {loss}: "
        f"{type(error).__name__}: {short_message(error)}",
        hint="Give labels= the shape model.fit would take for this loss (for "
        "SparseCategoricalCrossentropy: the outputs' shape without the last dim, integer "
        "class ids; for most others: the outputs' shape)"
        + ("; or compile the model in its builder with the loss and optimizer you train "
           "with." if setup.default_loss else "."))
