"""The simulated CPU devices: the default target, where programs run.

>>> from shardviz.target import parse_target
>>> cpu = parse_target("cpu")
>>> cpu.label, cpu.capacity_bytes(), cpu.timed, cpu.can_execute
('cpu', None, False, True)
"""

from __future__ import annotations

from typing import ClassVar

from .base import Target


class SimulatedCpu(Target):
    """JAX's CPU devices (see :func:`~shardviz.simulate_devices`): a plan
    is for as many as exist, memory has no limit, and no step time
    applies."""

    timed: ClassVar[bool] = False

    @property
    def name(self) -> str:
        return "cpu"

    def plan_devices(self) -> int:
        import jax

        return jax.device_count()

    def capacity_bytes(self) -> int | None:
        return None
