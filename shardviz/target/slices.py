"""The TPU slices Cloud TPU sells, by topology and by product name.

>>> from shardviz.target.chips import HARDWARE
>>> PRODUCT_NAMES["v5litepod-8"], sold(HARDWARE["v5e"], "3x3")
('v5e:2x4', False)
"""

from __future__ import annotations

from .chips import Hardware

_SQUARE_SLICES = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8",
                  128: "8x16", 256: "16x16"}
PRODUCT_NAMES: dict[str, str] = {
    **{f"v5litepod-{n}": f"v5e:{t}" for n, t in _SQUARE_SLICES.items()},
    **{f"v6e-{n}": f"v6e:{t}" for n, t in _SQUARE_SLICES.items()},
    # v5p and v4 products count TensorCores, two per chip.
    **{f"v5p-{2 * n}": f"v5p:{t}" for n, t in {4: "2x2x1", 8: "2x2x2", 16: "2x2x4",
                                               32: "2x4x4", 64: "4x4x4"}.items()},
    **{f"v4-{2 * n}": f"v4:{t}" for n, t in {4: "2x2x1", 8: "2x2x2", 16: "2x2x4",
                                             32: "2x4x4", 64: "4x4x4"}.items()},
}
"""Cloud TPU's product names of the published single-host and multi-host
slices (``v5litepod-1``, ``v6e-8``, ``v5p-8``), to their topologies
(``CLOUD_TPU`` v5e, v6e, v5p and v4 pages). A target may be named either way."""


_CUBE_SMALL = ("2x2x1", "2x2x2", "2x2x4", "2x4x4")


def sold(hardware: Hardware, shape: str) -> bool:
    """Whether Cloud TPU sells a slice of ``hardware`` with this topology:
    for v5e and v6e the eight square-ish slices 1x1 to 16x16; for v4 and
    v5p the four slices smaller than a cube and any 3-D shape whose dims are
    all multiples of 4 (whole cubes), up to the largest slice (``CLOUD_TPU``
    v5e, v6e, v5p and v4 configuration pages).

    >>> from shardviz.target.chips import HARDWARE
    >>> sold(HARDWARE["v5e"], "2x4"), sold(HARDWARE["v5e"], "3x3")
    (True, False)
    >>> sold(HARDWARE["v5p"], "4x4x8"), sold(HARDWARE["v5p"], "2x2x3")
    (True, False)
    """
    if hardware.family != "tpu":
        return True
    if hardware.topology_rank == 2:
        return shape in _SQUARE_SLICES.values()
    dims = [int(d) for d in shape.split("x")]
    return shape in _CUBE_SMALL or all(d % 4 == 0 for d in dims)


def sold_topologies(hardware: Hardware) -> list[str]:
    """The topologies to suggest for ``hardware``, smallest first."""
    if hardware.topology_rank == 2:
        return list(_SQUARE_SLICES.values())
    return [*_CUBE_SMALL, "4x4x4", "4x4x8", "4x8x8", "8x8x8"]
