"""A Report's ``peak`` and ``timeline`` frames and its ``peak_note``: the
compiler's own buffer assignment of the pass the report compiled (the train
step where there is one), read by role (:mod:`shardviz.trace.peak`); for a
program the compiler refused for memory too."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from ..format import human_bytes
from ..trace.buffer_dump import BufferPeak
from ..trace.peak import PeakSource, peak_rows, timeline
from . import schema
from .frames import frame

if TYPE_CHECKING:
    from .report import Report

OTHER_ABOVE = 2000
"""Past this many buffers, the smallest are summed into one ``other`` row."""


def peak_source(self: Report) -> PeakSource | None:
    """The pass's buffer assignment, from its trace or the compiler's refusal."""
    source = self.trace.peak_source if self.trace is not None else None
    if source is None and self.trace_error is not None:
        source = getattr(self.trace_error, "peak_source", None)
    return source if isinstance(source, PeakSource) else None


def assignment(source: PeakSource | None) -> BufferPeak | None:
    """The buffer assignment itself, where the compile gave one."""
    return source.buffer_peak if source is not None and source.available else None  # type: ignore[return-value]


@schema.documented("peak")
def peak(self: Report) -> pd.DataFrame:
    source = peak_source(self)
    found = assignment(source)
    rows = peak_rows(found, source.roles()) if source and found else []
    if len(rows) > OTHER_ABOVE:
        kept, rest = rows[:OTHER_ABOVE - 1], rows[OTHER_ABOVE - 1:]
        kept.append({"bytes": sum(r["bytes"] for r in rest), "role": "other",
                     "layer": f"{len(rest):,} smaller buffers", "op": "", "dtype": "",
                     "shape": (), "buffer": "", "on_chip": False})
        rows = kept
    cols: dict[str, list[Any]] = {c: [r[c] for r in rows]
                                  for c in schema.frame("peak").names()}
    return frame(cols, "peak")


@schema.documented("timeline")
def timeline_frame(self: Report) -> pd.DataFrame:
    source = peak_source(self)
    found = assignment(source)
    cols: dict[str, list[Any]] = {"position": [], "role": [], "bytes": []}
    if source is not None and found is not None:
        live = timeline(found, source.roles())
        for role, values in live.items():
            if role == "position" or not any(values):
                continue
            cols["position"] += live["position"]
            cols["role"] += [role] * len(values)
            cols["bytes"] += values
    return frame(cols, "timeline")


def peak_note(self: Report) -> str:
    """What the ``peak`` frame is, beside the compiler's checked figure, or
    why it is empty."""
    source = peak_source(self)
    if source is None:
        return ("No buffer assignment: nothing was compiled." if self.pass_name is None
                else "No buffer assignment: the pass was compiled without one.")
    found = assignment(source)
    if found is None:
        return f"No buffer assignment: {source.buffer_peak}."
    total = found.total
    hbm = int(self.peak.loc[~self.peak.on_chip.astype(bool), "bytes"].sum())
    said = (f"At the compiler's peak (position {found.position:,} of "
            f"{found.length:,} in its schedule) {human_bytes(total)} of buffers "
            "are live by its buffer assignment")
    if hbm != total:
        said += f", {human_bytes(hbm)} of them in HBM"
    checked = self.memory.iloc[0]["peak_bytes"] if len(self.memory) else None
    if checked is not None and checked == checked:
        said += (f"; the compiler's own peak (memory_analysis) is {human_bytes(int(checked))}, "
                 "the figure it checks against the chip")
    return said + "."
