"""GPU nodes: compiled for the simulated CPUs, grouped into nodes of the
target's size; every figure taken from the GPU's published numbers is an
estimate.

>>> from shardviz.target import parse_target
>>> node = parse_target("h100:8", slices=2)
>>> node.label, node.plan_devices(), node.estimated
('h100:8 x 2 nodes', 16, True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from .base import Target

if TYPE_CHECKING:
    import numpy as np


class GpuNodes(Target):
    """Nodes of ``chips_per_slice`` GPUs joined by NVLink, several nodes by
    InfiniBand."""

    slice_word: ClassVar[str] = "nodes"
    chip_word: ClassVar[str] = "GPUs"
    estimated: ClassVar[bool] = True

    def mesh_devices(self, axis_names: tuple[str, ...], shape: tuple[int, ...],
                     dcn_axes: tuple[str, ...]) -> np.ndarray | None:
        self.check_mesh_size(axis_names, shape, dcn_axes)
        return None  # the simulated CPUs stand in for the GPUs

    def slice_of_positions(self, axis_names: tuple[str, ...], shape: tuple[int, ...],
                           dcn_axes: tuple[str, ...],
                           devices: np.ndarray | None) -> tuple[int, ...]:
        import numpy as np

        if self.slices == 1:
            return (0,) * int(np.prod(shape))
        # The dcn axis's outer coordinate picks the node.
        axis = axis_names.index(dcn_axes[0])
        per = shape[axis] // self.slices
        return tuple(int(idx[axis]) // per for idx in np.ndindex(shape))
