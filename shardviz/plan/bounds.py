"""The limits shardviz sets on a mesh, and the checks of plain values against them.

The bounds (:data:`MAX_MESH_SIZE`, :data:`MAX_AXES`, :data:`MAX_AXIS_SIZE`),
what an axis name may be (:data:`AXIS_NAME`) and the units of a size
(:data:`SIZE_UNITS`); the functions that turn what a user typed into an int,
a byte count, a device count, an axis name or a process count, or refuse it
with a :class:`~shardviz.errors.ShardvizError` that says what to change; and
the normalising of a mesh argument into ``(name, size)`` pairs.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping
from typing import Any

from ..errors import ShardvizError

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


def normalize_mesh(mesh: Any) -> tuple[tuple[str, int], ...]:
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



def check_processes(processes: object, mesh_size: int) -> int | None:
    """``processes`` as an int that divides the mesh, or None.

    >>> check_processes(2, 8), check_processes(None, 8)
    (2, None)
    """

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
