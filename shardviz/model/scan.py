"""Scan: the variables and output paths of a model, without allocating.

A scan lists what a plan's rules can match:

* every variable, with the path, shape, dtype and trainability Keras gives it;
* every layer output path (``.../output``) that Keras looks up during a
  forward pass, in call order, as Keras itself computes it.

Paths are never rebuilt by hand: they differ between functional models (no
model prefix for top-level layers), Sequential models (prefixed) and
subclassed ones. Variable paths are read off the variables; output paths are
recorded from Keras's own lookups while an abstract forward pass is traced.

A zero-argument builder is called inside
``keras.StatelessScope(initialize_variables=False)``, so variables get a
shape, a dtype and a path, but no memory: a 70B-parameter model scans in
seconds.

>>> import keras
>>> def build():
...     inputs = keras.Input((16,))
...     return keras.Model(inputs, keras.layers.Dense(4, name="d1")(inputs))
>>> s = scan(build)
>>> [v.path for v in s.variables]
['d1/kernel', 'd1/bias']
>>> s.output_paths
('d1/output',)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from .._adapters import keras as keras_adapter
from ..devices import quiet_tpu_runtime
from ..errors import ShardvizError
from ..format import plural
from ..matching.match import PathIndex, RuleMatcher
from .inputs import (
    call_args,
    check_against_model,
    input_names,
    model_input_specs,
    normalize_inputs,
    placeholder_inputs,
)
from .tuning import Tuning

OUTPUT_SUFFIX = "/output"


def layer_path(output_path: str) -> str:
    """The layer path of an output path.

    >>> layer_path("block_0/mlp/output")
    'block_0/mlp'
    """
    return output_path[: -len(OUTPUT_SUFFIX)] if output_path.endswith(OUTPUT_SUFFIX) \
        else output_path


@dataclasses.dataclass(frozen=True)
class VariableInfo:
    """One model variable, as Keras names and shapes it."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    trainable: bool
    own_axes: tuple | None = None
    """A layout the variable carries itself; Keras uses it over any rule."""

    @property
    def layer(self) -> str:
        """The path of the layer that owns the variable."""
        return self.path.rpartition("/")[0]

    @property
    def name(self) -> str:
        return self.path.rpartition("/")[2]

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclasses.dataclass(frozen=True)
class OutputInfo:
    """One layer output lookup: the key Keras looks up and the layer."""

    path: str
    """The lookup key, e.g. ``"my_model/block_0/up/output"``."""
    layer: str
    """The layer's name."""
    layer_class: str
    shapes: tuple = ()
    """The shape of each output tensor of the layer's first call, seen while
    scanning (placeholder sizes where the batch or sequence length was
    unknown)."""
    call_shapes: tuple = ()
    """``shapes`` for every call of the layer in one forward pass: a layer
    reused in the model (a tied embedding) is called several times, and one
    ``/output`` rule constrains every call."""
    embedding: bool = False
    """Whether the layer is a Keras ``Embedding`` (or a subclass, such as
    keras-hub's ``ReversibleEmbedding``): its table is read by a gather."""
    symbolic_structure: bool = False
    """Whether, while the builder built the model, the layer returned several
    symbolic tensors (a list or tuple of KerasTensors). Keras cannot apply an
    ``/output`` layout to them then: building such a model inside a
    distribution's scope raises."""

    @property
    def layer_path(self) -> str:
        """The path of the layer, without ``/output``."""
        return layer_path(self.path)


@dataclasses.dataclass(frozen=True, eq=False)
class Scan:
    """What a model offers to a plan: its variables and its output paths.

    Build one with :func:`scan`. A scan is independent of any plan, so it is
    made once per model and reused for every plan analysed.
    """

    model: object
    kind: str
    """``"functional"``, ``"sequential"`` or ``"subclassed"``."""
    variables: tuple[VariableInfo, ...]
    outputs: tuple[OutputInfo, ...]
    outputs_source: str
    """How output paths were found: ``"forward"`` (an abstract forward pass,
    as ``fit`` and ``predict`` run it), ``"build"`` (the lookups made while
    the builder built the model) or ``"none"``."""
    notes: tuple[str, ...] = ()
    built_by_shardviz: bool = False
    """True when shardviz called a builder (so no variable holds memory)."""
    seconds: float = 0.0
    tuning: Tuning = Tuning()
    """The training settings the model was built with (dtype policy, LoRA,
    quantization, remat); ``Tuning()`` for a model as the user built it."""
    other_paths: tuple[str, ...] = ()
    """The variable and layer output paths of the model this one is part of
    (``scan(..., within=)``), outside this one: a rule written for this model
    matches none of them, so its map can be applied while the whole is built."""

    @property
    def variable_paths(self) -> tuple[str, ...]:
        return tuple(v.path for v in self.variables)

    @property
    def output_paths(self) -> tuple[str, ...]:
        return tuple(o.path for o in self.outputs)

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path a rule can match: variables first, then outputs."""
        return self.variable_paths + self.output_paths

    @property
    def param_count(self) -> int:
        return sum(v.size for v in self.variables)

    @functools.cached_property
    def variable_matcher(self) -> RuleMatcher:
        """Matches rule keys against the variable paths, caching per key."""
        return RuleMatcher(self.variable_paths)

    @functools.cached_property
    def output_matcher(self) -> RuleMatcher:
        """Matches rule keys against the output paths, caching per key."""
        return RuleMatcher(self.output_paths)

    @functools.cached_property
    def variable_columns(self) -> dict[str, list]:
        """The plan-independent columns of ``report.variables``, made once."""
        infos = self.variables
        return {
            "path": [i.path for i in infos], "layer": [i.layer for i in infos],
            "shape": [i.shape for i in infos], "dtype": [i.dtype for i in infos],
            "params": [i.size for i in infos], "trainable": [i.trainable for i in infos],
        }

    @functools.cached_property
    def rank_memo(self) -> dict[str, list[int]]:
        """Rule key to the ranks of the tensors it matches (see
        ``Report.ranks_of``); a scan's paths never change, so neither do these."""
        return {}

    @functools.cached_property
    def path_index(self) -> PathIndex:
        """Finds what a rule that matches nothing probably meant."""
        return PathIndex(self.paths)

    @property
    def model_name(self) -> str:
        """The model's name, or its class's when it has none."""
        return model_name(self.model)

    def __repr__(self) -> str:
        return (
            f"<Scan {self.model_name!r} ({self.kind}): {len(self.variables)} variables, "
            f"{self.param_count:,} parameters, {len(self.outputs)} output paths>"
        )


def model_kind(model: object) -> str:
    k = keras_adapter.keras()
    if isinstance(model, k.Sequential):
        return "sequential"
    if keras_adapter.is_functional(model):
        return "functional"
    return "subclassed"


def _is_layer(obj: object) -> bool:
    return isinstance(obj, keras_adapter.keras().layers.Layer)


def build_model(builder: Callable[[], Any], tuning: Tuning | None = None
                ) -> tuple[Any, list[tuple]]:
    """Call a zero-argument builder with deferred variables, recording the
    output lookups Keras makes while it builds, and build it with
    ``tuning`` (the dtype policy and remat around the build; quantization
    and LoRA on the built model)."""
    seen: list[tuple] = []

    def on_output(path: str, layer: object, outputs: Any, layout: object, apply: object,
                  error: object) -> Any:
        seen.append((path, layer, _shapes(outputs), keras_adapter.is_symbolic_structure(outputs)))
        return outputs

    name = getattr(builder, "__name__", repr(builder))
    tuning = tuning or Tuning()
    error: Exception | None
    with keras_adapter.deferred_variables(), keras_adapter.observing_outputs(on_output):
        try:
            with tuning.building(), keras_adapter.fresh_names():
                model = builder()
            if _is_layer(model):
                _tune(model, tuning, name)
        except ShardvizError:
            raise
        except SystemExit as e:
            raise ShardvizError(
                f"The builder {name}() called sys.exit({e.code!r}) instead of returning a model.",
                hint="Return the model from the builder; do not exit the process.",
            ) from None
        except Exception as e:
            error = e
        else:
            error = None
    if error is not None:
        raise ShardvizError(
            f"The builder {name}() raised {type(error).__name__}: {error}",
            hint="Fix the builder so that it returns a built Keras model; "
            "shardviz calls it with no arguments.",
        ) from error
    if not _is_layer(model):
        raise ShardvizError(
            f"The builder {name}() returned {type(model).__name__}, not a Keras model.",
            hint="Return the model, e.g. `return keras.Model(inputs, outputs)`.",
        )
    return model, seen


def _tune(model: Any, tuning: Tuning, name: str) -> None:
    """Quantize and enable LoRA on a freshly built model; a Keras refusal
    becomes an error that names the setting."""
    try:
        with warnings.catch_warnings():
            # Keras warns of each layer that has nothing to quantize (norms, dropout, ...).
            warnings.filterwarnings("ignore", message=".*does not have a `quantize` method")
            tuning.apply(model)
    except ShardvizError:
        raise
    except Exception as e:
        raise ShardvizError(
            f"Keras refused {tuning.describe()} on the model {name}() built: "
            f"{type(e).__name__}: {str(e)[:300]}",
            hint="Change the setting it names, or apply it in the builder yourself.") from e


def _shapes(outputs: object) -> tuple[tuple[int, ...], ...]:
    import jax

    leaves = jax.tree_util.tree_leaves(outputs, is_leaf=lambda x: hasattr(x, "shape"))
    return tuple(tuple(getattr(x, "shape", ())) for x in leaves)


def _dedupe(records: Sequence[tuple], calls: bool,
            structured: frozenset[str] = frozenset()) -> tuple[OutputInfo, ...]:
    """One OutputInfo per path, in first-call order. ``calls``: whether each
    record is a call (a forward pass), rather than a lookup Keras may repeat
    while it builds."""
    order, by_path = [], {}
    for path, layer, shapes, *_ in records:
        if path not in by_path:
            order.append(path)
            by_path[path] = (layer, [shapes])
        elif calls:
            by_path[path][1].append(shapes)
    out = []
    for path in order:
        layer, call_shapes = by_path[path]
        out.append(OutputInfo(
            path=path,
            layer=getattr(layer, "name", path.rpartition("/")[0].rpartition("/")[2]),
            layer_class=type(layer).__name__ if layer is not None else "",
            embedding=_is_embedding(layer),
            shapes=call_shapes[0],
            call_shapes=tuple(call_shapes),
            symbolic_structure=path in structured,
        ))
    return tuple(out)


def _is_embedding(layer: object) -> bool:
    from .._adapters.keras import keras

    return isinstance(layer, keras().layers.Embedding)


def forward_lookups(model: Any, input_specs: object) -> list[tuple]:
    """The output lookups of an abstract forward pass (``stateless_call``,
    as ``fit`` and ``predict`` call the model on JAX), in call order."""
    import jax

    seen: list[tuple] = []

    def on_output(path: str, layer: object, outputs: Any, layout: object, apply: object,
                  error: object) -> Any:
        seen.append((path, layer, _shapes(outputs), False))
        return outputs

    trainable = [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype) for v in model.trainable_variables]
    non_trainable = [
        jax.ShapeDtypeStruct(tuple(v.shape), v.dtype) for v in model.non_trainable_variables
    ]

    def forward(tv: list, ntv: list, x: object) -> Any:
        with keras_adapter.deferred_variables(), keras_adapter.observing_outputs(on_output):
            outputs, _ = model.stateless_call(tv, ntv, *call_args(model, x))
        return outputs

    jax.eval_shape(forward, trainable, non_trainable, input_specs)
    return seen


def model_name(model: Any) -> str:
    """A model's name, or its class's when it has none: the one way
    shardviz names a model."""
    return getattr(model, "name", None) or type(model).__name__


def scan(model_or_builder: Any, inputs: object = None, tuning: Tuning | None = None,
         within: Any = None) -> Scan:
    """Scan a built Keras model, or a zero-argument builder of one.

    Args:
        model_or_builder: a built ``keras.Model`` (functional, Sequential or
            subclassed, nested or not), or a function that builds and returns
            one. A builder is called with deferred variables, so nothing is
            allocated.
        inputs: optional inputs (arrays, shapes, ``ShapeDtypeStruct``s, or a
            list or dict of these). Needed to find the output paths of a
            subclassed model that does not record its input shape.
        tuning: build the model with these training settings (a
            :class:`~shardviz.model.tuning.Tuning`); needs a builder, since
            a built model's dtypes and remat are fixed.
        within: the built model this one is part of, when only the part is
            planned (a backbone's sub-model that trains alone): the rules
            written for the part then match no other variable or layer
            output of the whole (:attr:`Scan.other_paths`).

    Raises:
        ShardvizError: if the builder raises or returns no model, or the
            model is not built.
    """

    quiet_tpu_runtime()
    start = time.perf_counter()
    notes = []
    build_records: list[tuple] = []
    tuning = tuning or Tuning()
    if _is_layer(model_or_builder):
        if tuning.changes_model:
            raise ShardvizError(
                f"{tuning.describe()} changes how the model is built, and this model is "
                "built already.",
                hint="Pass the function that builds the model (a builder) instead, so that "
                "shardviz builds it with these settings; or apply them yourself and leave "
                "them out.")
        model, built_by_shardviz = model_or_builder, False
    elif callable(model_or_builder):
        (model, build_records), built_by_shardviz = build_model(model_or_builder, tuning), True
        if getattr(model_or_builder, "source", ""):  # a keras-hub preset: whose configuration
            notes.append(f"Model {model_or_builder.source}.")
    else:
        raise ShardvizError(
            f"Expected a Keras model or a zero-argument builder, got "
            f"{type(model_or_builder).__name__}.",
            hint="Pass the model, or a function such as `lambda: make_model()`.",
        )
    name = model_name(model)
    if not model.built:
        raise ShardvizError(
            f"Model {name!r} is not built, so its variables do not exist yet.",
            hint="Build it (call it on data, or give it a keras.Input), or pass a builder "
            "that returns a built model.",
        )

    variables = []
    for v in keras_adapter.unique_variables(model):
        variables.append(VariableInfo(
            path=v.path,
            shape=tuple(int(d) for d in v.shape),
            dtype=str(v.dtype),
            trainable=bool(v.trainable),
            own_axes=keras_adapter.variable_own_layout(v),
        ))
    pinned = [v for v in variables if v.own_axes is not None]
    if pinned and not built_by_shardviz:
        notes.append(
            f"{plural(len(pinned), 'variable')} already carry a layout (set at construction, or by "
            "the distribution the model was built under); Keras keeps it over any rule. "
            "Pass a builder to analyse a fresh build."
        )

    specs = None
    model_specs = model_input_specs(model)
    if inputs is not None:
        specs, _ = normalize_inputs(inputs, model_specs, names=input_names(model))
        try:
            check_against_model(specs, model_specs, name, input_names(model))
        except ShardvizError as e:
            notes.append(f"The inputs given do not fit the model ({e.message}); output paths "
                         "were found with the model's own input shapes.")
            specs = None
    if specs is None and model_specs is not None:
        specs = placeholder_inputs(model_specs, names=input_names(model))

    outputs: tuple[OutputInfo, ...]
    outputs, source = (), "none"
    structured = frozenset(r[0] for r in build_records if r[3])
    if specs is not None:
        try:
            outputs, source = _dedupe(forward_lookups(model, specs), True, structured), "forward"
        except Exception as e:
            notes.append(
                f"The abstract forward pass used to find output paths failed "
                f"({type(e).__name__}: {str(e)[:300]}); pass `inputs=` to fix this."
            )
    if source == "none" and build_records:
        outputs, source = _dedupe(build_records, False, structured), "build"
        notes.append(
            "Output paths were taken from the lookups made while the model was built; "
            "pass `inputs=` to see exactly those of a forward pass."
        )
    elif source == "none":
        notes.append(
            "The model does not declare its inputs, so its output paths are unknown; "
            "pass `inputs=` (e.g. inputs=(8, 128)) to find them."
        )
    return Scan(
        other_paths=_other_paths(within, variables, outputs, name),
        model=model,
        kind=model_kind(model),
        variables=tuple(variables),
        outputs=outputs,
        outputs_source=source,
        notes=tuple(notes),
        built_by_shardviz=built_by_shardviz,
        seconds=time.perf_counter() - start,
        tuning=tuning,
    )


def _other_paths(within: Any, variables: list, outputs: tuple, name: str) -> tuple[str, ...]:
    """The paths of ``within`` outside the part scanned (see ``scan``)."""
    if within is None:
        return ()
    if not _is_layer(within) or not within.built:
        raise ShardvizError(f"within={type(within).__name__} is not a built Keras model.",
                            hint=f"Give the built model that {name!r} is part of.")
    mine = {v.path for v in variables} | {o.path for o in outputs}
    theirs = [v.path for v in keras_adapter.unique_variables(within)]
    if not mine & set(theirs):
        raise ShardvizError(f"{name!r} is not part of {model_name(within)!r}: they share no "
                            "variable.", hint="Give the model whose sub-model this is.")
    layers = [layer.path + "/output" for layer in keras_adapter.all_layers(within)
              if getattr(layer, "path", None)]
    return tuple(dict.fromkeys(p for p in theirs + layers if p not in mine))
