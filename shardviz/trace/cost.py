"""What the collectives cost on the target: the network each one runs over,
and an estimate of its time from the target's published bandwidths.

A collective crosses slices (TPU, over DCN) or nodes (GPU, over InfiniBand)
when one of its groups holds devices of different slices; otherwise it runs
over the chips' own links (ICI, NVLink). On the simulated CPU it runs on the
host, and no time is estimated.
"""

from __future__ import annotations

import dataclasses

from ..layout.geometry import MeshModel
from ..target import collective_seconds
from .hlo import Collective


def crosses_slices(c: Collective, mesh: MeshModel) -> bool:
    """Whether one of ``c``'s groups spans devices of several slices."""
    slice_of = mesh.slice_of_position
    if len(set(slice_of)) <= 1:
        return False
    return any(len({slice_of[p] for p in group if p < len(slice_of)}) > 1
               for group in c.groups)


def priced(collectives: list[Collective], mesh: MeshModel) -> list[Collective]:
    """``collectives`` with ``network`` and ``seconds`` filled in for the
    mesh's target."""
    target = mesh.target
    out = []
    for c in collectives:
        if target is None or not target.timed:
            out.append(dataclasses.replace(c, network="host", seconds=None))
            continue
        hardware = target.hardware
        if c.network == "dcn":  # a transfer between slices, from the multi-slice runtime
            group = target.slices
            out.append(dataclasses.replace(
                c, axes=c.axes or mesh.dcn_axes, network=hardware.between,
                seconds=collective_seconds(c.kind, c.bytes_per_device, group,
                                           hardware.between_bandwidth)))
            continue
        crosses = crosses_slices(c, mesh)
        bandwidth = hardware.between_bandwidth if crosses else hardware.link_bandwidth
        out.append(dataclasses.replace(
            c, network=target.network(crosses),
            seconds=collective_seconds(c.kind, c.bytes_per_device, max(c.group_size, 2),
                                       bandwidth)))
    return out
