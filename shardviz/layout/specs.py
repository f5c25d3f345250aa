"""Specs read back from shardings, and how many devices a spec entry splits a dim over.

:func:`spec_from_sharding` reads a ``NamedSharding``'s spec;
:func:`spec_from_hlo` decodes XLA's HloSharding, which may split a dim over
part of a mesh axis (a :class:`SubAxis`). :func:`entry_size` and
:func:`uneven_dims` measure a spec's entries against a shape.

>>> spec_from_sharding(None, 2), entry_size(("batch", "model"), {"batch": 2, "model": 4})
((None, None), 8)
"""

from __future__ import annotations

import math

import numpy as np


def spec_from_sharding(sharding, ndim: int) -> tuple:
    """A padded spec tuple for a ``NamedSharding`` (or a sharding JAX can
    describe on a named mesh). Dims sharded over several axes give a tuple."""
    spec = tuple(getattr(sharding, "spec", ()))
    spec = spec + (None,) * (ndim - len(spec))
    out = []
    for entry in spec[:ndim]:
        if isinstance(entry, (tuple, list)):
            entry = tuple(entry)
            entry = entry[0] if len(entry) == 1 else (entry or None)
        out.append(entry)
    return tuple(out)


class SubAxis(str):
    """A part of a mesh axis, where XLA split a dim over some of its devices.

    It is written as XLA and Shardy write sub-axes: ``'model:(1)2'`` is the
    major half of a 4-device axis ``model`` (``pre`` is the product of the
    sub-axis sizes before it within the axis, ``size`` its own size), and
    ``'model:(2)2'`` the minor half.

    >>> s = SubAxis("model", 1, 2, 4)
    >>> s, s.axis, s.size, s.describe()
    ('model:(1)2', 'model', 2, "2 of the 4 'model' devices")
    """

    axis: str
    pre: int
    size: int
    axis_size: int

    def __new__(cls, axis: str, pre: int, size: int, axis_size: int):
        obj = super().__new__(cls, f"{axis}:({pre}){size}")
        obj.axis, obj.pre, obj.size, obj.axis_size = axis, pre, size, axis_size
        return obj

    def __reduce__(self):
        return (SubAxis, (self.axis, self.pre, self.size, self.axis_size))

    def describe(self) -> str:
        return f"{self.size} of the {self.axis_size} {self.axis!r} devices"


def uneven_dims(shape, spec, mesh_sizes) -> list[tuple[int, int, object, int]]:
    """``(dim, size, axis entry, axes size)`` for each dim of ``spec`` whose
    mesh axes do not divide it (axes missing from the mesh are ignored).

    >>> uneven_dims((6, 8), ("model", None), {"model": 4})
    [(0, 6, 'model', 4)]
    """
    out = []
    for d, (n, entry) in enumerate(zip(shape, spec)):
        names = entry if isinstance(entry, tuple) else ((entry,) if entry else ())
        if names and all(getattr(a, "axis", a) in mesh_sizes for a in names):
            k = entry_size(entry, mesh_sizes)
            if n % k:
                out.append((d, n, entry, k))
    return out


def entry_size(entry, mesh_sizes) -> int:
    """The number of devices a spec entry splits a dim over (1 for None).

    >>> entry_size(("batch", SubAxis("model", 1, 2, 4)), {"batch": 2, "model": 4})
    4
    """
    if entry is None:
        return 1
    if isinstance(entry, SubAxis):
        return entry.size
    if isinstance(entry, tuple):
        return math.prod(entry_size(e, mesh_sizes) for e in entry)
    return mesh_sizes[entry]


def _flat_factors(seq) -> list[tuple[int, int]] | None:
    """``(size, stride)`` factors, minor first, of a mixed-radix sequence of
    flat mesh positions that starts at 0."""
    seq = np.asarray(seq, dtype=np.int64)
    out = []
    while seq.size > 1:
        stride = int(seq[1])
        if stride <= 0:
            return None
        i = 1
        while i < seq.size and seq[i] == i * stride:
            i += 1
        if seq.size % i:
            return None
        out.append((i, stride))
        seq = seq[::i]
    return out


def _mesh_factors(size, stride, mesh_shape) -> list[tuple[int, int, int]] | None:
    """``(axis, within-axis stride, size)`` pieces, minor first, of one flat
    ``(size, stride)`` factor: a factor may span the rest of one axis and
    part of the next."""
    strides = [math.prod(mesh_shape[a + 1:]) for a in range(len(mesh_shape))]
    out = []
    while size > 1:
        axis = next((a for a in range(len(mesh_shape))
                     if strides[a] <= stride < strides[a] * mesh_shape[a]
                     and stride % strides[a] == 0), None)
        if axis is None:
            return None
        within = stride // strides[axis]
        if mesh_shape[axis] % within:
            return None
        room = mesh_shape[axis] // within
        piece = min(size, room)
        if size % piece or room % piece:
            return None
        out.append((axis, within, piece))
        size //= piece
        stride = strides[axis] * mesh_shape[axis]
    return out


def spec_from_hlo(hlo_sharding, axis_names, mesh_shape, device_ids, ndim: int):
    """``(spec, replicated_over)`` for XLA's HloSharding of a rank-``ndim``
    value on a mesh, with :class:`SubAxis` entries where a dim is split over
    part of an axis; None if the sharding is not a product of (sub-)axes.

    ``device_ids`` is the mesh's array of device ids. The decoding is checked:
    every device's tile must be the one its mesh coordinates give.
    """
    mesh_shape = tuple(int(s) for s in mesh_shape)
    axis_names = tuple(axis_names)
    if hlo_sharding.is_replicated():
        return (None,) * ndim, axis_names
    if not hlo_sharding.is_tiled() or hlo_sharding.tuple_elements():
        return None
    dims = [int(d) for d in hlo_sharding.tile_assignment_dimensions()]
    subgroups = list(hlo_sharding.subgroup_types())
    if subgroups:
        if any("REPLICATED" not in str(t) for t in subgroups):
            return None
        trailing = len(subgroups)
    else:
        trailing = 1 if hlo_sharding.replicate_on_last_tile_dim() else 0
    if len(dims) - trailing != ndim:
        return None
    position = {int(d): i for i, d in enumerate(np.asarray(device_ids).flat)}
    try:
        tiles = np.array([position[int(d)] for d in hlo_sharding.tile_assignment_devices()],
                         dtype=np.int64).reshape(dims)
    except (KeyError, ValueError):
        return None
    per_dim = []
    for j, n in enumerate(dims):
        index: list[int | slice] = [0] * len(dims)
        index[j] = slice(None)
        seq = tiles[tuple(index)] - tiles.flat[0]
        flat = _flat_factors(seq) if n > 1 else []
        if flat is None:
            return None
        pieces = []
        for size, stride in flat:  # minor first
            mesh_pieces = _mesh_factors(size, stride, mesh_shape)
            if mesh_pieces is None:
                return None
            pieces += mesh_pieces
        pieces.reverse()  # major first
        merged: list[tuple[int, int, int]] = []
        for axis, within, size in pieces:
            if merged and merged[-1][0] == axis and merged[-1][1] == within * size:
                merged[-1] = (axis, within, merged[-1][2] * size)
            else:
                merged.append((axis, within, size))
        per_dim.append(merged)
    # Check: each device's tile index equals the one its coordinates give.
    coords = np.array(np.unravel_index(np.arange(math.prod(mesh_shape)), mesh_shape)).T
    expected = np.zeros((len(coords), len(dims)), dtype=np.int64)
    for j, pieces in enumerate(per_dim):
        for axis, within, size in pieces:
            expected[:, j] = expected[:, j] * size + (coords[:, axis] // within) % size
    actual = np.zeros_like(expected)
    for tile_index in np.ndindex(*dims):
        actual[tiles[tile_index]] = tile_index
    if not np.array_equal(expected, actual):
        return None

    def entry(pieces):
        names = []
        for axis, within, size in pieces:
            full = mesh_shape[axis]
            if within == 1 and size == full:
                names.append(axis_names[axis])
            else:
                names.append(SubAxis(axis_names[axis], full // (within * size), size, full))
        if not names:
            return None
        return names[0] if len(names) == 1 else tuple(names)

    spec = tuple(entry(p) for p in per_dim[:ndim])
    replicated = []
    for pieces in per_dim[ndim:]:
        e = entry(pieces)
        replicated += [] if e is None else list(e) if isinstance(e, tuple) else [e]
    used = {axis for pieces in per_dim for axis, _, _ in pieces}
    replicated += [name for a, name in enumerate(axis_names) if a not in used]
    return spec, tuple(replicated)
