"""The Target protocol: what every kind of target answers, so that the
rest of shardviz never asks which kind it has.

A target is some chips of one kind, as one or more slices (TPU) or nodes
(GPU), or the simulated CPU devices. Each kind lives in its own module
(:mod:`.cpu`, :mod:`.tpu`, :mod:`.gpu`) and answers: the device count a plan
is for, the devices of a mesh (and whether a mesh fits its chips), the
memory a chip's program may use, which slice each mesh position is in,
which network a collective crosses, and three facts: whether its figures
are estimates (``estimated``), whether a step time is estimated for it
(``timed``), and whether its programs can run here (``can_execute``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, ClassVar

from ..errors import ShardvizError
from .chips import Hardware

if TYPE_CHECKING:
    import numpy as np


@dataclasses.dataclass(frozen=True)
class Target:
    """A number of chips of one kind, as one or more slices (or nodes)."""

    hardware: Hardware
    topology: str | None
    """The TPU topology (``"4x4"``), or None."""
    chips_per_slice: int
    slices: int = 1

    slice_word: ClassVar[str] = "slices"
    """What its groups of chips are called: ``"slices"`` or ``"nodes"``."""
    chip_word: ClassVar[str] = "chips"
    """What its chips are called: ``"chips"`` or ``"GPUs"``."""
    estimated: ClassVar[bool] = False
    """Whether its memory and collectives come from a compiler for other
    devices than its own (the simulated CPUs), and so are estimates."""
    timed: ClassVar[bool] = True
    """Whether a step time is estimated for it (not on the simulated CPU)."""
    can_execute: ClassVar[bool] = True
    """Whether its programs can run in this process (``mode="concrete"``)."""
    compiler: ClassVar[str] = "XLA"
    """Whose memory analysis and collectives its reports show."""
    compiler_decides_fit: ClassVar[bool] = False
    """Whether its own compiler refuses a program that does not fit its
    chips, so that a program it compiled fits (the TPU compiler checks what
    is live at once, ``memory_analysis()``'s peak, which can be well under
    the sum of its parts: keras-hub's GPT-2 train step at batch 33 ran on a
    v5e chip with 16.5 GiB of buffers, 14.5 GiB at the peak). Otherwise a
    program fits when those parts fit."""

    @property
    def chips(self) -> int:
        return self.chips_per_slice * self.slices

    @property
    def name(self) -> str:
        """``"h100:8"``; a TPU kind says its topology, the CPU ``"cpu"``."""
        return f"{self.hardware.name}:{self.chips_per_slice}"

    @property
    def label(self) -> str:
        """``"v5e:4x4"``, or ``"v5e:4x4 x 2 slices"``."""
        if self.slices == 1:
            return self.name
        return f"{self.name} x {self.slices} {self.slice_word}"

    def network(self, crosses: bool) -> str:
        """The network a collective uses: between slices (nodes) if it
        ``crosses`` them, else within one."""
        return self.hardware.between if crosses else self.hardware.link

    def plan_devices(self) -> int:
        """The number of devices a plan for this target is for."""
        return self.chips

    def mesh_devices(self, axis_names: tuple[str, ...], shape: tuple[int, ...],
                     dcn_axes: tuple[str, ...]) -> np.ndarray | None:
        """The devices of a mesh of this shape on this target, in the mesh's
        shape, or None for the simulated devices.

        Raises:
            ShardvizError: when the mesh does not fit the target's chips.
        """
        return None

    def capacity_bytes(self) -> int | None:
        """The memory one chip's program may use, or None (no limit known)."""
        return self.hardware.hbm_bytes

    def slice_of_positions(self, axis_names: tuple[str, ...], shape: tuple[int, ...],
                           dcn_axes: tuple[str, ...],
                           devices: np.ndarray | None) -> tuple[int, ...]:
        """Per mesh position (flat), the slice (or node) it is in."""

        return (0,) * math.prod(shape)

    def check_mesh_size(self, axis_names: tuple[str, ...], shape: tuple[int, ...],
                        dcn_axes: tuple[str, ...]) -> None:
        """Refuse a mesh that does not hold exactly this target's chips, or a
        multi-slice mesh no axis spans."""

        size = math.prod(shape)
        if size != self.chips:
            per = (f" ({self.chips_per_slice} per {self.slice_word[:-1]} x {self.slices})"
                   if self.slices > 1 else "")
            raise ShardvizError(
                f"The mesh {dict(zip(axis_names, shape))} has {size} devices, but the target "
                f"{self.label} has {self.chips} {self.chip_word}{per}.",
                hint=f"Make the mesh's axes multiply to {self.chips}, or pick a target with "
                f"{size} {self.chip_word}.")
        if self.slices > 1:
            self.check_dcn_axes(axis_names, shape, dcn_axes)

    def check_dcn_axes(self, axis_names: tuple[str, ...], shape: tuple[int, ...],
                       dcn_axes: tuple[str, ...]) -> None:
        """Refuse a multi-slice layout the mesh cannot take: one mesh axis spans
        the slices (by default the batch axis), and its size is a multiple of
        the number of slices."""
        what = self.slice_word
        if not dcn_axes:
            raise ShardvizError(
                f"{self.slices} {what} need a mesh axis to span them, and dcn_axes names none.",
                hint="Leave dcn_axes unset to span them with the plan's batch axis (data "
                f"parallelism over the {self.hardware.between.upper()} links), or pass "
                "dcn_axes=('axis',).")
        if len(dcn_axes) > 1:
            raise ShardvizError(f"dcn_axes={dcn_axes!r}: shardviz spans the {what} with one mesh axis.",
                                hint="Name one axis, such as dcn_axes=('batch',).")
        sizes = dict(zip(axis_names, shape))
        axis = dcn_axes[0]
        if axis not in sizes:
            raise ShardvizError(f"dcn_axes names {axis!r}, which the mesh {sizes} does not have.",
                                hint=f"Name one of {list(sizes)}.")
        if sizes[axis] % self.slices:
            raise ShardvizError(
                f"The mesh axis {axis!r} of size {sizes[axis]} spans the {self.slices} {what}, "
                "but does not divide among them.",
                hint=f"Make {axis!r} a multiple of {self.slices}.")
