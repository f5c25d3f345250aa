"""A Report's ``op_times`` frame and its expected step: every operation of
the compiled program (the train step where there is one) timed on the
target by :mod:`shardviz.target.op_time`, in the compiler's order."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..target.op_time import OpTimeModel, TimedOp, op_time_model, step_seconds, timed_ops
from ..trace.program_ops import program_ops
from ..trace.scopes import layer_for_scope, scopes_of
from . import schema
from .frames import frame

if TYPE_CHECKING:
    from .report import Report


@dataclasses.dataclass(frozen=True)
class TimedProgram:
    """The program's operations timed on the target, and the step they make."""

    ops: list[TimedOp]
    model: OpTimeModel
    seconds: float
    """The expected step: the longer of the device's sum and Keras's host work."""
    device_seconds: float

    @property
    def unmodelled(self) -> float:
        """The share of the device's time in operations the model has no
        efficiency for (timed by their roofline)."""
        out = sum(t.seconds for t in self.ops if t.bound == "unmodelled")
        return out / self.device_seconds if self.device_seconds else 0.0


def timed_program(self: Report) -> TimedProgram | None:
    """The compiled program timed on the report's target; None where there
    is no program or no fitted model for the chip (GPUs, the CPU)."""
    if self.trace is None or not self.target.timed or not self.hlo_text:
        return None
    model = op_time_model(self.target.hardware.name)
    if model is None:
        return None
    links = {c.name: c.seconds for c in self.trace.collectives if c.seconds is not None}
    ops = timed_ops(program_ops(self.hlo_text), model, self.target.hardware, links)
    seconds, device = step_seconds(ops, model)
    return TimedProgram(ops, model, seconds, device)


@schema.documented("op_times")
def op_times(self: Report) -> pd.DataFrame:
    timed = self._timed_program
    names = schema.frame("op_times").names()
    cols: dict[str, list[Any]] = {c: [] for c in names}
    paths = [a.layer_path for a in self.trace.activations] if self.trace is not None else []
    for t in timed.ops if timed is not None else []:
        op = t.op
        scopes, pass_ = scopes_of(op.op_name) if op.op_name else ((), "")
        layer = (layer_for_scope(scopes[0], paths) or scopes[0]) if scopes else ""
        row = {"operation": op.name, "layer": layer, "pass": pass_ if scopes else "",
               "kind": op.kind, "count": op.count, "flops": op.flops * op.count,
               "bytes": op.bytes * op.count, "seconds": t.seconds, "bound": t.bound}
        for c in names:
            cols[c].append(row[c])
    return frame(cols, "op_times")
