"""TPU slices: the chips of a topology as libtpu describes them (no TPU
needed), compiled for by the TPU compiler, whose memory, collectives and
capacity are its own. Their programs do not run here.

>>> from shardviz.target import parse_target
>>> t = parse_target("v5e:4x4")
>>> t.label, t.chips, t.estimated, t.can_execute
('v5e:4x4', 16, False, False)
"""

from __future__ import annotations

import functools
import os
import re
from typing import TYPE_CHECKING, ClassVar

from ..devices import no_libtpu, quiet_stderr, quiet_tpu_runtime
from ..errors import ShardvizError
from .base import Target
from .chips import HARDWARE

if TYPE_CHECKING:
    import numpy as np


class TpuSlices(Target):
    """``slices`` TPU slices of one topology, joined by DCN."""

    can_execute: ClassVar[bool] = False
    compiler: ClassVar[str] = "the TPU compiler"
    compiler_decides_fit: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return f"{self.hardware.name}:{self.topology}"

    def mesh_devices(self, axis_names: tuple[str, ...], shape: tuple[int, ...],
                     dcn_axes: tuple[str, ...]) -> np.ndarray | None:
        return target_device_array(self, axis_names, shape, dcn_axes)

    def capacity_bytes(self) -> int | None:
        """What the TPU compiler allows a chip (its own figure, below the
        chip's HBM), so that shardviz's verdict and the compiler's agree."""
        usable = tpu_usable_bytes(self.hardware.name, str(self.topology))
        return usable if usable is not None else self.hardware.hbm_bytes

    def slice_of_positions(self, axis_names: tuple[str, ...], shape: tuple[int, ...],
                           dcn_axes: tuple[str, ...],
                           devices: np.ndarray | None) -> tuple[int, ...]:
        if self.slices == 1 or devices is None:
            return super().slice_of_positions(axis_names, shape, dcn_axes, devices)
        return tuple(int(getattr(d, "slice_index", 0) or 0) for d in devices.flat)


@functools.lru_cache(maxsize=32)
def tpu_topology_devices(chip: str, topology: str, slices: int = 1) -> tuple:
    """The devices of a TPU topology (``"v5e"``, ``"4x4"``), described by
    libtpu with no TPU present: real ``TpuDevice``s that the TPU compiler
    compiles for. Each carries ``slice_index`` when ``slices > 1``.

    Raises:
        ShardvizError: when libtpu is missing, or rejects the topology.
    """
    try:
        from jax.experimental import topologies
    except ImportError as e:  # pragma: no cover - every supported jax has it
        raise ShardvizError(f"This JAX has no topology API ({e}).",
                            hint="Install jax >= 0.10.") from None
    name = f"{chip}:{topology}"
    quiet_tpu_runtime()
    # libtpu guards real chips with a machine-wide lock file, so that one
    # process owns them. shardviz only compiles for a described topology and
    # never touches a chip, so two notebooks (or test workers) may both plan.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    # A megacore chip is one JAX device; libtpu's default host is 2x2 chips.
    hardware = HARDWARE.get(chip)
    megacore = hardware is not None and hardware.megacore
    config: dict[str, object] = {"chip_config_name": "megacore"} if megacore else {}
    if hardware is not None and topology in hardware.one_host_topologies:
        config["chips_per_host_bounds"] = tuple(int(d) for d in topology.split("x")) + (1,)
    try:
        with quiet_stderr():
            try:
                description = topologies.get_topology_desc(
                    platform="tpu", topology_name=name, num_slices=slices, **config)
            except Exception as first:
                # Another slice smaller than libtpu's default host (2x2x1), asked
                # for directly: one host holds it all.
                if "chips_per_host_bounds" not in str(first) or "chips_per_host_bounds" in config:
                    raise
                dims = [int(d) for d in topology.split("x")] + [1, 1]
                description = topologies.get_topology_desc(
                    platform="tpu", topology_name=name, num_slices=slices,
                    chips_per_host_bounds=tuple(dims[:3]),
                    **{k: v for k, v in config.items() if k != "chips_per_host_bounds"})
    except Exception as e:
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if no_libtpu():
            raise ShardvizError(
                f"TPU target {name!r} needs libtpu, the TPU compiler, and it is not installed "
                f"or does not load here ({text[:200]}).",
                hint='Install it with `pip install "shardviz[tpu]"` (Linux x86_64; about 680 '
                "MB), or plan for target='cpu' or a GPU target.") from None
        raise ShardvizError(f"libtpu rejects the topology {name!r}: {text[:300]}",
                            hint="Use a topology that tiles the chip's hosts, such as "
                            f"'{chip}:4x4'; see shardviz.targets().") from None
    return tuple(description.devices)


def target_device_array(target: TpuSlices, axis_names: tuple[str, ...],
                        shape: tuple[int, ...], dcn_axes: tuple[str, ...]) -> np.ndarray:
    """The target's TPU devices laid out in the mesh's shape, in the order
    the interconnect favours (``mesh_utils.create_device_mesh``, or
    ``create_hybrid_device_mesh`` over several slices, with ``dcn_axes``
    spanning the slices).

    Raises:
        ShardvizError: when the mesh does not fit the target's chips.
    """
    import numpy as np
    from jax.experimental import mesh_utils

    target.check_mesh_size(axis_names, shape, dcn_axes)
    devices = tpu_topology_devices(target.hardware.name, target.topology, target.slices)
    try:
        if target.slices == 1:
            array = mesh_utils.create_device_mesh(shape, list(devices),
                                                  allow_split_physical_axes=True)
        else:
            dcn_shape = tuple(target.slices if n == dcn_axes[0] else 1 for n in axis_names)
            ici_shape = tuple(s // d for s, d in zip(shape, dcn_shape))
            array = mesh_utils.create_hybrid_device_mesh(ici_shape, dcn_shape, list(devices),
                                                         allow_split_physical_axes=True)
    except Exception as e:
        raise ShardvizError(
            f"JAX cannot lay the mesh {dict(zip(axis_names, shape))} over {target.label}: "
            f"{str(e).splitlines()[0][:300]}",
            hint="Choose axis sizes that are products of the topology's dims.") from None
    return np.asarray(array).reshape(shape)


_AVAILABLE = re.compile(r"exceeds available HBM \(([\d.]+)([KMGT]?)\)")


@functools.lru_cache(maxsize=16)
def tpu_usable_bytes(chip: str, topology: str) -> int | None:
    """The memory the TPU compiler lets one chip's program use (less than the
    chip's HBM: the runtime keeps some), read from the compiler's own
    refusal of a program too large for any chip. None if it says nothing.

    It is the capacity the compiler's out-of-memory check uses, so shardviz's
    fit verdict and the compiler's agree.
    """
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    device = tpu_topology_devices(chip, topology)[0]
    mesh = Mesh(np.array([device]), ("x",))
    huge = jax.ShapeDtypeStruct((2**20, 2**20, 2**8), "float32",
                                sharding=NamedSharding(mesh, PartitionSpec()))
    try:
        with quiet_stderr():
            jax.jit(lambda a: a * 2).lower(huge).compile()
    except Exception as e:
        m = _AVAILABLE.search(str(e))
        if m:
            return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2) or " "))
    return None
