"""What :func:`~shardviz.planner.fit` answers: :class:`FitAnswer`, one row
per remat mode, every compile it made, and the Report of the best answer,
shown as text and as HTML."""

from __future__ import annotations

import dataclasses
import html
from typing import Any

import pandas as pd

from ..format import human_bytes, plural
from ..model.tuning import Tuning
from ..report import Report

COMPILE_COLUMNS = ["remat", "target", "mesh", "batch", "bytes_per_device", "capacity_bytes",
                   "fits", "compiled", "seconds", "from_cache"]
ANSWER_COLUMNS = ["remat", "target", "mesh", "batch", "bytes_per_device", "capacity_bytes",
                  "next", "next_bytes_per_device", "compiles", "peak_bytes_per_device"]


@dataclasses.dataclass
class FitAnswer:
    """What :func:`fit` found: one row per remat mode in :attr:`answers`,
    every compile in :attr:`compiles`, and the Report of the best answer.

    For the largest batch, a row's ``batch`` fits ``target`` and ``next``
    (the next batch the batch axis allows) was refused, with the bytes it
    needed. For the smallest slice, ``target`` fits ``batch`` and ``next``
    names the next smaller slice sold, which was refused (by the compiler,
    or because the variables alone exceed a chip: ``compiled`` False).
    """

    question: str
    """``"largest batch"`` or ``"smallest slice"``."""
    answers: pd.DataFrame
    compiles: pd.DataFrame
    report: Report | None
    """The Report at the best answer (the last remat mode's if none fits)."""
    tuning: Tuning
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def compile_count(self) -> int:
        """How many train steps were compiled (read from the compile cache or
        not)."""
        return int(self.compiles.compiled.sum())

    @property
    def cached_count(self) -> int:
        """How many of the compiles were read from the compile cache."""
        if "from_cache" not in self.compiles:
            return 0
        return int(self.compiles.from_cache.fillna(False).astype(bool).sum())

    def _count_text(self) -> str:
        cached = self.cached_count
        return plural(self.compile_count, "compile") + (
            f", {cached} read from the compile cache" if cached else "")

    def __str__(self) -> str:
        lines = [f"shardviz.fit: the {self.question}, {self.tuning.describe()} "
                 f"({self._count_text()})"]
        if self.report is not None and self.report.target.estimated:
            lines[0] += (f"; estimates: {self.report.target.label}'s memory is taken from the "
                         "simulated CPUs' compiled program")
        rows: list[dict[Any, Any]] = self.answers.to_dict("records")
        for row in rows:
            remat = row["remat"] if isinstance(row["remat"], str) else "no remat"
            if pd.isna(row["batch"]):
                refused = row["next"] if str(row["next"]).startswith("no ") else (
                    f"{row['next']} is refused")
                lines.append(f"  {remat}: nothing fits ({refused})")
                continue
            used = (f"{human_bytes(row['bytes_per_device'])} of "
                    f"{human_bytes(row['capacity_bytes'])}")
            peak = row["peak_bytes_per_device"]
            if _given(peak) and row["bytes_per_device"] > row["capacity_bytes"]:
                # The compiler checks what is live at once, not the sum of its buffers.
                used += f" ({human_bytes(float(peak))} live at the peak, which the compiler checks)"
            refused = ""
            if _given(row["next"]) and _given(row["next_bytes_per_device"]):
                refused = f"; {row['next']} needs {human_bytes(row['next_bytes_per_device'])}"
            elif _given(row["next"]):
                refused = f"; {row['next']}"
            lines.append(f"  {remat}: batch {int(row['batch'])} on {row['target']} "
                         f"(mesh {row['mesh']}), {used} per chip{refused}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<FitAnswer {self.question}: {len(self.answers)} rows, {self.compile_count} compiles>"

    def _repr_html_(self) -> str:
        head = html.escape(str(self).splitlines()[0])
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes)
        return (f"<div><b>{head}</b>{self.answers.to_html(index=False, na_rep='')}"
                f"<details><summary>{html.escape(self._count_text())}</summary>"
                f"{self.compiles.drop(columns='from_cache', errors='ignore').to_html(index=False)}"
                "</details>"
                + (f"<ul>{notes}</ul>" if notes else "") + "</div>")


def _given(value: object) -> bool:
    """Neither None nor a missing value (NaN) of a frame."""
    return value is not None and not (isinstance(value, float) and pd.isna(value))
