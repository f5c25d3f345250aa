"""Plan: an immutable description of a Keras distribution.

A Plan holds what a ``keras.distribution.ModelParallel`` holds: the mesh
(ordered axis names and sizes), the ordered layout rules (a regex key and
one mesh axis or ``None`` per tensor dimension, exactly as in ``LayoutMap``)
and the batch axis. It holds no devices and starts nothing, so it can be
built, compared, edited, saved and loaded anywhere.

>>> plan = Plan({"batch": 2, "model": 4}, {".*dense.*kernel": (None, "model")})
>>> plan.mesh_size
8
>>> plan.batch_axis
'batch'
>>> plan.with_rule(".*dense.*bias", ("model",)).rule_keys
('.*dense.*kernel', '.*dense.*bias')
>>> Plan.from_json(plan.to_json()) == plan
True

Edits return new plans; the original never changes. A plan may hold rules
that Keras would refuse (an unknown axis, an invalid regex): they are kept,
exactly as typed, and reported by :meth:`Plan.check` and by the analysis, so
that nothing a user typed is lost. :meth:`Plan.to_keras` refuses them.

This module holds the class, its properties, presets and edits, and
:func:`as_plan`; the bodies of its bulkier methods live in sibling modules
(``validate``, ``keras_convert``, ``serialize``, ``python_code``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from ..errors import Problem, ShardvizError
from ..format import plural
from .bounds import check_axis_name, normalize_mesh
from .keras_convert import plan_from_keras, plan_to_keras
from .python_code import plan_to_python
from .rule import Axes, Rule, index_arg, normalize_rules
from .serialize import plan_from_dict, plan_from_json, plan_to_dict
from .validate import plan_problems

if TYPE_CHECKING:
    from typing import TypeAlias

    MeshArg: TypeAlias = Mapping[str, int] | Iterable[tuple[str, int]]
    """A mesh as given: axis name to size, or ``(name, size)`` pairs, in order."""
    RulesArg: TypeAlias = Mapping[str, Axes] | Iterable[Rule | tuple[str, Axes]] | None
    """Rules as given: ``key -> axes``, or ``(key, axes)`` pairs or Rules, in order."""


@dataclasses.dataclass(frozen=True, init=False)
class Plan:
    """An immutable distribution plan: mesh, ordered rules and batch axis.

    Args:
        mesh: axis name to size, in order, e.g. ``{"batch": 2, "model": 4}``.
        rules: ordered ``key -> axes``, as a mapping or a list of pairs. A key
            is a ``LayoutMap`` key: a variable path, a regex over variable
            paths (``re.fullmatch``), or a layer output key ending in
            ``/output``.
        batch_axis: the mesh axis that shards the batch dimension of inputs.
            Defaults to the first axis, as in ``ModelParallel``.
    """

    mesh: tuple[tuple[str, int], ...]
    rules: tuple[Rule, ...]
    batch_axis: str

    def __init__(self, mesh: MeshArg, rules: RulesArg = (), batch_axis: str | None = None) -> None:
        mesh = normalize_mesh(mesh)
        rules = normalize_rules(rules)
        if batch_axis is None:
            batch_axis = mesh[0][0]
        if isinstance(batch_axis, str) and batch_axis:
            check_axis_name(batch_axis, "The batch axis")
        if not isinstance(batch_axis, str) or not batch_axis:
            raise ShardvizError(f"batch_axis must be a mesh axis name, got {batch_axis!r}.")
        object.__setattr__(self, "mesh", mesh)
        object.__setattr__(self, "rules", rules)
        object.__setattr__(self, "batch_axis", batch_axis)

    # ----------------------------------------------------------- properties
    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.mesh)

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        return tuple(size for _, size in self.mesh)

    @property
    def mesh_dict(self) -> dict[str, int]:
        return dict(self.mesh)

    @property
    def mesh_size(self) -> int:
        """The number of devices the mesh needs."""
        return math.prod(self.mesh_shape)

    @property
    def rule_keys(self) -> tuple[str, ...]:
        return tuple(rule.key for rule in self.rules)

    def axis_size(self, name: str) -> int:
        """The size of mesh axis ``name``."""
        for axis, size in self.mesh:
            if axis == name:
                return size
        raise ShardvizError(
            f"The mesh has no axis {name!r}.", hint=f"Mesh axes: {list(self.axis_names)}."
        )

    def rule_index(self, key: str) -> int:
        """The position of the first rule with this key."""
        for i, rule in enumerate(self.rules):
            if rule.key == key:
                return i
        raise ShardvizError(
            f"The plan has no rule {key!r}.", hint=f"Rules: {list(self.rule_keys)}.", rule=key
        )

    # --------------------------------------------------------------- presets
    @classmethod
    def data_parallel(cls, n: int, axis: str = "batch") -> Plan:
        """Replicate every variable, shard the batch over ``n`` devices.

        >>> Plan.data_parallel(8)
        Plan(mesh={'batch': 8}, rules={}, batch_axis='batch')
        """
        return cls({axis: n})

    @classmethod
    def model_parallel(cls, n: int, rules: RulesArg = (), axis: str = "model") -> Plan:
        """Shard variables over ``n`` devices by ``rules``; no data parallelism.

        The mesh is ``{"batch": 1, axis: n}`` so that the batch axis exists
        (with size 1) and inputs are not split over the model axis.

        >>> Plan.model_parallel(4, {".*kernel": (None, "model")}).mesh_dict
        {'batch': 1, 'model': 4}
        """
        return cls({"batch": 1, axis: n}, rules, batch_axis="batch")

    @classmethod
    def hybrid(cls, batch: int, model: int, rules: RulesArg = ()) -> Plan:
        """A 2-D ``(batch, model)`` mesh: data parallel and model parallel.

        >>> Plan.hybrid(2, 4).mesh_dict
        {'batch': 2, 'model': 4}
        """
        return cls({"batch": batch, "model": model}, rules, batch_axis="batch")

    # ----------------------------------------------------------------- edits
    def _replace(self, mesh: MeshArg | None = None, rules: RulesArg = None,
                 batch_axis: str | None = None) -> Plan:
        return Plan(
            self.mesh if mesh is None else mesh,
            self.rules if rules is None else rules,
            self.batch_axis if batch_axis is None else batch_axis,
        )

    def with_mesh(self, mesh: MeshArg) -> Plan:
        """Replace the whole mesh; rules and batch axis are kept as they are."""
        mesh = normalize_mesh(mesh)
        names = [name for name, _ in mesh]
        batch = self.batch_axis if self.batch_axis in names else names[0]
        return self._replace(mesh=mesh, batch_axis=batch)

    def with_axis(self, name: str, size: int, index: int | None = None) -> Plan:
        """Resize axis ``name``, or add it (at ``index``, default last; as in
        ``list.insert``, a negative index counts from the end).

        >>> Plan({"batch": 8}).with_axis("model", 2).with_axis("batch", 4).mesh_dict
        {'batch': 4, 'model': 2}
        """
        mesh = list(self.mesh)
        for i, (axis, _) in enumerate(mesh):
            if axis == name:
                mesh[i] = (name, size)
                return self._replace(mesh=mesh)
        mesh.insert(len(mesh) if index is None else index, (name, size))
        return self._replace(mesh=mesh)

    def without_axis(self, name: str) -> Plan:
        """Remove axis ``name``. Rules that name it are kept, and reported."""
        self.axis_size(name)
        mesh = [(a, s) for a, s in self.mesh if a != name]
        if not mesh:
            raise ShardvizError(
                f"Removing {name!r} would leave the mesh without axes.",
                hint="Keep at least one axis; set its size to 1 instead.",
            )
        batch = self.batch_axis if self.batch_axis != name else mesh[0][0]
        return self._replace(mesh=mesh, batch_axis=batch)

    def with_axis_renamed(self, old: str, new: str) -> Plan:
        """Rename a mesh axis, in the mesh, every rule and the batch axis.

        >>> Plan({"data": 2, "model": 4}, {"k": (None, "model")}).with_axis_renamed(
        ...     "model", "tensor").rules
        (Rule('k', (None, 'tensor')),)
        """
        self.axis_size(old)
        check_axis_name(new, f"Axis {old!r} cannot be renamed: the new name")
        mesh = [(new if a == old else a, s) for a, s in self.mesh]
        rules = [Rule(r.key, tuple(new if a == old else a for a in r.axes)) for r in self.rules]
        batch = new if self.batch_axis == old else self.batch_axis
        return self._replace(mesh=mesh, rules=rules, batch_axis=batch)

    def with_batch_axis(self, name: str) -> Plan:
        """Shard the input batch over ``name``."""
        return self._replace(batch_axis=name)

    def with_rule(self, key: str, axes: Axes, index: int | None = None) -> Plan:
        """Set the axes of rule ``key`` in place, or add it at ``index``
        (default last). ``index`` works as in ``list.insert``: a negative
        index counts from the end, so ``-1`` places the rule before the last.

        >>> Plan({"m": 2}, {"a": ("m",), "b": ("m",)}).with_rule("c", ("m",), index=-1).rule_keys
        ('a', 'c', 'b')
        """
        rule = Rule(key, axes)
        rules = list(self.rules)
        for i, existing in enumerate(rules):
            if existing.key == key:
                rules[i] = rule
                return self._replace(rules=rules)
        rules.insert(len(rules) if index is None else index_arg(index), rule)
        return self._replace(rules=rules)

    def with_rule_at(self, index: int, key: str | None = None, axes: Axes | None = None) -> Plan:
        """Change the key and/or the axes of the rule at position ``index``.

        >>> Plan({"m": 2}, {"a": ("m",)}).with_rule_at(0, key="b").rules
        (Rule('b', ('m',)),)
        """
        rules = list(self.rules)
        self._check_index(index)
        old = rules[index]
        rules[index] = Rule(old.key if key is None else key, old.axes if axes is None else axes)
        return self._replace(rules=rules)

    def without_rule(self, key_or_index: str | int) -> Plan:
        """Remove a rule, by key or by position."""
        index = self._index_of(key_or_index)
        rules = list(self.rules)
        del rules[index]
        return self._replace(rules=rules)

    def with_rule_moved(self, key_or_index: str | int, new_index: int) -> Plan:
        """Move a rule: take it out, then insert it at ``new_index`` as
        ``list.insert`` does (a negative index counts from the end of the other
        rules). Order matters only for display and for Keras's error messages;
        matching itself is order-free.

        >>> plan = Plan({"m": 2}, {"a": ("m",), "b": ("m",), "c": ("m",)})
        >>> plan.with_rule_moved("c", 0).rule_keys, plan.with_rule_moved("a", -1).rule_keys
        (('c', 'a', 'b'), ('b', 'a', 'c'))
        """
        index = self._index_of(key_or_index)
        rules = list(self.rules)
        rule = rules.pop(index)
        rules.insert(index_arg(new_index), rule)
        return self._replace(rules=rules)

    def with_rules(self, rules: RulesArg) -> Plan:
        """Replace all rules."""
        return self._replace(rules=normalize_rules(rules))

    def _check_index(self, index: object) -> None:
        if not isinstance(index, int) or isinstance(index, bool) or \
                not -len(self.rules) <= index < len(self.rules):
            raise ShardvizError(
                f"There is no rule at position {index!r}; the plan has {plural(len(self.rules), 'rule')}."
            )

    def _index_of(self, key_or_index: str | int) -> int:
        if isinstance(key_or_index, int) and not isinstance(key_or_index, bool):
            self._check_index(key_or_index)
            return key_or_index % len(self.rules)
        return self.rule_index(cast(str, key_or_index))  # (a bool is no key: it raises)

    # ----------------------------------------------------------------- check
    def check(self) -> list[Problem]:
        """Problems with the plan itself, before any model is involved.

        >>> [p.kind for p in Plan({"batch": 8}, {"(": ("batch",)}).check()]
        ['invalid-regex']
        """
        return plan_problems(self)

    # ------------------------------------------------------------ conversion
    def refuse_errors(self) -> None:
        """Raise :class:`ShardvizError` if Keras would refuse this plan
        (:meth:`check` finds an error), naming every error."""
        errors = [p for p in self.check() if p.severity == "error"]
        if errors:
            raise ShardvizError(
                "This plan cannot become a Keras distribution:\n"
                + "\n".join(f"  - {p.message}" for p in errors),
                hint=errors[0].hint, rule=errors[0].rule,
            )

    def to_keras(self, devices: Sequence[object] | None = None) -> Any:
        """A ``keras.distribution.ModelParallel`` with this mesh, rules and
        batch axis.

        Args:
            devices: the devices of the mesh, in mesh order. Defaults to the
                first ``mesh_size`` devices of ``keras.distribution.list_devices()``.

        Raises:
            ShardvizError: if the plan has errors Keras would refuse, or if
                there are fewer devices than the mesh needs.
        """
        return plan_to_keras(self, devices)

    @classmethod
    def from_keras(cls, obj: object) -> Plan:
        """A Plan from a ``ModelParallel``, a ``DataParallel`` or a ``LayoutMap``.

        For a LayoutMap (for example one returned by a model's
        ``get_layout_map(device_mesh)``) the batch axis is the mesh's first
        axis, as ``ModelParallel`` would choose.
        """
        return plan_from_keras(cls, obj)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with a versioned schema.

        >>> Plan({"batch": 2}, {"k": ("batch",)}).to_dict()["rules"]
        [{'key': 'k', 'axes': ['batch']}]
        """
        return plan_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        """Load a plan written by :meth:`to_dict`. Nothing in it is executed;
        anything malformed gives a :class:`ShardvizError` saying what and where."""
        return plan_from_dict(cls, data)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        """Load a plan from JSON text (a file's contents, not its name).

        Bytes must be UTF-8 (a byte-order mark is allowed); duplicate keys,
        non-standard numbers and deep nesting are refused.
        """
        return plan_from_json(cls, text)

    def to_python(self, devices_expr: str | None = None, processes: int | None = None) -> str:
        """Source code that builds this plan as a Keras distribution.

        The code defines ``distribution``; execute it, then use
        ``with distribution.scope():`` or ``keras.distribution.set_distribution``.

        >>> print(Plan({"batch": 2, "model": 4}, {".*kernel": (None, "model")}).to_python())
        import keras
        <BLANKLINE>
        devices = keras.distribution.list_devices()[:8]
        mesh = keras.distribution.DeviceMesh(
            shape=(2, 4), axis_names=('batch', 'model'), devices=devices
        )
        layout_map = keras.distribution.LayoutMap(mesh)
        layout_map['.*kernel'] = (None, 'model')
        distribution = keras.distribution.ModelParallel(
            layout_map=layout_map, batch_dim_name='batch'
        )
        """
        return plan_to_python(self, devices_expr, processes)

    def __repr__(self) -> str:
        rules = "{" + ", ".join(f"{r.key!r}: {r.axes!r}" for r in self.rules) + "}"
        if len(set(self.rule_keys)) != len(self.rules):
            rules = "[" + ", ".join(f"({r.key!r}, {r.axes!r})" for r in self.rules) + "]"
        return f"Plan(mesh={dict(self.mesh)!r}, rules={rules}, batch_axis={self.batch_axis!r})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        """In a notebook or IPython: the repr, one rule per line when it is
        longer than a line, so that it never runs off the cell's edge.

        >>> from IPython.lib.pretty import pretty
        >>> print(pretty(Plan({"batch": 2, "model": 4}, {".*attention/query/kernel":
        ...     (None, "model", None), ".*attention/output/kernel": ("model", None, None)})))
        Plan(mesh={'batch': 2, 'model': 4},
             rules={'.*attention/query/kernel': (None, 'model', None),
                    '.*attention/output/kernel': ('model', None, None)},
             batch_axis='batch')
        """
        flat = repr(self)
        if len(flat) <= 88 or cycle:
            p.text(flat)
            return
        pairs = [f"{r.key!r}: {r.axes!r}" for r in self.rules]
        opening, closing = "{", "}"
        if len(set(self.rule_keys)) != len(self.rules):
            pairs = [f"({r.key!r}, {r.axes!r})" for r in self.rules]
            opening, closing = "[", "]"
        indent = " " * len("     rules=" + opening)
        rules = opening + (",\n" + indent).join(pairs) + closing
        p.text(f"Plan(mesh={dict(self.mesh)!r},\n     rules={rules},\n"
               f"     batch_axis={self.batch_axis!r})")


def as_plan(obj: object) -> Plan:
    """Accept a Plan, a Keras distribution or LayoutMap, or a plan dict."""
    if isinstance(obj, Plan):
        return obj
    if isinstance(obj, (str, bytes, os.PathLike)):
        raise ShardvizError(
            f"The plan {obj!r:.80} is a {type(obj).__name__}, not a plan.",
            hint="Read a plan file with shardviz.Plan.from_json(pathlib.Path(path).read_text()), "
            "or pass a Plan, a Keras LayoutMap or ModelParallel.")
    # A Keras LayoutMap is a Mapping too, whose lookups are regex matches: read it as Keras's.
    if isinstance(obj, Mapping) and not hasattr(obj, "device_mesh"):
        return Plan.from_dict(obj)
    return Plan.from_keras(obj)
