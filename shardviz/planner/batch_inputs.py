"""The inputs (and labels) of one global batch, for :func:`~shardviz.planner.fit`:
a token model's own inputs at a batch and a sequence length, or the shapes of
one batch the user gave, with the batch replaced."""

from __future__ import annotations

from ..errors import ShardvizError
from ..model.inputs import TokenBatch, positive
from ..model.scan import Scan
from ..report import Report


class BatchInputs:
    """The inputs (and labels) of one global batch."""

    def __init__(self, scan: Scan, seq: int | None, inputs: object, labels: object) -> None:
        if seq is not None:
            seq = positive(seq, "seq")
            if inputs is not None:
                raise ShardvizError(
                    f"seq={seq} and inputs= are both given: the inputs' shapes set every dim "
                    "but the batch, so seq would be ignored.",
                    hint="Give seq= alone for a token model (it fills the dims the model "
                    "leaves open), or inputs= with the lengths in its shapes.")
        self.seq, self.given, self.labels = seq, inputs, labels
        self.tokens = TokenBatch(scan.model, seq) if inputs is None else None

    def at(self, batch: int) -> tuple[object, object]:
        inputs = _rebatch(self.given, batch) if self.tokens is None else self.tokens.at(batch)
        if self.labels is not None:
            labels = _rebatch(self.labels, batch, "labels")
        else:  # a keras-hub causal LM's labels are its token ids: seq gives them
            labels = self.tokens.labels_at(batch) if self.tokens is not None else None
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


def _rebatch(tree: object, batch: int, what: str = "inputs") -> object:
    """Shapes (or arrays, as their shapes) with the first dim replaced."""
    return resized(tree, 0, batch, what)


def resized(tree: object, dim: int, size: int, what: str = "inputs") -> object:
    """Shapes (or arrays, as their shapes) with dim ``dim`` set to ``size``
    where they have it (a rank-1 input keeps its shape when ``dim`` is 1).

    >>> resized({"ids": (8, 128), "pos": (8,)}, 1, 64)
    {'ids': (8, 64), 'pos': (8,)}
    """
    import jax

    if isinstance(tree, dict):
        return {k: resized(v, dim, size, what) for k, v in tree.items()}
    if isinstance(tree, tuple) and tree and all(isinstance(d, int) for d in tree):
        return tree[:dim] + (size,) + tree[dim + 1:] if len(tree) > dim else tree
    if isinstance(tree, (list, tuple)):
        return [resized(v, dim, size, what) for v in tree]
    if hasattr(tree, "shape") and hasattr(tree, "dtype"):
        shape = tuple(tree.shape)
        if len(shape) > dim:
            shape = shape[:dim] + (size,) + shape[dim + 1:]
        return jax.ShapeDtypeStruct(shape, tree.dtype)
    raise ShardvizError(f"{what}= holds {type(tree).__name__}, not shapes or arrays.",
                        hint=f"Give the shapes of one batch, e.g. {what}=(8, 128).")
