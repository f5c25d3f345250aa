"""Targets: the hardware a plan is meant for, with its published figures.

A target names a chip and how many of them: ``"v5e:4x4"`` (a TPU v5e slice
of 16 chips, a 4x4 topology), ``"v5p:2x2x4"``, ``"h100:8"`` (one node of 8
H100 GPUs), or ``"cpu"`` (the simulated CPU devices, the default). Several
TPU slices (joined by the data-centre network, DCN) or GPU nodes (joined by
InfiniBand) are asked for with ``slices=``. Product names (``v5litepod-8``)
name slices too.

Every kind of target answers the :class:`~.base.Target` protocol, in its own
module: :mod:`.cpu`, :mod:`.tpu`, :mod:`.gpu`. The figures of every chip,
each with its source, are in :mod:`.chips`; the slices sold, in
:mod:`.slices`.

>>> t = parse_target("v5e:4x4")
>>> t.name, t.chips, t.hardware.family
('v5e:4x4', 16, 'tpu')
>>> parse_target("h100:8", slices=2).chips
16
>>> parse_target("cpu").hardware.family
'cpu'
"""

from __future__ import annotations

import dataclasses
import math
import re

from ..errors import ShardvizError
from .base import Target
from .calibration import MEASURED_STEPS, Expected, MeasuredStep, checked_against, expected_step
from .chips import (
    ASSUMED_HOP_LATENCY,
    HARDWARE,
    Hardware,
    collective_seconds,
)
from .cpu import SimulatedCpu
from .gpu import GpuNodes
from .slices import PRODUCT_NAMES, sold, sold_topologies
from .table import targets
from .tpu import TpuSlices

__all__ = ["ASSUMED_HOP_LATENCY", "HARDWARE", "MEASURED_STEPS", "PRODUCT_NAMES", "Expected",
           "GpuNodes", "Hardware", "MeasuredStep", "SimulatedCpu", "Target", "TpuSlices",
           "checked_against", "collective_seconds", "expected_step", "family_slices",
           "parse_target", "sold", "sold_topologies", "targets"]


def family_slices(name: str) -> list[str] | None:
    """The slices sold of the chip family ``name`` (``"v5e"``), smallest
    first, as target names; None when ``name`` is no chip family.

    >>> family_slices("v5e")[:3], family_slices("v5e:2x4")
    (['v5e:1x1', 'v5e:2x2', 'v5e:2x4'], None)

    Raises:
        ShardvizError: for a chip that is not sold in slices (a GPU).
    """
    family = name.strip().lower() if isinstance(name, str) else None
    hardware = HARDWARE.get(family) if family else None
    if hardware is None:
        return None
    if hardware.topology_rank < 2:
        raise ShardvizError(f"{name!r} is not sold in slices; a smallest slice is for TPU chips.",
                            hint="Give a TPU family: " + ", ".join(
                                h.name for h in HARDWARE.values() if h.topology_rank >= 2) + ".")
    return [f"{hardware.name}:{t}" for t in sold_topologies(hardware)]


def parse_target(target: str | Target | None, slices: int = 1) -> Target:
    """A :class:`Target` from its name.

    Raises:
        ShardvizError: for an unknown chip or topology, or bad ``slices``.
    """
    if isinstance(target, Target):
        return target if slices == 1 or target.slices == slices else dataclasses.replace(
            target, slices=_check_slices(slices, target.hardware))
    text = "cpu" if target is None else target
    if not isinstance(text, str):
        raise ShardvizError(f"A target must be a name such as 'v5e:4x4', got "
                            f"{type(text).__name__} {text!r:.60}.", hint=_known_hint())
    if re.search(r"\s", text.strip()):
        joined = "".join(text.split())[:30]
        raise ShardvizError(f"The target {text!r:.60} has a space in it; a target name has "
                            "none.", hint=f"Write it without spaces, e.g. {joined!r}.")
    text = PRODUCT_NAMES.get(text.strip().lower(), text)
    name, _, shape = text.strip().lower().partition(":")
    hardware = HARDWARE.get(name)
    if hardware is None:
        raise ShardvizError(f"Unknown target {text!r}.", hint=_known_hint())
    count = _check_slices(slices, hardware)
    if hardware.family == "cpu":
        if shape or count != 1:
            raise ShardvizError(f"The target 'cpu' takes no topology and no slices, got {text!r}"
                                f" with slices={slices}.",
                                hint="Use target='cpu' alone; the mesh sets the device count.")
        return SimulatedCpu(hardware, None, 0, 1)
    if hardware.family == "gpu":
        if not re.fullmatch(r"\d+", shape or ""):
            raise ShardvizError(
                f"A GPU target names the GPUs of one node, such as '{name}:8'; got {text!r}.",
                hint=f"Use '{name}:8' for one node of 8, and slices=N for N nodes.")
        chips = int(shape)
        if not 1 <= chips <= (hardware.max_chips or 8):
            raise ShardvizError(f"A {name} node holds 1 to {hardware.max_chips} GPUs, not {chips}.",
                                hint=f"Use '{name}:8' and slices=N for more GPUs.")
        return GpuNodes(hardware, None, chips, count)
    dims = shape.split("x") if shape else []
    if len(dims) != hardware.topology_rank or not all(re.fullmatch(r"[1-9]\d*", d) for d in dims):
        example = "x".join(["4"] * hardware.topology_rank)
        raise ShardvizError(
            f"A {name} topology has {hardware.topology_rank} dims, such as '{name}:{example}'; "
            f"got {text!r}.", hint=_known_hint())
    chips = math.prod(int(d) for d in dims)
    if hardware.max_chips is not None and chips > hardware.max_chips:
        raise ShardvizError(f"A {name} slice holds at most {hardware.max_chips} chips; "
                            f"{text!r} has {chips}.",
                            hint="Use slices=N for several slices joined by DCN.")
    if not sold(hardware, shape):
        offered = sold_topologies(hardware)
        bigger = next((t for t in offered if math.prod(int(d) for d in t.split("x")) >= chips),
                      offered[-1])
        more = "" if hardware.topology_rank == 2 else ", and larger shapes of whole 4x4x4 cubes"
        raise ShardvizError(
            f"No {name} slice has the topology {shape!r}: Cloud TPU sells {name} slices of "
            f"{', '.join(offered)}{more}.",
            hint=f"Plan for one of them, e.g. '{name}:{bigger}' (the smallest that holds "
            f"{chips} chips), and give the mesh that many devices; or use slices=N.")
    return TpuSlices(hardware, shape, chips, count)


def _check_slices(slices: object, hardware: Hardware) -> int:
    if isinstance(slices, bool) or not isinstance(slices, int) or slices < 1:
        raise ShardvizError(f"slices must be a whole number of at least 1, got {slices!r}.",
                            hint="Use slices=1 for one slice (or node), 2 for two, ...")
    if slices > 64:
        raise ShardvizError(f"slices={slices} is more than shardviz plans for (64).",
                            hint="Plan with fewer slices.")
    return slices


def _known_hint() -> str:
    names = [f"{h.name}:{'x'.join(['4'] * h.topology_rank)}" if h.family == "tpu"
             else f"{h.name}:8" if h.family == "gpu" else "cpu" for h in HARDWARE.values()]
    return "Known targets: " + ", ".join(names) + " (see shardviz.targets())."
