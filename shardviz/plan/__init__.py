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
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, cast

from ..errors import Problem, ShardvizError
from ..format import plural
from ..layout.match import regex_error

SCHEMA = "shardviz.plan"
SCHEMA_VERSION = 1

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


if TYPE_CHECKING:
    from typing import TypeAlias

    MeshArg: TypeAlias = Mapping[str, int] | Iterable[tuple[str, int]]
    """A mesh as given: axis name to size, or ``(name, size)`` pairs, in order."""
    RulesArg: TypeAlias = Mapping[str, Axes] | Iterable[Rule | tuple[str, Axes]] | None
    """Rules as given: ``key -> axes``, or ``(key, axes)`` pairs or Rules, in order."""


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


MAX_AXIS_SIZE = 2**31 - 1
"""JAX's meshes hold axis sizes as 32-bit integers."""

MAX_MESH_SIZE = 2**16
"""The most devices a mesh may hold (the product of its axis sizes), and the
most devices :func:`~shardviz.planner.suggest` and
:func:`~shardviz.planner.sweep` plan for: 65,536, ten times the largest TPU
slice shardviz knows (6,144 v5p chips), so that several slices fit. Meshes
above :data:`~shardviz.devices.MAX_SIMULATED_DEVICES` are planned on an
abstract mesh. A mesh's devices, its device table and its pictures grow with
this count."""

MAX_AXES = 16
"""The most axes a mesh may have. A mesh's devices are a NumPy array with one
dimension per axis, and NumPy holds at most 32; real meshes use a handful."""

SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
              "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
"""The units of a size such as ``"12GB"``: KB, MB, GB and TB are powers of
1000; KiB, MiB, GiB and TiB powers of 1024 (case does not matter)."""

AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
"""What a mesh axis name may be: ASCII letters, digits, '_', '-' and '.',
not starting with a digit, '-' or '.'. XLA aborts the process on a name with
a non-ASCII character or a backslash, and names with quotes, commas, '=' or
brackets cannot be read back from XLA's program text."""


def as_int(value: object, what: str) -> int:
    """An int from a Python or NumPy integer (not a bool, not a float).

    >>> import numpy as np
    >>> as_int(np.int64(4), "size")
    4
    """
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ShardvizError(f"{what} must be an integer, got {type(value).__name__} {value!r:.40}.")
    return int(value)


def as_bytes(value: object, what: str) -> int:
    """A byte count from a number, or from a size such as ``"12GB"`` or
    ``"1.5 GiB"`` (:data:`SIZE_UNITS`). Bools, negatives and other things are
    refused with a :class:`ShardvizError` that names ``what``.

    >>> as_bytes("12GB", "budget_bytes"), as_bytes("1GiB", "budget_bytes"), as_bytes(512, "x")
    (12000000000, 1073741824, 512)
    """
    import numbers

    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d{1,30}(?:\.\d{1,30})?)\s*([A-Za-z]{0,3})\s*", value)
        if m and m.group(2).lower() in SIZE_UNITS:
            return int(float(m.group(1)) * SIZE_UNITS[m.group(2).lower()])
    elif isinstance(value, numbers.Real) and not isinstance(value, bool) \
            and math.isfinite(float(value)) and float(value) >= 0:
        return int(float(value)) if not isinstance(value, numbers.Integral) else int(value)
    raise ShardvizError(
        f"{what}={value!r:.40} is not a size in bytes.",
        hint=f"Give a number of bytes, or a size such as '64MB' or '12GiB' ({what}='12GB').")


def check_device_count(value: object, what: str) -> int:
    """``value`` as a device count from 1 to :data:`MAX_MESH_SIZE`: a Python
    or NumPy integer, not a bool.

    >>> import numpy as np
    >>> check_device_count(np.int64(8), "devices")
    8
    """
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise ShardvizError(f"{what}={value!r:.40}: give a positive device count, an "
                            "integer.", hint=f"For example {what}=8.")
    if int(value) > MAX_MESH_SIZE:
        raise ShardvizError(
            f"{what}={int(value)}: shardviz plans for at most {MAX_MESH_SIZE:,} devices.",
            hint=f"Give at most {MAX_MESH_SIZE:,}, e.g. {what}=256.")
    return int(value)


def check_axis_name(name: object, where: str = "Mesh axis name") -> str:
    """Refuse axis names XLA cannot take, naming the axis and what is allowed.

    >>> check_axis_name("model")
    'model'
    """
    if not isinstance(name, str) or not name:
        raise ShardvizError(
            f"{where} {name!r} must be a non-empty string.",
            hint="Use names such as 'batch', 'model' or 'data'.",
        )
    if not AXIS_NAME.fullmatch(name):
        bad = next((c for c in name if not re.fullmatch(r"[A-Za-z0-9_.\-]", c)), name[0])
        raise ShardvizError(
            f"{where} {name!r} has the character {bad!r}, which shardviz refuses: XLA aborts "
            "the whole process on a non-ASCII or backslash character in an axis name, and "
            "cannot write others back readably.",
            hint="Use ASCII letters, digits, '_', '-' and '.', starting with a letter or '_' "
            "(e.g. 'model', 'data_1').",
        )
    return name


def _normalize_mesh(mesh: Any) -> tuple[tuple[str, int], ...]:
    if isinstance(mesh, Mapping):
        items = list(mesh.items())
    elif isinstance(mesh, (str, bytes, set, frozenset)):
        raise ShardvizError(
            f"The mesh must be a mapping of axis name to size, got {mesh!r:.80}.",
            hint="Write e.g. {'batch': 2, 'model': 4}.",
        )
    else:
        try:
            items = [tuple(item) for item in mesh]
        except TypeError:
            raise ShardvizError(
                f"The mesh must be a mapping of axis name to size, got {mesh!r:.80}.",
                hint="Write e.g. {'batch': 2, 'model': 4}.",
            ) from None
    if not items:
        raise ShardvizError(
            "The mesh has no axes.", hint="Give at least one axis, e.g. {'batch': 8}."
        )
    if len(items) > MAX_AXES:
        raise ShardvizError(
            f"The mesh has {len(items):,} axes; shardviz takes at most {MAX_AXES} (a mesh's "
            "devices are an array with one dimension per axis).",
            hint="Merge axes, or drop axes of size 1.")
    seen = set()
    out = []
    for item in items:
        if len(item) != 2:
            raise ShardvizError(f"Mesh entry {item!r:.80} is not a (name, size) pair.")
        name, size = item
        check_axis_name(name)
        if name in seen:
            raise ShardvizError(
                f"Mesh axis {name!r} appears twice.", hint="Give every axis a distinct name."
            )
        try:
            size = as_int(size, f"The size of mesh axis {name!r}")
        except ShardvizError as e:
            raise ShardvizError(e.message + " Sizes must be integers.",
                                hint=f"Set e.g. {{{name!r}: 2}}.") from None
        if size < 1 or size > MAX_AXIS_SIZE:
            raise ShardvizError(
                f"Mesh axis {name!r} has size {size}; sizes must be from 1 to {MAX_AXIS_SIZE:,} "
                "(JAX holds axis sizes as 32-bit integers).",
                hint=f"Set e.g. {{{name!r}: 2}}.",
            )
        seen.add(name)
        out.append((name, size))
    total = math.prod(size for _, size in out)
    if total > MAX_MESH_SIZE:
        raise ShardvizError(
            f"The mesh {dict(out)!r:.120} holds {total:,} devices; shardviz plans for at most "
            f"{MAX_MESH_SIZE:,}.",
            hint=f"Give axis sizes whose product is at most {MAX_MESH_SIZE:,}, e.g. "
            "{'batch': 32, 'model': 8}.")
    return tuple(out)


def _normalize_rules(rules: Any) -> tuple[Rule, ...]:
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


def check_processes(processes: object, mesh_size: int) -> int | None:
    """``processes`` as an int that divides the mesh, or None.

    >>> check_processes(2, 8), check_processes(None, 8)
    (2, None)
    """
    import numbers

    if processes is None:
        return None
    if isinstance(processes, bool) or not isinstance(processes, numbers.Integral) \
            or processes < 1:
        raise ShardvizError(f"processes={processes!r:.40} must be a positive number of hosts.",
                            hint="For example processes=2.")
    if mesh_size % int(processes):
        raise ShardvizError(
            f"The mesh's {mesh_size} devices do not split evenly over {processes} processes: "
            "every host must own the same number of devices.",
            hint=f"Use a process count that divides {mesh_size}, or change the mesh.")
    return int(processes)


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
        mesh = _normalize_mesh(mesh)
        rules = _normalize_rules(rules)
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
        mesh = _normalize_mesh(mesh)
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
        rules.insert(len(rules) if index is None else _index_arg(index), rule)
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
        rules.insert(_index_arg(new_index), rule)
        return self._replace(rules=rules)

    def with_rules(self, rules: RulesArg) -> Plan:
        """Replace all rules."""
        return self._replace(rules=_normalize_rules(rules))

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
        problems = []
        names = set(self.axis_names)
        if self.batch_axis not in names:
            problems.append(Problem(
                "error", "batch-axis",
                f"The batch axis {self.batch_axis!r} is not a mesh axis {list(self.axis_names)}.",
                hint=f"Set batch_axis to one of {list(self.axis_names)}.",
            ))
        seen: dict[str, int] = {}
        for i, rule in enumerate(self.rules):
            if rule.key in seen:
                problems.append(Problem(
                    "error", "duplicate-rule",
                    f"Rules {seen[rule.key]} and {i} have the same key {rule.key!r}; "
                    "Keras's LayoutMap refuses a duplicate key.",
                    hint="Delete one of them or merge their axes.", rule=rule.key,
                ))
            else:
                seen[rule.key] = i
            error = regex_error(rule.key)
            if error and error.startswith("it backtracks catastrophically"):
                problems.append(Problem(
                    "error", "invalid-regex",
                    f"Rule {rule.key!r} cannot be used: {error}",
                    hint="Repeat a pattern once rather than a repeated group ('a+' for "
                    "'(a+)+', '.*' for '(.*)*'), and make alternatives under a repeat "
                    "exclusive.", rule=rule.key,
                ))
            elif error:
                problems.append(Problem(
                    "error", "invalid-regex",
                    f"Rule {rule.key!r} is not a valid regular expression: {error}.",
                    hint="Escape special characters (e.g. '\\(' for a literal '('), "
                    "or fix the pattern.", rule=rule.key,
                ))
            unknown = [a for a in rule.axes if a is not None and a not in names]
            if unknown:
                problems.append(Problem(
                    "error", "unknown-axis",
                    f"Rule {rule.key!r} uses axis {unknown[0]!r}, which the mesh does not "
                    f"have; valid axis names: {list(self.axis_names)}.",
                    hint=f"Use one of {list(self.axis_names)} or None, or add axis "
                    f"{unknown[0]!r} to the mesh.", rule=rule.key,
                ))
            used = [a for a in rule.axes if a is not None]
            dupes = sorted({a for a in used if used.count(a) > 1})
            if dupes:
                problems.append(Problem(
                    "error", "duplicate-axis",
                    f"Rule {rule.key!r} {rule.axes!r} shards two dimensions over axis "
                    f"{dupes[0]!r}; a mesh axis can shard only one dimension.",
                    hint=f"Keep {dupes[0]!r} on one dimension and use None or another "
                    "axis on the others.", rule=rule.key,
                ))
        return problems

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
        from .._adapters import keras as keras_adapter

        self.refuse_errors()
        kd = keras_adapter.keras().distribution
        if devices is None:
            available = kd.list_devices()
            if len(available) < self.mesh_size:
                raise ShardvizError(
                    f"The mesh {self.mesh_dict} needs {self.mesh_size} devices, "
                    f"but only {len(available)} are available.",
                    hint=f"Call shardviz.simulate_devices({self.mesh_size}) before any JAX "
                    "operation (restart the kernel first), or shrink the mesh.",
                )
            devices = available[: self.mesh_size]
        mesh = kd.DeviceMesh(shape=self.mesh_shape, axis_names=self.axis_names, devices=devices)
        layout_map = kd.LayoutMap(mesh)
        for rule in self.rules:
            layout_map[rule.key] = tuple(rule.axes)
        return kd.ModelParallel(layout_map=layout_map, batch_dim_name=self.batch_axis)

    @classmethod
    def from_keras(cls, obj: object) -> Plan:
        """A Plan from a ``ModelParallel``, a ``DataParallel`` or a ``LayoutMap``.

        For a LayoutMap (for example one returned by a model's
        ``get_layout_map(device_mesh)``) the batch axis is the mesh's first
        axis, as ``ModelParallel`` would choose.
        """
        from .._adapters import keras as keras_adapter

        kd = keras_adapter.keras().distribution
        if isinstance(obj, kd.LayoutMap):
            mesh, items, batch = obj.device_mesh, keras_adapter.layout_map_items(obj), None
        elif isinstance(obj, kd.ModelParallel):
            layout_map = keras_adapter.model_parallel_layout_map(obj)
            items = keras_adapter.layout_map_items(layout_map)
            mesh, batch = obj.device_mesh, obj.batch_dim_name
        elif isinstance(obj, kd.DataParallel):
            mesh, items, batch = obj.device_mesh, [], obj.batch_dim_name
        else:
            raise ShardvizError(
                f"Plan.from_keras expects a keras.distribution ModelParallel, DataParallel "
                f"or LayoutMap, got {type(obj).__name__}.",
            )
        if mesh is None:
            raise ShardvizError("The LayoutMap has no device mesh; create it with LayoutMap(mesh).")
        return cls(zip(mesh.axis_names, (int(s) for s in mesh.shape)), items, batch)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with a versioned schema.

        >>> Plan({"batch": 2}, {"k": ("batch",)}).to_dict()["rules"]
        [{'key': 'k', 'axes': ['batch']}]
        """
        return {
            "format": SCHEMA,
            "version": SCHEMA_VERSION,
            "mesh": dict(self.mesh),
            "batch_axis": self.batch_axis,
            "rules": [{"key": r.key, "axes": list(r.axes)} for r in self.rules],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        """Load a plan written by :meth:`to_dict`. Nothing in it is executed;
        anything malformed gives a :class:`ShardvizError` saying what and where."""
        if not isinstance(data, Mapping):
            raise ShardvizError(f"A plan must be a JSON object, got {type(data).__name__}.")
        if data.get("format") != SCHEMA:
            raise ShardvizError(
                f"This is not a shardviz plan: 'format' is {data.get('format')!r:.60}, "
                f"expected {SCHEMA!r}.",
            )
        version = data.get("version")
        if type(version) is not int or version != SCHEMA_VERSION:
            newer = type(version) is int and version > SCHEMA_VERSION
            raise ShardvizError(
                f"Plan schema version {version!r:.40} is not supported (this shardviz reads "
                f"version {SCHEMA_VERSION}).",
                hint="Upgrade shardviz." if newer else "Re-save the plan with Plan.to_json().",
            )
        unknown = set(data) - {"format", "version", "mesh", "batch_axis", "rules"}
        if unknown:
            raise ShardvizError(
                f"Unknown plan field(s) {sorted(map(str, unknown))}.",
                hint="Known fields: format, version, mesh, batch_axis, rules.",
            )
        mesh = data.get("mesh")
        if not isinstance(mesh, Mapping):
            raise ShardvizError("The plan's 'mesh' must be an object of axis name to size.")
        if len(mesh) > MAX_AXES:
            raise ShardvizError(
                f"The plan's mesh has {len(mesh):,} axes; shardviz takes at most {MAX_AXES}.",
                hint="Is this a shardviz plan? Merge axes, or drop axes of size 1.")
        for name, size in mesh.items():
            if type(size) is not int:
                raise ShardvizError(
                    f"The plan's mesh axis {name!r:.40} has size {size!r:.40}; sizes must be "
                    "integers.")
        batch = data.get("batch_axis")
        if batch is not None and not isinstance(batch, str):
            raise ShardvizError(f"The plan's 'batch_axis' must be a string, got {batch!r:.40}.")
        rules = data.get("rules", [])
        if not isinstance(rules, list):
            raise ShardvizError("The plan's 'rules' must be a list of {key, axes} objects.")
        pairs = []
        for i, rule in enumerate(rules):
            if not isinstance(rule, Mapping) or set(rule) != {"key", "axes"}:
                raise ShardvizError(
                    f"Rule {i} of the plan must be an object with exactly 'key' and 'axes', "
                    f"got {rule!r:.80}."
                )
            if not isinstance(rule["key"], str):
                raise ShardvizError(f"Rule {i}: 'key' must be a string, got {rule['key']!r:.40}.")
            if not isinstance(rule["axes"], list) or not all(
                    a is None or isinstance(a, str) for a in rule["axes"]):
                raise ShardvizError(
                    f"Rule {i} ({rule['key']!r}): 'axes' must be a list of axis names and nulls, "
                    f"got {rule['axes']!r:.80}.")
            pairs.append((rule["key"], tuple(rule["axes"])))
        return cls(mesh, pairs, batch)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        """Load a plan from JSON text (a file's contents, not its name).

        Bytes must be UTF-8 (a byte-order mark is allowed); duplicate keys,
        non-standard numbers and deep nesting are refused.
        """
        if isinstance(text, (bytes, bytearray)):
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError as e:
                raise ShardvizError(
                    f"The plan is not UTF-8 text (byte {e.start} is "
                    f"{bytes(cast(bytes, text))[e.start]:#04x}); "  # the undecoded bytes
                    "is it a JSON file?") from None
        if not isinstance(text, str):
            raise ShardvizError(
                f"Plan.from_json expects the JSON text, got {type(text).__name__}.",
                hint="Pass the file's contents (open(path).read()), or use Plan.from_dict "
                "for a dict.")
        text = text.removeprefix("\ufeff")

        def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    raise ShardvizError(f"The plan repeats the key {key!r:.60} in one object.",
                                        hint="Keep one entry per key.")
                seen.add(key)
            return dict(pairs)

        def no_constant(name: str) -> NoReturn:
            raise ShardvizError(f"The plan holds {name}, which is not valid JSON.")

        try:
            data = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)
        except json.JSONDecodeError as e:
            raise ShardvizError(
                f"The plan is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}."
            ) from None
        except RecursionError:
            raise ShardvizError("The plan is nested too deeply to be a shardviz plan.") from None
        except ValueError as e:  # e.g. an integer too long to convert
            raise ShardvizError(f"The plan is not a valid shardviz plan: {e}.") from None
        return cls.from_dict(data)

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
        self.refuse_errors()
        if processes is not None:
            return self._to_python_multihost(processes, devices_expr)
        lines = ["import keras", "", *self._layout_lines(devices_expr)]
        lines += [
            "distribution = keras.distribution.ModelParallel(",
            f"    layout_map=layout_map, batch_dim_name={self.batch_axis!r}",
            ")",
        ]
        return "\n".join(lines)

    def _layout_lines(self, devices_expr: str | None) -> list[str]:
        """The devices, mesh and layout map of :meth:`to_python`'s code."""
        devices_expr = devices_expr or f"keras.distribution.list_devices()[:{self.mesh_size}]"
        return [
            f"devices = {devices_expr}",
            "mesh = keras.distribution.DeviceMesh(",
            f"    shape={self.mesh_shape!r}, axis_names={self.axis_names!r}, devices=devices",
            ")",
            "layout_map = keras.distribution.LayoutMap(mesh)",
            *(f"layout_map[{r.key!r}] = {tuple(r.axes)!r}" for r in self.rules),
        ]

    def _to_python_multihost(self, processes: int, devices_expr: str | None) -> str:
        """The code of :meth:`to_python` for ``processes`` hosts: one copy runs
        on every host."""
        processes = cast(int, check_processes(processes, self.mesh_size))
        lines = [
            f"# One copy of this code runs on each of the {processes} hosts.",
            "import jax",
            "import keras",
            "import numpy as np",
            "from jax.experimental import multihost_utils",
            "",
            "# The coordinator's address, the process count and this process's id come from",
            "# KERAS_DISTRIBUTION_JOB_ADDRESSES, KERAS_DISTRIBUTION_NUM_PROCESSES and",
            "# KERAS_DISTRIBUTION_PROCESS_ID (or pass them as arguments).",
            "keras.distribution.initialize()",
            f"if jax.process_count() != {processes}:",
            f"    raise RuntimeError(f'This plan is for {processes} processes; "
            "{jax.process_count()} joined.')",
            "",
            "# Every host lists the same global devices, its own among them.",
            *self._layout_lines(devices_expr),
        ]
        lines += [
            "# Each host feeds only its own rows of the batch (see local_batch), so Keras",
            "# must not shard the dataset again.",
            "distribution = keras.distribution.ModelParallel(",
            f"    layout_map=layout_map, batch_dim_name={self.batch_axis!r}, "
            "auto_shard_dataset=False",
            ")",
            "keras.distribution.set_distribution(distribution)",
            "",
            "",
            "def global_batch(local, batch_size):",
            '    """This host\'s rows (from local_batch) as one global array of batch_size rows,',
            '    laid out as Keras lays out inputs."""',
            "    shape = (batch_size,) + tuple(local.shape[1:])",
            "    layout = distribution.get_data_layout(shape).backend_layout",
            "    return jax.make_array_from_process_local_data(layout, local, shape)",
            "",
            "",
            "def local_batch(batch):",
            '    """The rows of a global batch (every host has all of it) this host feeds."""',
            "    layout = distribution.get_data_layout(batch.shape).backend_layout",
            "    mine = {d for d in jax.local_devices()}",
            "    rows = sorted({(i[0].start or 0, i[0].stop or batch.shape[0])",
            "                   for d, i in layout.devices_indices_map(batch.shape).items()",
            "                   if d in mine})",
            "    return np.concatenate([batch[a:b] for a, b in rows])",
            "",
            "",
            "def gather(outputs):",
            '    """Global outputs as NumPy on every host: each host holds only its shards."""',
            "    return multihost_utils.process_allgather(outputs, tiled=True)",
        ]
        return "\n".join(lines)

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


def _index_arg(index: object) -> int:
    import numbers

    if isinstance(index, bool) or not isinstance(index, numbers.Integral):
        raise ShardvizError(f"A rule position must be an integer, got {index!r:.40}.")
    return int(index)


def as_plan(obj: object) -> Plan:
    """Accept a Plan, a Keras distribution or LayoutMap, or a plan dict."""
    if isinstance(obj, Plan):
        return obj
    if isinstance(obj, Mapping):
        return Plan.from_dict(obj)
    return Plan.from_keras(obj)
