"""The chips shardviz knows, with their published figures and sources,
and how a real chip measured against the step-time estimate.

>>> HARDWARE["v5e"].family, HARDWARE["v5e"].link
('tpu', 'ici')
"""

from __future__ import annotations

import dataclasses

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
    megacore: bool = False
    """Two TensorCores per chip that Cloud TPU runs as one JAX device (v4,
    v5p); libtpu describes such a chip core by core unless asked."""
    one_host_topologies: tuple[str, ...] = ()
    """TPU topologies sold as one host smaller or other than libtpu's default
    host of 2x2 chips (v5litepod-1 and -8: ``1x1``, ``2x4``)."""


def _tb(gbps: float) -> float:
    """Gigabits per second in bytes per second."""
    return gbps * 1e9 / 8


HARDWARE: dict[str, Hardware] = {h.name: h for h in (
    Hardware(
        "v4", "tpu", "TPU v4", 32 * 2**30, 1200e9, 275e12, "ici", 6 * 4.5e10, "dcn", 2.5e10 / 4,
        4096, 3,
        f"{CLOUD_TPU}v4: 32 GiB HBM2, 1200 GBps, 275 TFLOPs bf16, pods of 4096 chips. ICI and DCN "
        f"are not on that page: {SCALING_BOOK}tpus/ gives 4.5e10 B/s one way per ICI link with 6 "
        "neighbours (6 x 4.5e10), and about 2.5e10 B/s of DCN per host of 4 chips.",
        megacore=True),
    Hardware(
        "v5e", "tpu", "TPU v5 lite", 16 * 2**30, 819e9, 197e12, "ici", 400e9 / 2, "dcn",
        _tb(2 * 100) / 8, 256, 2,
        f"{CLOUD_TPU}v5e: 16 GB HBM2 (GiB: the compiler itself allows 15.75 GiB), 819 GBps, "
        "197 TFLOPs bf16, ICI 400 GBps bidirectional (halved: one way), pods of 256 chips. "
        "DCN derived: 2 x 100 Gbps NICs per host of 8 chips.",
        one_host_topologies=("1x1", "2x4")),
    Hardware(
        "v5p", "tpu", "TPU v5", 96 * 2**30, 2765e9, 459e12, "ici", 1200e9 / 2, "dcn", _tb(50),
        6144, 3,
        f"{CLOUD_TPU}v5p: 95 GiB HBM2e usable (the compiler itself allows 95.74 GiB: the chip "
        "holds 96 GiB), 2765 GBps, 459 TFLOPs bf16, ICI 1200 GBps "
        "bidirectional (halved: one way), DCN 50 Gbps per chip, slices up to 16x16x24.",
        megacore=True),
    Hardware(
        "v6e", "tpu", "TPU v6 lite", 32 * 2**30, 1640e9, 918e12, "ici", 800e9 / 2, "dcn",
        _tb(4 * 200) / 8, 256, 2,
        f"{CLOUD_TPU}v6e: 32 GB HBM (GiB, as for v5e), 1640 GBps, 918 TFLOPs bf16, ICI 800 GBps "
        "bidirectional (halved: one way), pods of 256 chips. DCN derived: 4 x 200 Gbps NICs per host of 8 "
        "chips.", one_host_topologies=("1x1", "2x4")),
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
