"""The inputs (and labels) of one global batch, for :func:`~shardviz.planner.fit`:
a token model's own inputs at a batch and a sequence length, or the shapes of
one batch the user gave, with the batch replaced."""

from __future__ import annotations

from typing import Any

from ..errors import ShardvizError
from ..model.inputs import model_input_specs
from ..model.scan import Scan
from ..report import Report


class BatchInputs:
    """The inputs (and labels) of one global batch."""

    def __init__(self, scan: Scan, seq: int | None, inputs: object, labels: object) -> None:
        if seq is not None:
            seq = positive(seq, "seq")
        self.seq, self.given, self.labels = seq, inputs, labels
        model: Any = scan.model
        self.specs: list = []
        if inputs is None:
            specs = model_input_specs(model)
            if specs is None:
                raise ShardvizError(
                    f"The model {model.name!r} does not say what it takes.",
                    hint="Give seq= for a token model, or inputs= (the shapes of one batch).")
            self.specs = specs
            if seq is None and any(d is None for shape, _ in specs for d in shape[1:]):
                raise ShardvizError(
                    f"The model {model.name!r} leaves a dim of its inputs open after the "
                    "batch (a sequence length).",
                    hint="Give seq=, e.g. seq=2048.")
        self.names = _input_names(scan.model) if inputs is None else None

    def at(self, batch: int) -> tuple[object, object]:
        import jax

        if self.given is not None:
            inputs = _rebatch(self.given, batch)
        else:
            specs = [jax.ShapeDtypeStruct(
                (batch,) + tuple(self.seq if d is None else d for d in shape[1:]),
                dtype or "float32") for shape, dtype in self.specs]
            inputs = dict(zip(self.names, specs)) if self.names else (
                specs[0] if len(specs) == 1 else specs)
        labels = _rebatch(self.labels, batch) if self.labels is not None else None
        return inputs, labels

    def batch_of(self, report: Report) -> int | None:
        shape = report.arguments.get("inputs")
        leaves = _leaves(shape)
        return int(leaves[0][0]) if leaves else None


def _leaves(tree: object) -> list[tuple]:
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _leaves(v)]
    if isinstance(tree, (list, tuple)) and tree and not all(isinstance(d, int) for d in tree):
        return [x for v in tree for x in _leaves(v)]
    shape = getattr(tree, "shape", tree)
    return [tuple(shape)] if isinstance(shape, (tuple, list)) and shape else []


def _rebatch(tree: object, batch: int) -> object:
    """Shapes (or arrays, as their shapes) with the first dim replaced."""
    import jax

    if isinstance(tree, dict):
        return {k: _rebatch(v, batch) for k, v in tree.items()}
    if isinstance(tree, tuple) and tree and all(isinstance(d, int) for d in tree):
        return (batch,) + tree[1:]
    if isinstance(tree, (list, tuple)):
        return [_rebatch(v, batch) for v in tree]
    if hasattr(tree, "shape") and hasattr(tree, "dtype"):
        return jax.ShapeDtypeStruct((batch,) + tuple(tree.shape[1:]), tree.dtype)
    raise ShardvizError(f"inputs= holds {type(tree).__name__}, not shapes or arrays.",
                        hint="Give the shapes of one batch, e.g. inputs=(8, 128).")


def _input_names(model: Any) -> list[str] | None:
    """The names of a model's inputs when it takes a dict (keras-hub
    backbones do), else None."""
    given = getattr(model, "input", None)
    if isinstance(given, dict):
        return list(given)
    return None


def positive(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ShardvizError(f"{name}={value!r:.60} is not a positive whole number.",
                            hint=f"Give {name} as a count of at least 1.")
    return value
