"""What :func:`~shardviz.multihost.verify` compares: the shards shardviz
predicts each host holds, against what each worker reported, and the
:class:`Verification` it returns."""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd


@dataclasses.dataclass
class Verification:
    """What ``verify`` found: agreement, and one line per disagreement."""

    processes: int
    agree: bool
    disagreements: list[str]
    """One line per shard (or output) that differs from the prediction."""
    failures: list[str]
    """One line per worker that crashed, hung or failed, with its last lines."""
    hosts: pd.DataFrame
    """shardviz's per-host view (``report.hosts``) of the plan verified."""
    checked: int
    """How many (variable or output, device) shards were compared."""
    max_abs_diff: float | None
    """The largest difference between the gathered output and the
    single-process output."""
    seconds: float
    report: Any = dataclasses.field(default=None, repr=False)
    step_max_abs_diff: float | None = None
    """With ``train_step=True``: the largest difference between the train
    step's loss and updated variables on the processes and in one process."""
    tolerance_used: float | None = None
    """The largest share of the tolerance an output's difference used (at
    most 1 where they agree): within ``1e-4`` of the output's largest
    magnitude, plus ``1e-5`` (:func:`.train_check.agrees`)."""
    step_tolerance_used: float | None = None
    """The same for the train step's loss and updated variables."""

    @property
    def lines(self) -> list[str]:
        """Every disagreement and failure, one line each."""
        return self.disagreements + self.failures

    def __str__(self) -> str:
        n = len(self.disagreements)
        procs = f"{self.processes} process{'es' if self.processes != 1 else ''}"
        head = (f"verified on {procs}: {self.checked} shards agree with "
                f"shardviz's prediction" if self.agree else
                f"verification on {procs} failed: {n} disagreement"
                f"{'s' if n != 1 else ''}, {len(self.failures)} worker failure"
                f"{'s' if len(self.failures) != 1 else ''}")
        tail = (f"; gathered output matches the single-process run (max |diff| "
                f"{self.max_abs_diff:.2e}{_used(self.tolerance_used)})"
                if self.agree and self.max_abs_diff is not None else "")
        if self.agree and self.step_max_abs_diff is not None:
            tail += ("; the train step's loss and every updated variable match the single-"
                     f"process step (max |diff| {self.step_max_abs_diff:.2e}"
                     f"{_used(self.step_tolerance_used)})")
        return "\n".join([head + tail + f" ({self.seconds:.1f} s)"] + self.lines)


def _used(share: float | None) -> str:
    return "" if share is None else f", {share:.0%} of the tolerance"


def predicted_shards(report) -> tuple[dict, list]:
    """Per variable path and per model output: mesh position → index ranges."""
    ids = [int(i) for i in report.mesh.device_ids.flat]
    position = {d: p for p, d in enumerate(ids)}

    def ranges(index, shape):
        return [[int(s.start or 0), int(s.stop if s.stop is not None else n)]
                for s, n in zip(index, shape)]

    variables = {}
    for path in report.paths:
        shape = report.variable(path).info.shape
        variables[path] = {position[d]: ranges(i, shape)
                           for d, i in report.indices(path).items()}
    outputs = []
    activations = report.trace.activations if report.trace is not None else []
    for a in sorted((a for a in activations if a.output_index is not None),
                    key=lambda a: a.output_index):
        sharding = a.returned if a.returned is not None else a.actual
        outputs.append({position[d.id]: ranges(i, a.shape)
                        for d, i in sharding.devices_indices_map(a.shape).items()})
    return variables, outputs


def _describe(ranges) -> str:
    return "[" + ", ".join(f"{a}:{b}" for a, b in ranges) + "]"


def compare_shards(report, results: list[dict], processes: int) -> tuple[list[str], int]:
    variables, outputs = predicted_shards(report)
    owner = report.process_of_position
    lines, checked = [], 0
    for r in results:
        host = r["process"]
        mine = [p for p in range(report.mesh.size) if owner[p] == host]
        if sorted(r.get("local_devices", [])) != mine:
            lines.append(f"host {host}: owns mesh positions {r.get('local_devices')}, "
                         f"shardviz expected {mine}")
        for path, shards in r["variables"].items():
            expected = variables.get(path)
            if expected is None:
                lines.append(f"host {host}: variable {path!r} exists in the run but not in "
                             "shardviz's scan")
                continue
            for position, got in shards:
                checked += 1
                want = expected.get(position)
                if want != got:
                    lines.append(f"host {host}, mesh position {position}: {path} holds "
                                 f"{_describe(got)}, shardviz predicted {_describe(want or [])}")
        for i, shards in enumerate(r["outputs"]):
            if i >= len(outputs):
                lines.append(f"host {host}: output {i} was not predicted")
                continue
            for position, got in shards:
                checked += 1
                want = outputs[i].get(position)
                if want != got:
                    lines.append(f"host {host}, mesh position {position}: output {i} holds "
                                 f"{_describe(got)}, shardviz predicted {_describe(want or [])}")
    return lines, checked
