"""Targets: the hardware a plan is meant for, with its published figures.

A target names a chip and how many of them: ``"v5e:4x4"`` (a TPU v5e slice
of 16 chips, a 4x4 topology), ``"v5p:2x2x4"``, ``"h100:8"`` (one node of 8
H100 GPUs), or ``"cpu"`` (the simulated CPU devices, the default). Several
TPU slices (joined by the data-centre network, DCN) or GPU nodes (joined by
InfiniBand) are asked for with ``slices=``.

Every figure carries its source. Where a figure is derived (a per-host NIC
shared by the chips of the host, say) the source says how. Times computed
from these figures are estimates, and shardviz labels them so everywhere.

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
from typing import TYPE_CHECKING

from .errors import ShardvizError

if TYPE_CHECKING:
    import pandas as pd

CLOUD_TPU = "https://docs.cloud.google.com/tpu/docs/"
SCALING_BOOK = "https://jax-ml.github.io/scaling-book/"
DGX_BASEPOD = ("https://docs.nvidia.com/dgx-basepod/reference-architecture-infrastructure-"
               "foundation-enterprise-ai/latest/core-components.html")
DGX_B200 = "https://docs.nvidia.com/dgx/dgxb200-user-guide/introduction-to-dgxb200.html"
MLPERF_NVIDIA = ("https://github.com/mlcommons/inference_results_v4.1/tree/main/closed/NVIDIA/"
                 "systems")

ASSUMED_HOP_LATENCY = 1e-6
"""Seconds per hop of a collective, an assumption: no vendor publishes one.
It is the figure a worked exercise of the scaling book assumes for a TPU
ICI hop (scaling-book ``tpus.md``); shardviz uses it as the latency floor
of every link."""


@dataclasses.dataclass(frozen=True)
class Hardware:
    """One kind of chip, with its published figures (per chip, bytes and
    seconds; bandwidths one way)."""

    name: str
    """What a target calls it: ``"v5e"``, ``"h100"``, ``"cpu"``."""
    family: str
    """``"tpu"``, ``"gpu"`` or ``"cpu"``."""
    device_kind: str
    hbm_bytes: int | None
    hbm_bandwidth: float | None
    """Bytes per second."""
    peak_flops: float | None
    """Dense bf16 FLOP/s."""
    link: str
    """The network between chips of a slice or node: ``"ici"``,
    ``"nvlink"`` or ``"host"``."""
    link_bandwidth: float | None
    """Bytes per second per chip, one way."""
    between: str
    """The network between slices or nodes: ``"dcn"``, ``"infiniband"``
    or ``"host"``."""
    between_bandwidth: float | None
    """Bytes per second per chip, one way."""
    max_chips: int | None
    """The most chips of one slice (TPU) or node (GPU)."""
    topology_rank: int
    """Dims of a TPU topology name (2 for ``4x4``, 3 for ``2x2x4``); 1 for
    a GPU node's chip count."""
    source: str
    """Where each figure comes from."""


def _tb(gbps: float) -> float:
    """Gigabits per second in bytes per second."""
    return gbps * 1e9 / 8


HARDWARE: dict[str, Hardware] = {h.name: h for h in (
    Hardware(
        "v4", "tpu", "TPU v4", 32 * 2**30, 1200e9, 275e12, "ici", 6 * 4.5e10, "dcn", 2.5e10 / 4,
        4096, 3,
        f"{CLOUD_TPU}v4: 32 GiB HBM2, 1200 GBps, 275 TFLOPs bf16, pods of 4096 chips. ICI and DCN "
        f"are not on that page: {SCALING_BOOK}tpus/ gives 4.5e10 B/s one way per ICI link with 6 "
        "neighbours (6 x 4.5e10), and about 2.5e10 B/s of DCN per host of 4 chips."),
    Hardware(
        "v5e", "tpu", "TPU v5 lite", 16 * 2**30, 819e9, 197e12, "ici", 400e9 / 2, "dcn",
        _tb(2 * 100) / 8, 256, 2,
        f"{CLOUD_TPU}v5e: 16 GB HBM2 (GiB: the compiler itself allows 15.75 GiB), 819 GBps, "
        "197 TFLOPs bf16, ICI 400 GBps bidirectional (halved: one way), pods of 256 chips. "
        "DCN derived: 2 x 100 Gbps NICs per host of 8 chips."),
    Hardware(
        "v5p", "tpu", "TPU v5", 96 * 2**30, 2765e9, 459e12, "ici", 1200e9 / 2, "dcn", _tb(50),
        6144, 3,
        f"{CLOUD_TPU}v5p: 95 GiB HBM2e usable (the compiler itself allows 95.74 GiB: the chip "
        "holds 96 GiB), 2765 GBps, 459 TFLOPs bf16, ICI 1200 GBps "
        "bidirectional (halved: one way), DCN 50 Gbps per chip, slices up to 16x16x24."),
    Hardware(
        "v6e", "tpu", "TPU v6 lite", 32 * 2**30, 1640e9, 918e12, "ici", 800e9 / 2, "dcn",
        _tb(4 * 200) / 8, 256, 2,
        f"{CLOUD_TPU}v6e: 32 GB HBM (GiB, as for v5e), 1640 GBps, 918 TFLOPs bf16, ICI 800 GBps "
        "bidirectional (halved: one way), pods of 256 chips. DCN derived: 4 x 200 Gbps NICs per host of 8 "
        "chips."),
    Hardware(
        "h100", "gpu", "NVIDIA H100 80GB HBM3", 80 * 10**9, 3.35e12, 989e12, "nvlink", 450e9,
        "infiniband", _tb(400), 8, 1,
        f"80 GB HBM3 and 18 NVLink 4 links, 900 GB/s bidirectional (halved: one way): "
        f"{MLPERF_NVIDIA} (DGX-H100_H100-SXM-80GBx8). One 400 Gb/s ConnectX-7 per GPU: "
        f"{DGX_BASEPOD}. HBM 3.35 TB/s and 989 TFLOPs dense bf16 (half the 1979 with sparsity): "
        f"{SCALING_BOOK}gpus/ (no vendor page stored)."),
    Hardware(
        "h200", "gpu", "NVIDIA H200", 141 * 10**9, 4.8e12, 989e12, "nvlink", 450e9,
        "infiniband", _tb(400), 8, 1,
        f"141 GB HBM3e, NVLink as H100: {MLPERF_NVIDIA} (H200-SXM-141GBx8). One 400 Gb/s "
        f"ConnectX-7 per GPU: {DGX_BASEPOD}. HBM 4.8 TB/s and 989 TFLOPs dense bf16: "
        f"{SCALING_BOOK}gpus/ (no vendor page stored)."),
    Hardware(
        "b200", "gpu", "NVIDIA B200", 180 * 10**9, 8.0e12, 2.25e15, "nvlink", 1.8e12 / 2,
        "infiniband", _tb(400), 8, 1,
        f"180 GB HBM3e per GPU, NVLink 14.4 TB/s aggregate per 8 GPUs (1.8 TB/s per GPU, halved: "
        f"one way), one 400 Gb/s ConnectX-7 per GPU: {DGX_B200}. HBM 8 TB/s and 2.25 PFLOPs "
        f"dense bf16: {SCALING_BOOK}gpus/ and the HGX B200 table (36 PFLOPs per 8 GPUs with "
        "sparsity)."),
    Hardware(
        "cpu", "cpu", "cpu", None, None, None, "host", None, "host", None, None, 1,
        "The simulated CPU devices of this machine (jax_num_cpu_devices): every device shares "
        "host memory, and no time estimate applies."),
)}


@dataclasses.dataclass(frozen=True)
class ChipCheck:
    """How steps measured on a real chip compared with shardviz's step-time
    estimate (the bound row of ``Report.estimate``) for the same program."""

    hardware: str
    date: str
    program: str
    """``"train step"`` (what ``model.fit`` runs) or ``"forward pass"``
    (what ``model.predict`` runs)."""
    model: str
    low: float
    high: float
    """Measured seconds over estimated seconds, least and most."""
    records: str = "tests/data/chip/v5e-1x1.jsonl (bench/chip/record.py)"

    def describe(self) -> str:
        """One clause for reports.

        >>> CHIP_CHECKS[0].describe()[:46]
        'on a v5e chip (2026-12-05), train steps of a 3'
        """
        return (f"on a {self.hardware} chip ({self.date}), {self.program}s of {self.model} took "
                f"{self.low:.2f}-{self.high:.2f}x this estimate")


CHIP_CHECKS: tuple[ChipCheck, ...] = (
    ChipCheck("v5e", "2026-12-05", "train step",
              "a 335M-parameter decoder (full and LoRA fine-tunes, batch 4 to 9, steps of "
              "0.1-0.25 s)", 0.93, 1.14),
    ChipCheck("v5e", "2026-12-05", "train step",
              "a 10M-parameter classifier (2.6 ms steps, where Keras's per-step host work "
              "weighs)", 1.25, 1.35),
    ChipCheck("v5e", "2026-12-05", "forward pass",
              "a 109M-parameter encoder under model.predict (batch 64 and 256)", 4.3, 4.6),
)
"""Every comparison of the estimate with a real chip, from the records a
chip made. Not modelled by the estimate: how efficiently each kernel runs
(the MXU is busy only for large, aligned matrix products), Keras's
per-step host work (``predict`` copies each batch's outputs to the host),
and how much communication overlaps computation."""


def estimate_checks(hardware: Hardware, train_step: bool) -> tuple[ChipCheck, ...]:
    """The chip checks of the estimate for this hardware and kind of pass."""
    program = "train step" if train_step else "forward pass"
    return tuple(c for c in CHIP_CHECKS if c.hardware == hardware.name and c.program == program)


@dataclasses.dataclass(frozen=True)
class Target:
    """A number of chips of one kind, as one or more slices (or nodes)."""

    hardware: Hardware
    topology: str | None
    """The TPU topology (``"4x4"``), or None."""
    chips_per_slice: int
    slices: int = 1

    @property
    def chips(self) -> int:
        return self.chips_per_slice * self.slices

    @property
    def name(self) -> str:
        h = self.hardware
        if h.family == "cpu":
            return "cpu"
        return f"{h.name}:{self.topology if h.family == 'tpu' else self.chips_per_slice}"

    @property
    def is_tpu(self) -> bool:
        return self.hardware.family == "tpu"

    @property
    def is_cpu(self) -> bool:
        return self.hardware.family == "cpu"

    @property
    def label(self) -> str:
        """``"v5e:4x4"``, or ``"v5e:4x4 x 2 slices"``."""
        if self.slices == 1:
            return self.name
        what = "slices" if self.is_tpu else "nodes"
        return f"{self.name} x {self.slices} {what}"

    def network(self, crosses: bool) -> str:
        """The network a collective uses: between slices (nodes) if it
        ``crosses`` them, else within one."""
        return self.hardware.between if crosses else self.hardware.link


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
        return Target(hardware, None, 0, 1)
    if hardware.family == "gpu":
        if not re.fullmatch(r"\d+", shape or ""):
            raise ShardvizError(
                f"A GPU target names the GPUs of one node, such as '{name}:8'; got {text!r}.",
                hint=f"Use '{name}:8' for one node of 8, and slices=N for N nodes.")
        chips = int(shape)
        if not 1 <= chips <= (hardware.max_chips or 8):
            raise ShardvizError(f"A {name} node holds 1 to {hardware.max_chips} GPUs, not {chips}.",
                                hint=f"Use '{name}:8' and slices=N for more GPUs.")
        return Target(hardware, None, chips, count)
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
    return Target(hardware, shape, chips, count)


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


def targets() -> pd.DataFrame:
    """The hardware shardviz knows, one row each, with the source of every
    figure. Bandwidths are bytes per second one way, per chip.

    >>> t = targets()
    >>> t.loc[t.name == "v5e", ["hbm_bytes", "link"]].values.tolist()
    [[17179869184, 'ici']]
    """
    import pandas as pd

    rows = []
    for h in HARDWARE.values():
        rows.append({
            "name": h.name, "family": h.family, "device_kind": h.device_kind,
            "chips": h.max_chips, "hbm_bytes": h.hbm_bytes, "hbm_bandwidth": h.hbm_bandwidth,
            "peak_bf16_flops": h.peak_flops, "link": h.link, "link_bandwidth": h.link_bandwidth,
            "between": h.between, "between_bandwidth": h.between_bandwidth,
            "products": ", ".join(f"{p} ({t.split(':')[1]})" for p, t in PRODUCT_NAMES.items()
                                  if t.startswith(h.name + ":")),
            "source": h.source,
        })
    frame = pd.DataFrame(rows)
    return frame.astype({"hbm_bytes": "Int64", "chips": "Int64"})


def collective_seconds(kind: str, bytes_per_device: int, group_size: int,
                       bandwidth: float | None) -> float | None:
    """An estimate of a collective's time, from the published cost rules:
    all-gather, reduce-scatter and collective-permute take V/W, all-reduce
    2V/W, all-to-all V/4W, where V is the buffer each device holds and W the
    link's one-way bandwidth; never less than one assumed hop latency per
    other member of the group. None when the bandwidth is unknown.

    >>> collective_seconds("all-reduce", 2 * 10**9, 4, 1e11)
    0.04
    >>> collective_seconds("all-gather", 8, 4, 1e11)  # latency-bound
    3e-06
    """
    if bandwidth is None or group_size <= 1:
        return None if bandwidth is None else 0.0
    factor = {"all-reduce": 2.0, "all-to-all": 0.25}.get(kind, 1.0)
    return max(factor * bytes_per_device / bandwidth, (group_size - 1) * ASSUMED_HOP_LATENCY)
