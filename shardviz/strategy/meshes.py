"""Mesh shapes for a device count: divisors, ``batch`` × ``model``
factorisations, every assignment of sizes to named axes, and how many there
are."""

from __future__ import annotations

import math
from collections.abc import Sequence


def factorisations(n: int) -> list[tuple[int, int]]:
    """``(batch, model)`` pairs with ``batch * model == n``.

    >>> factorisations(8)
    [(8, 1), (4, 2), (2, 4), (1, 8)]
    """
    return [(n // m, m) for m in divisors(n)]


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending, by trial division up to its square
    root.

    >>> divisors(12), divisors(1), divisors(2039)
    ([1, 2, 3, 4, 6, 12], [1], [1, 2039])
    """
    low, high = [], []
    k = 1
    while k * k <= n:
        if n % k == 0:
            low.append(k)
            if k * k != n:
                high.append(n // k)
        k += 1
    return low + high[::-1]


def spans_slices(mesh: dict[str, int], batch_axis: str | None, slices: int,
                 dcn_axes: Sequence[str] | None = None) -> bool:
    """Whether the mesh axis that spans ``slices`` slices (the first of
    ``dcn_axes``, by default the batch axis) divides among them: a mesh
    whose axis does not is no layout for that many slices.

    >>> spans_slices({"batch": 4, "model": 2}, "batch", 2), spans_slices({"batch": 1, "model": 8}, "batch", 2)
    (True, False)
    """
    if slices == 1:
        return True
    axis = (tuple(dcn_axes or ()) or (batch_axis,))[0]
    return axis is not None and mesh.get(axis, 1) % slices == 0


def mesh_count(n: int, axes: int) -> int:
    """How many assignments of sizes to ``axes`` axes have the product ``n``,
    counted from the prime factors of ``n`` without listing them.

    >>> mesh_count(8, 2), mesh_count(12, 3)
    (4, 18)
    """
    count, k, rest = 1, 2, n
    while k * k <= rest:
        e = 0
        while rest % k == 0:
            rest //= k
            e += 1
        count *= math.comb(e + axes - 1, axes - 1)
        k += 1
    if rest > 1:
        count *= axes
    return count


def mesh_shapes(axes: Sequence[str], n: int) -> list[dict[str, int]]:
    """Every assignment of sizes to ``axes`` whose product is ``n``."""
    if len(axes) == 1:
        return [{axes[0]: n}]
    out = []
    for k in divisors(n):
        out += [{axes[0]: k, **rest} for rest in mesh_shapes(axes[1:], n // k)]
    return out


def keras_mesh(mesh: dict[str, int]):
    """A Keras DeviceMesh of this shape that starts no backend (its devices
    are names): what a class's ``get_layout_map(device_mesh)`` is given."""
    from .._adapters import keras as keras_adapter

    n = math.prod(mesh.values())
    return keras_adapter.device_mesh(tuple(mesh.values()), tuple(mesh),
                                     [f"cpu:{i}" for i in range(n)])
