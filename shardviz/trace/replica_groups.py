"""Replica groups: the devices an HLO collective runs over, and the mesh axes they span.

Device groups come in three spellings, all turned into explicit groups of
mesh positions, then into the mesh axes they run over:

* explicit lists ``{{0,1,2,3},{4,5,6,7}}``;
* iota ``[2,4]<=[8]`` or ``[4,2]<=[2,4]T(1,0)``;
* mesh axes ``mesh['axis_0'=2,'axis_1'=4] {'axis_0'}``.

>>> groups = parse_replica_groups("[2,4]<=[8]")
>>> groups
[[0, 1, 2, 3], [4, 5, 6, 7]]
>>> group_axes(groups, ("batch", "model"), (2, 4))
(('model',), True)
>>> parse_replica_groups("[4,2]<=[2,4]T(1,0)")
[[0, 4], [1, 5], [2, 6], [3, 7]]
"""

from __future__ import annotations

import math
import re

import numpy as np


def _iota_groups(text: str) -> list[list[int]]:
    m = re.fullmatch(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", text.strip())
    if not m:
        raise ValueError(f"unrecognised iota replica groups {text!r}")
    out_dims = [int(x) for x in m.group(1).split(",")]
    reshape = [int(x) for x in m.group(2).split(",")]
    ids = np.arange(math.prod(reshape)).reshape(reshape)
    if m.group(3):
        ids = ids.transpose([int(x) for x in m.group(3).split(",")])
    ids = ids.reshape(out_dims[0], -1) if len(out_dims) == 2 else ids.reshape(1, -1)
    return ids.tolist()


def _mesh_groups(text: str) -> list[list[int]]:
    m = re.fullmatch(
        r"mesh\[(?P<axes>[^\]]*)\](?:,\s*device_ids=\((?P<ids>.*?)\))?\s*\{(?P<group>[^}]*)\}",
        text.strip(),
    )
    if not m:
        raise ValueError(f"unrecognised mesh replica groups {text!r}")
    names, sizes = [], []
    for part in m.group("axes").split(","):
        name, size = part.rsplit("=", 1)
        names.append(name.strip().strip("'\""))
        sizes.append(int(size))
    n = math.prod(sizes)
    ids = _device_ids(m.group("ids"), n)
    # Factor each mesh axis into (major, sub, minor) pieces as sub-axes require.
    listed = []
    for ref in re.findall(r"[^,]+", m.group("group")):
        ref = ref.strip()
        if not ref:
            continue
        sub = re.fullmatch(r"['\"]?(?P<name>[^'\":]+)['\"]?(?::\((?P<pre>\d+)\)(?P<size>\d+))?", ref)
        if sub is None:
            raise ValueError(f"unrecognised mesh replica group axis {ref!r}")
        axis = names.index(sub.group("name"))
        pre = int(sub.group("pre") or 1)
        size = int(sub.group("size") or sizes[axis])
        listed.append((axis, pre, size))
    coords = np.array(np.unravel_index(np.arange(n), sizes)).T  # position -> coords
    keys: list[tuple[int, ...]] = []
    for pos in range(n):
        key: list[int] = []
        for axis, full in enumerate(sizes):
            c = int(coords[pos][axis])
            refs = [(p, s) for a, p, s in listed if a == axis]
            if not refs:
                key.append(c)
                continue
            # Keep the parts of the coordinate that no listed sub-axis covers.
            varying = 0
            for p, s in refs:
                minor = full // (p * s)
                varying += ((c // minor) % s) * minor
            key.append(c - varying)
        keys.append(tuple(key))
    groups: dict = {}
    for pos, group_key in enumerate(keys):
        groups.setdefault(group_key, []).append(int(ids[pos]))
    return list(groups.values())


def _device_ids(text: str | None, n: int) -> np.ndarray:
    """A mesh's device ids: iota when absent, an iota ``[dims]T(perm)``, or a list.

    >>> _device_ids("[2,4]T(1,0)", 8).tolist()
    [0, 4, 1, 5, 2, 6, 3, 7]
    """
    if not text:
        return np.arange(n)
    numbers = [int(x) for x in re.findall(r"\d+", text.split("T(")[0])]
    iota = re.fullmatch(r"\s*\[([\d,\s]+)\](?:T\(([\d,\s]+)\))?\s*", text)
    if iota and (iota.group(2) or len(numbers) != n):
        dims = [int(x) for x in iota.group(1).split(",")]
        ids = np.arange(math.prod(dims)).reshape(dims)
        if iota.group(2):
            ids = ids.transpose([int(x) for x in iota.group(2).split(",")])
        return ids.reshape(-1)
    return np.array([int(x) for x in re.findall(r"\d+", text)])


def parse_replica_groups(text: str) -> list[list[int]]:
    """Explicit groups of device positions for any of XLA's three spellings.

    >>> parse_replica_groups("{{0,2},{1,3}}")
    [[0, 2], [1, 3]]
    >>> parse_replica_groups("mesh['axis_0'=2,'axis_1'=4] {'axis_0'}")
    [[0, 4], [1, 5], [2, 6], [3, 7]]
    """
    text = text.strip()
    if text.startswith("mesh"):
        return _mesh_groups(text)
    if text.startswith("["):
        return _iota_groups(text)
    inner = re.findall(r"\{([\d,\s]*)\}", text)
    return [[int(x) for x in g.split(",") if x.strip()] for g in inner if g.strip()]


def group_axes(groups, axis_names, mesh_shape) -> tuple[tuple, bool]:
    """``(axes, complete)``: the mesh axes along which each group's members
    differ, and whether the groups are exactly the sub-meshes those axes span.

    >>> group_axes([[0, 4], [1, 5], [2, 6], [3, 7]], ("batch", "model"), (2, 4))
    (('batch',), True)
    >>> group_axes([[0, 1, 2, 3, 4, 5, 6, 7]], ("batch", "model"), (2, 4))
    (('batch', 'model'), True)
    >>> group_axes([[0, 1], [2, 3], [4, 5], [6, 7]], ("batch", "model"), (2, 4))
    (('model',), False)
    """
    if not groups:
        return (), True
    n = math.prod(mesh_shape)
    members = [p for g in groups for p in g]
    if any(p >= n for p in members):
        return (), False
    varying = set()
    for group in groups:
        coords = np.array(np.unravel_index(group, mesh_shape)).T
        for axis in range(len(mesh_shape)):
            if len(set(coords[:, axis])) > 1:
                varying.add(axis)
    expected = math.prod(mesh_shape[a] for a in varying)
    complete = all(len(g) == expected for g in groups)
    return tuple(axis_names[a] for a in sorted(varying)), complete


def permute_axes(pairs, axis_names, mesh_shape):
    varying = set()
    for src, dst in pairs:
        a = np.unravel_index(src, mesh_shape)
        b = np.unravel_index(dst, mesh_shape)
        varying.update(i for i in range(len(mesh_shape)) if a[i] != b[i])
    return tuple(axis_names[i] for i in sorted(varying))
