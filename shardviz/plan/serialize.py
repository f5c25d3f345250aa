"""The saved form of a plan: a versioned dict, and JSON text.

:data:`SCHEMA` and :data:`SCHEMA_VERSION` name the format. The functions are
the bodies of :meth:`Plan.to_dict <shardviz.plan.value.Plan.to_dict>`,
:meth:`Plan.from_dict <shardviz.plan.value.Plan.from_dict>` and
:meth:`Plan.from_json <shardviz.plan.value.Plan.from_json>`. Reading runs
nothing: every malformed field, duplicate key, non-standard number or deep
nesting gives a :class:`~shardviz.errors.ShardvizError` saying what and where.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn, cast

from ..errors import ShardvizError
from .bounds import MAX_AXES

if TYPE_CHECKING:
    from .value import Plan

SCHEMA = "shardviz.plan"
SCHEMA_VERSION = 1


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """What :meth:`Plan.to_dict <shardviz.plan.value.Plan.to_dict>` returns."""
    return {
        "format": SCHEMA,
        "version": SCHEMA_VERSION,
        "mesh": dict(plan.mesh),
        "batch_axis": plan.batch_axis,
        "rules": [{"key": r.key, "axes": list(r.axes)} for r in plan.rules],
    }


def plan_from_dict(cls: type[Plan], data: Mapping[str, Any]) -> Plan:
    """What :meth:`Plan.from_dict <shardviz.plan.value.Plan.from_dict>` returns,
    built with ``cls``."""
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


def plan_from_json(cls: type[Plan], text: str | bytes) -> Plan:
    """What :meth:`Plan.from_json <shardviz.plan.value.Plan.from_json>` returns,
    built with ``cls``."""
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
