"""Model inputs: what the user gave, as arrays or as abstract values.

A forward pass needs inputs. Users give them in several forms, and a model
may say what it expects:

* an array (NumPy or JAX): a concrete input;
* a ``jax.ShapeDtypeStruct``: an abstract input;
* a shape, a tuple of ints such as ``(8, 128)``: an abstract input whose
  dtype is taken from the model's own input, else float32;
* a list, tuple or dict of these, for models with several inputs.

>>> import jax
>>> specs, concrete = normalize_inputs((8, 16), model_specs=None)
>>> specs, concrete
(ShapeDtypeStruct(shape=(8, 16), dtype=float32), False)
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Mapping

from ..errors import ShardvizError
from ..format import plural


def _is_shape(x) -> bool:

    return isinstance(x, (tuple, list)) and all(
        isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in x
    )


def _is_array(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "__array__")


def _is_spec(x) -> bool:
    import jax

    return isinstance(x, jax.ShapeDtypeStruct)


def call_arity(model) -> int:
    """How many tensors a subclassed model's ``call`` takes positionally
    (``call(self, x, y)`` takes 2); 1 for functional and Sequential models,
    which take one structure of inputs.
    """

    try:
        if getattr(model, "inputs", None):
            return 1
    except (AttributeError, ValueError):
        pass
    try:
        params = inspect.signature(model.call).parameters.values()
    except (TypeError, ValueError):
        return 1
    positional = [p for p in params
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and p.default is p.empty and p.name not in ("training", "mask")]
    return max(1, len(positional))


def call_args(model, tree) -> tuple:
    """The positional arguments to call ``model`` with, for inputs ``tree``:
    a list or tuple of as many inputs as a subclassed ``call`` takes is
    spread over its arguments; anything else is its one argument.
    """
    arity = call_arity(model)
    if arity > 1 and isinstance(tree, (list, tuple)) and len(tree) == arity:
        return tuple(tree)
    return (tree,)


def model_input_specs(model):
    """What the model says it takes: a list of ``(shape, dtype)`` with None
    for unknown dims, one per input, or None if it does not say.

    Functional and Sequential models know their inputs; a subclassed model
    that was built by a call remembers the shape of its single input.
    """
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        inputs = None
    if inputs:
        return [(tuple(t.shape), str(t.dtype)) for t in inputs]
    if call_arity(model) > 1:
        return None  # Keras remembers the shape of the first argument only
    from .._adapters.keras import build_shapes

    shapes = build_shapes(model)
    if len(shapes) == 1:
        (shape,) = shapes.values()
        if shape and isinstance(shape, (tuple, list)) and all(
            d is None or isinstance(d, int) for d in shape
        ):
            # The batch size of the call that built the model is not a constraint.
            return [((None,) + tuple(shape[1:]), None)]
    return None


def input_names(model) -> list[str] | None:
    """The names of a model's inputs when it takes a dict (keras-hub
    backbones do), else None."""
    try:
        given = model.input
    except Exception:  # a model never called has no inputs yet
        return None
    if not isinstance(given, dict):
        return None
    # In the order of model.inputs (Keras flattens a dict by sorted keys), which
    # model_input_specs follows; the dict's own order may differ (Whisper's does).
    try:
        flat = list(model.inputs)
    except (AttributeError, ValueError):
        return list(given)
    ordered = [n for f in flat for n, t in given.items() if t is f]
    return ordered if len(ordered) == len(given) == len(flat) else list(given)


def placeholder_inputs(model_specs, batch: int = 1, other: int = 8, names=None):
    """Abstract inputs for a model's own input specs, with unknown dims filled
    (``batch`` for the first, ``other`` elsewhere), as a dict of ``names``
    when the model takes one. Used to find which output paths a forward pass
    looks up; shapes do not change the paths."""
    import jax

    specs = []
    for shape, dtype in model_specs:
        filled = tuple(
            (batch if i == 0 else other) if d is None else d for i, d in enumerate(shape)
        )
        specs.append(jax.ShapeDtypeStruct(filled, dtype or "float32"))
    if names and len(names) == len(specs):
        return dict(zip(names, specs))
    return specs[0] if len(specs) == 1 else specs


MAX_DIM = 2**31 - 1
"""The largest size of an input dimension: JAX and XLA hold sizes in 32 bits
where programs are built."""


def normalize_inputs(inputs, model_specs=None, what: str = "Input", names=None):
    """``(tree of ShapeDtypeStruct, concrete)`` for user inputs (or labels:
    ``what`` names them in errors).

    ``concrete`` is True when every leaf is an array. The tree keeps the
    structure the user gave (a single value, a list or a dict).
    """
    import jax

    leaves = []

    def checked(shape, position):
        label = position if isinstance(position, int) else repr(position)
        big = [int(d) for d in shape if int(d) > MAX_DIM]
        if big:
            raise ShardvizError(
                f"{what} {label} has the shape {tuple(int(d) for d in shape)!r:.120}, with a "
                f"size of {big[0]:,}; a dimension holds at most {MAX_DIM:,} (JAX's 32-bit "
                "sizes).", hint="Give the shape of one global batch, e.g. (8, 128).")
        if any(int(d) < 0 for d in shape):
            raise ShardvizError(
                f"{what} {label} has the shape {tuple(int(d) for d in shape)}, with a negative "
                "size.", hint="Give every dim a size of at least 1, e.g. (8, 128).")
        if len(shape) and int(shape[0]) == 0:
            raise ShardvizError(
                f"{what} {label} has the shape {tuple(int(d) for d in shape)}: a batch of 0 rows, "
                "which no device holds any of.",
                hint="Give the global batch's size as the first dim, e.g. (8, 128).")
        return shape

    def convert(x, position, index):
        if _is_spec(x):
            leaves.append("spec")
            return jax.ShapeDtypeStruct(checked(x.shape, position), x.dtype)
        if _is_array(x):
            leaves.append("array")
            return jax.ShapeDtypeStruct(checked(tuple(x.shape), position), x.dtype)
        if _is_shape(x):
            leaves.append("shape")
            dtype = None
            if model_specs and index is not None and index < len(model_specs):
                dtype = model_specs[index][1]
            return jax.ShapeDtypeStruct(checked(tuple(int(d) for d in x), position),
                                        dtype or "float32")
        label = position if isinstance(position, int) else repr(position)
        raise ShardvizError(
            f"{what} {label} is {type(x).__name__} {x!r:.80}; expected an array, a "
            "jax.ShapeDtypeStruct or a shape such as (8, 128).",
            hint="For several inputs pass a list or a dict of these.",
        )

    if inputs is None:
        raise ShardvizError(f"No {what.lower()}s were given.")
    if _is_shape(inputs) or _is_spec(inputs) or _is_array(inputs):
        tree = convert(inputs, 0, 0)
    elif isinstance(inputs, Mapping):
        # A named input takes the dtype the model declares for that name.
        tree = {k: convert(v, k, (names.index(k) if names and k in names else
                                  None if names else i))
                for i, (k, v) in enumerate(inputs.items())}
    elif isinstance(inputs, (list, tuple)):
        tree = [convert(v, i, i) for i, v in enumerate(inputs)]
    else:
        tree = convert(inputs, 0, 0)
    return tree, bool(leaves) and all(kind == "array" for kind in leaves)


def input_arrays(inputs):
    """The arrays of fully concrete user inputs, in the same tree."""
    if isinstance(inputs, Mapping):
        return dict(inputs)
    if isinstance(inputs, (list, tuple)) and not _is_shape(inputs) and not _is_array(inputs):
        return list(inputs)
    return inputs


def check_against_model(specs, model_specs, model_name: str, names=None):
    """Refuse inputs whose count, rank or fixed dims differ from what the
    model declares, naming the input and what it expects; for a model that
    takes a dict (``names``, its inputs' names), a dict with every name and
    no other. A dtype that differs is not refused: the model casts its inputs
    to the dtypes it declares (as ``model.fit`` does with the same data)."""
    if not model_specs:
        return
    import jax

    if names:
        _check_names(specs, model_specs, model_name, names)
    elif isinstance(specs, Mapping):
        raise ShardvizError(
            f"Model {model_name!r} takes {plural(len(model_specs), 'input')} by position, not "
            f"by name; inputs named {', '.join(map(repr, specs))} were given.",
            hint="Give the shape alone, e.g. inputs=(8, 128) (--inputs 8x128, without NAME=), "
            "and for several inputs a list in the model's order.")
    given = jax.tree_util.tree_leaves(specs)
    if len(given) != len(model_specs):
        raise ShardvizError(
            f"Model {model_name!r} takes {plural(len(model_specs), 'input')}, but {len(given)} "
            f"{'was' if len(given) == 1 else 'were'} given.",
            hint="Pass one shape or array per model input, in order "
            f"(expected shapes: {[s for s, _ in model_specs]}).",
        )
    for i, (spec, (shape, _)) in enumerate(zip(given, model_specs)):
        # A dict's leaves come in its sorted keys' order, as the model's inputs do.
        label = repr(names[i]) if names else str(i)
        expected = "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"
        if len(spec.shape) != len(shape):
            raise ShardvizError(
                f"Input {label} of model {model_name!r} has rank {len(spec.shape)} "
                f"{tuple(spec.shape)}, but the model expects rank {len(shape)} {expected}.",
                hint=f"Give input {label} a shape like {expected}, with '?' any size.",
            )
        for d, (got, want) in enumerate(zip(spec.shape, shape)):
            if want is not None and got != want:
                raise ShardvizError(
                    f"Input {label} of model {model_name!r} has size {got} in dim {d}, but "
                    f"the model expects {want} (shape {expected}).",
                    hint=f"Give input {label} a shape like {expected}.",
                )


def _check_names(specs, model_specs, model_name: str, names: list[str]) -> None:
    """A model that takes a dict is given a dict with each of its names."""
    if not isinstance(specs, Mapping):
        raise ShardvizError(
            f"Model {model_name!r} takes a dict of inputs, named "
            f"{', '.join(map(repr, names))}; the inputs given are not a dict.",
            hint=_names_hint(model_specs, names))
    unknown = [k for k in specs if k not in names]
    missing = [n for n in names if n not in specs]
    if unknown or missing:
        said = [f"no input is named {', '.join(map(repr, unknown))}"] if unknown else []
        said += [f"{', '.join(map(repr, missing))} {'is' if len(missing) == 1 else 'are'} "
                 "missing"] if missing else []
        raise ShardvizError(
            f"Model {model_name!r} takes inputs named {', '.join(map(repr, names))}: "
            f"{'; '.join(said)}.", hint=_names_hint(model_specs, names))


def _names_hint(model_specs, names: list[str]) -> str:
    """The dict to give, and its --inputs flags, with a batch of 8 and
    lengths of 128 where the model leaves them open."""
    shapes = {n: tuple((8 if i == 0 else 128) if d is None else d for i, d in enumerate(s))
              for n, (s, _) in zip(names, model_specs)}
    dtypes = {n: str(getattr(t, "name", t)) for n, (_, t) in zip(names, model_specs)}
    example = ", ".join(f"{n!r}: {shapes[n]}" for n in names)
    flags = " ".join(f"--inputs {n}=" + "x".join(map(str, shapes[n]))
                     + (f":{dtypes[n]}" if dtypes[n] not in ("float32", "None") else "")
                     for n in names)
    return f"Give inputs={{{example}}}, with your batch and lengths ({flags} on the command line)."


def positive(value: object, name: str) -> int:
    """``value`` when it is a whole number of at least 1, else a clear error."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ShardvizError(f"{name}={value!r:.60} is not a positive whole number.",
                            hint=f"Give {name} as a count of at least 1.")
    return value


def is_causal_lm(model: object) -> bool:
    """Whether a model is a keras-hub ``CausalLM`` (found by its classes'
    names, so keras-hub need not be imported)."""
    return any(c.__name__ == "CausalLM" and c.__module__.startswith("keras_hub")
               for c in type(model).__mro__)


class TokenBatch:
    """The inputs of one global batch of the model's own input shapes, with
    each dim it leaves open after the batch set to ``seq`` (a token model's
    sequence length): a dict for a model that takes one (keras-hub
    backbones), else one spec or a list."""

    def __init__(self, model, seq: int | None) -> None:
        if seq is not None:
            seq = positive(seq, "seq")
        specs = model_input_specs(model)
        if specs is None:
            raise ShardvizError(
                f"The model {model.name!r} does not say what it takes.",
                hint="Give seq= (--seq on the command line) for a token model, or inputs= "
                "(--inputs: the shapes of one batch).")
        if seq is None and any(d is None for shape, _ in specs for d in shape[1:]):
            raise ShardvizError(
                f"The model {model.name!r} leaves a dim of its inputs open after the "
                "batch (a sequence length).",
                hint="Give seq=, e.g. seq=2048 (--seq 2048 on the command line).")
        self.seq, self.specs = seq, specs
        self.names = input_names(model)
        self.causal_lm = seq is not None and is_causal_lm(model)

    def labels_at(self, batch: int):
        """The labels ``fit`` takes for one batch of a keras-hub causal LM
        with no preprocessor (the next token's id at each position:
        ``(batch, seq)`` int32); None for any other model, whose labels the
        user gives."""
        import jax

        return jax.ShapeDtypeStruct((batch, self.seq), "int32") if self.causal_lm else None

    def at(self, batch: int):
        """``jax.ShapeDtypeStruct``s of one global batch of ``batch``."""
        import jax

        specs = [jax.ShapeDtypeStruct(
            (batch,) + tuple(self.seq if d is None else d for d in shape[1:]),
            dtype or "float32") for shape, dtype in self.specs]
        if self.names:
            return dict(zip(self.names, specs))
        return specs[0] if len(specs) == 1 else specs
