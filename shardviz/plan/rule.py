"""Rule: one layout rule of a plan, and the normalising of rules as given.

A :class:`Rule` is a ``LayoutMap`` key and one mesh axis (or ``None``) per
tensor dimension. ``_normalize_axes`` refuses axes Keras's ``TensorLayout``
cannot take (a set, a bare name, several axes on one dimension), and
``normalize_rules`` turns a mapping or a list of pairs into Rules, in order;
``index_arg`` checks a rule position given to an edit.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from typing import Any

from ..errors import ShardvizError

Axes = tuple  # tuple[str | None, ...]


@dataclasses.dataclass(frozen=True)
class Rule:
    """One layout rule: a LayoutMap key and the mesh axis of each dimension.

    >>> Rule("d1/output", ("batch", None, "model")).is_output
    True
    """

    key: str
    axes: Axes

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ShardvizError(
                f"A rule key must be a non-empty string, got {self.key!r}.",
                hint="Use a variable path such as 'dense/kernel', a regex such "
                "as '.*dense.*kernel', or a layer output path ending in '/output'.",
            )
        object.__setattr__(self, "axes", _normalize_axes(self.axes, self.key))

    @property
    def is_output(self) -> bool:
        """Whether the key is meant for layer outputs (it ends in ``/output``)."""
        return self.key.endswith("/output")

    def __repr__(self) -> str:
        return f"Rule({self.key!r}, {self.axes!r})"



def _normalize_axes(axes: object, key: str) -> Axes:
    if isinstance(axes, (set, frozenset, Mapping)):
        kind = "a set, whose order is arbitrary" if isinstance(axes, (set, frozenset)) \
            else "a mapping"
        raise ShardvizError(
            f"Rule {key!r}: axes must be a tuple or list with one entry per tensor dimension, "
            f"in order; got {kind}: {axes!r}.",
            hint="Write e.g. (None, 'model'): the mesh axis (or None) of each dimension.",
            rule=key,
        )
    if isinstance(axes, str) or axes is None:
        raise ShardvizError(
            f"Rule {key!r}: axes must be a sequence with one entry per tensor "
            f"dimension, got {axes!r}.",
            hint=f"Write e.g. ({axes!r},) for a 1-D tensor, or (None, {axes!r}) "
            "to shard the last dimension of a 2-D one.",
            rule=key,
        )
    if not isinstance(axes, (tuple, list)):
        raise ShardvizError(
            f"Rule {key!r}: axes must be a tuple or list such as (None, 'model'), got "
            f"{type(axes).__name__} {axes!r:.80}.",
            rule=key,
        )
    axes = tuple(axes)
    for axis in axes:
        if axis is None or (isinstance(axis, str) and axis):
            continue
        if isinstance(axis, (tuple, list)):
            raise ShardvizError(
                f"Rule {key!r}: dimension entry {axis!r} names several mesh axes; "
                "Keras's TensorLayout accepts one mesh axis name or None per dimension.",
                hint="Shard this dimension over a single axis, or merge the axes "
                "into one mesh axis of their combined size.",
                rule=key,
            )
        raise ShardvizError(
            f"Rule {key!r}: dimension entry {axis!r} must be a mesh axis name or None.",
            rule=key,
        )
    return axes


def normalize_rules(rules: Any) -> tuple[Rule, ...]:
    if rules is None:
        return ()
    if isinstance(rules, Mapping):
        items = list(rules.items())
    elif isinstance(rules, (str, bytes, set, frozenset)):
        raise ShardvizError(
            f"Rules must be a mapping or a list of (key, axes) pairs, in order; got "
            f"{type(rules).__name__} {rules!r:.80}.",
            hint="Write e.g. {'.*dense.*kernel': (None, 'model')}.",
        )
    else:
        try:
            items = list(rules)
        except TypeError:
            raise ShardvizError(
                f"Rules must be a mapping or a list of (key, axes) pairs, got "
                f"{type(rules).__name__} {rules!r:.80}.",
                hint="Write e.g. {'.*dense.*kernel': (None, 'model')}.",
            ) from None
    out = []
    for item in items:
        if isinstance(item, Rule):
            out.append(item)
            continue
        try:
            key, axes = item
        except (TypeError, ValueError):
            raise ShardvizError(
                f"Rule entry {item!r} is not a (key, axes) pair.",
                hint="Write e.g. ('.*dense.*kernel', (None, 'model')).",
            ) from None
        out.append(Rule(key, axes))
    return tuple(out)


def index_arg(index: object) -> int:

    if isinstance(index, bool) or not isinstance(index, numbers.Integral):
        raise ShardvizError(f"A rule position must be an integer, got {index!r:.40}.")
    return int(index)
