"""The time of each operation of a compiled program on a chip, and of a
step as their sum along the compiler's schedule.

Each operation is timed by what it does (:mod:`shardviz.trace.program_ops`
reads that from the optimized program) with efficiencies fitted to the
chip's own profiles (``bench/records/chip/fit_op_times.py`` fits them to the
per-operation times that ``bench/records/chip/profile_record.py`` recorded
on a v5e chip, and writes ``data/op_time_v5e.json``):

- ``matmul``: the TPU compiler's own estimate of its cycles at the fitted
  seconds per cycle (one for a product that sums over a window, as a
  weight's gradient does, one for the rest), or where the compiler gave none
  its padded flops at the matrix units' fitted efficiency; at least its bytes'
  time; plus a fixed cost;
- ``vector`` and ``copy``: the longest of its flops at the vector units' rate,
  its transcendentals, its bytes (HBM at the fitted share of the bandwidth,
  on-chip memory at the fitted rate) and the compiler's cycles, plus a fixed
  cost;
- ``prefetch``: the fitted share of an asynchronous copy's HBM time that the
  schedule leaves exposed (its ``-done``);
- ``kernel``: an attention kernel's flops at its fitted efficiency; any other
  kernel is unmodelled and timed by its roofline;
- ``collective``: bytes over the link's published bandwidth (no chip records
  with more than one chip exist), overlapped with the compute the schedule
  places between an asynchronous collective's start and done.

A step takes the longer of the device's sum and Keras's own work per step on
the host (measured on the chip's host, where the device's step was short).

>>> model = op_time_model("v5e")
>>> model.hardware, len(model.fitted_on) > 3
('v5e', True)
>>> op_time_model("h100") is None
True
"""

from __future__ import annotations

import dataclasses
import functools
import json
from importlib import resources
from typing import Any

from .chips import HARDWARE, Hardware

_FILES = {"v5e": "op_time_v5e.json"}


@dataclasses.dataclass(frozen=True)
class OpTimeModel:
    """Efficiencies fitted to one chip's profiles (see the module's text)."""

    hardware: str
    """The chip whose profiles they were fitted to."""
    parameters: dict[str, float]
    fitted_on: tuple[str, ...]
    """The cases (``decoder_fit_b4``, ...) whose operations the fit used."""
    held_out: dict[str, float]
    """Each case the fit never saw: its expected step over the chip's."""
    leave_one_model_out: dict[str, float]
    """Each fitted model, fitted again without it: its worst expected step
    over the chip's."""
    host_step_seconds: float
    """Keras's own work per step on the host, with nothing to overlap it."""
    date: str
    versions: dict[str, str]

    @property
    def accuracy(self) -> float:
        """The largest error of an expected step on the models the fit never
        saw (:attr:`held_out`)."""
        errors = [abs(r - 1) for r in self.held_out.values()]
        return max(errors) if errors else float("nan")

    @property
    def left_out_accuracy(self) -> float:
        """The largest error of a fitted model's step when the fit leaves
        that model out (:attr:`leave_one_model_out`)."""
        errors = [abs(r - 1) for r in self.leave_one_model_out.values()]
        return max(errors) if errors else float("nan")

    def describe(self, hardware: Hardware) -> str:
        carried = "" if hardware.name == self.hardware else (
            f"; {self.hardware} efficiencies carried over to {hardware.name} (no profiles of "
            f"{hardware.name}: an estimate)")
        return (f"{self.hardware} efficiencies fitted to the chip's profiles of "
                f"{len(self.fitted_on)} steps ({self.date}); within {self.accuracy:.0%} of the "
                f"chip on {len(self.held_out)} steps of models the fit never saw, and within "
                f"{self.left_out_accuracy:.0%} for each fitted model left out in turn"
                f"{carried}")


@functools.cache
def op_time_model(hardware: str) -> OpTimeModel | None:
    """The fitted model for ``hardware``'s operations: v5e's own, carried
    over to the other TPU generations; None for GPUs and the CPU."""
    chip = HARDWARE.get(hardware)
    if chip is None or chip.family != "tpu":
        return None
    name = _FILES.get(hardware, _FILES["v5e"])
    data = json.loads(resources.files("shardviz.target").joinpath("data", name).read_text())
    return OpTimeModel(data["hardware"], {k: float(v) for k, v in data["parameters"].items()},
                       tuple(data["fitted_on"]), dict(data["held_out"]),
                       dict(data["leave_one_model_out"]), float(data["host_step_seconds"]),
                       data["date"], dict(data["versions"]))


def op_seconds(op: Any, model: OpTimeModel, hardware: Hardware,
               parameters: dict[str, float] | None = None) -> tuple[float, str]:
    """Seconds of one run of ``op`` (a :class:`~shardviz.trace.program_ops.ProgramOp`)
    and what bounds it: ``"matrix units"``, ``"compiler cycles"``,
    ``"vector units"``, ``"memory"``, ``"kernel"``, ``"fixed cost"`` or
    ``"unmodelled"`` (a kernel the model has no efficiency for: its roofline).
    ``parameters`` replaces the model's own (for fitting)."""
    p = parameters or model.parameters
    peak = hardware.peak_flops or 1.0
    bandwidth = (hardware.hbm_bandwidth or 1.0) * p["hbm_share"]
    memory = op.hbm_bytes / bandwidth + (op.bytes - op.hbm_bytes) / p["on_chip_bandwidth"]
    kind = op.kind
    # Where the compiler estimated an operation's cycles, they replace its
    # flops: they know its tiling, layouts and windows.
    if kind == "matmul":
        per_cycle = p["windowed_matmul_seconds_per_cycle" if op.windowed
                      else "matmul_seconds_per_cycle"]
        terms = {"compiler cycles": op.cycles * per_cycle} if op.cycles \
            else {"matrix units": op.mxu_flops / (peak * p["matmul_efficiency"])}
        return _longest({**terms, "memory": memory}, p["matmul_fixed"])
    if kind in ("vector", "copy"):
        terms = {"compiler cycles": op.cycles * p["vector_seconds_per_cycle"]} if op.cycles \
            else {"vector units": op.flops / p["vector_flops"],
                  "transcendentals": op.transcendentals / p["transcendental_rate"]}
        return _longest({**terms, "memory": memory},
                        p["vector_fixed" if kind == "vector" else "copy_fixed"])
    if kind == "prefetch":
        if not op.opcode.endswith("done"):
            return 0.0, "fixed cost"
        return (p["prefetch_exposed"] * op.hbm_bytes / (hardware.hbm_bandwidth or 1.0)
                + p["prefetch_fixed"], "memory")
    if kind == "kernel":
        if op.flops:
            return op.flops / (peak * p["attention_kernel_efficiency"]) + p["matmul_fixed"], \
                "kernel"
        if op.detail in ("", "AssumeGatherIndicesInBound", "ConcatBitcast"):
            return p["control_fixed"], "fixed cost"
        return op.bytes / (hardware.hbm_bandwidth or 1.0), "unmodelled"  # its bytes' time
    if kind == "collective":
        return 0.0, "link"  # timed on its link by timed_ops, overlapped where it can be
    return p["control_fixed"], "fixed cost"


def _longest(terms: dict[str, float], fixed: float) -> tuple[float, str]:
    bound = max(terms, key=lambda k: terms[k])
    return terms[bound] + fixed, bound


@dataclasses.dataclass(frozen=True)
class TimedOp:
    """One operation with its time in a step."""

    op: Any
    seconds: float
    """Seconds per step: one run's seconds times how often a step runs it
    (for a collective, what the schedule leaves exposed)."""
    bound: str


def timed_ops(ops: list, model: OpTimeModel, hardware: Hardware,
              collective_seconds: dict[str, float] | None = None,
              parameters: dict[str, float] | None = None) -> list[TimedOp]:
    """Every operation of ``ops`` (in the compiler's order) with its seconds
    per step. ``collective_seconds`` gives each collective's time on its
    link by instruction name; an asynchronous one (``-start`` ... ``-done``)
    overlaps the operations the schedule places between its two halves, and
    only what they do not cover is counted, on its ``-done``."""
    links = collective_seconds or {}
    open_: dict[str, float] = {}
    out = []
    for op in ops:
        if op.kind == "collective" or (op.kind == "prefetch" and op.opcode.endswith("-done")
                                       and _pair(op.name) in open_):
            seconds = links.get(op.name, 0.0)
            if op.opcode.endswith("-start"):
                open_[_pair(op.name)] = seconds
                out.append(TimedOp(op, 0.0, "link (overlapped)"))
            elif op.opcode.endswith("-done"):
                left = max(open_.pop(_pair(op.name), 0.0), 0.0)
                out.append(TimedOp(op, left * op.count, "link"))
            else:
                out.append(TimedOp(op, seconds * op.count, "link"))
            continue
        seconds, bound = op_seconds(op, model, hardware, parameters)
        for key in open_:
            open_[key] -= seconds * op.count
        out.append(TimedOp(op, seconds * op.count, bound))
    return out


def _pair(name: str) -> str:
    return name.replace("-start", "").replace("-done", "")


def step_seconds(timed: list[TimedOp], model: OpTimeModel) -> tuple[float, float]:
    """The expected step (the longer of the device's sum and Keras's host
    work per step) and the device's sum alone."""
    device = sum(t.seconds for t in timed)
    return max(device, model.host_step_seconds), device
