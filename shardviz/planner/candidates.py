"""The planner's results: one :class:`Candidate` plan with its reasons and
figures, and :class:`Suggestions`, the ranked list that shows itself as a
table."""

from __future__ import annotations

import dataclasses
import html
from typing import TYPE_CHECKING

import pandas as pd

from ..format import format_mesh, format_spec, human_bytes, human_seconds
from ..plan import Plan

if TYPE_CHECKING:
    from ..report import Report


TIGHT = 0.75
"""Above this share of a chip's memory taken by variables alone, an
uncompiled candidate is ranked after the others: activations, temporaries
and the optimizer need the rest."""


@dataclasses.dataclass
class Candidate:
    """One suggested plan, with its reasons and its figures."""

    name: str
    plan: Plan
    reasons: dict[str, str]
    """A short reason for each rule key."""
    report: Report | None = None
    bytes_per_device: int = 0
    """Compiled memory per device (XLA's total) when ``compiled``, else the
    variables' bytes per device (exact) plus nothing for activations."""
    comm_bytes: int = 0
    """Collective bytes per device per step: from the compiled program when
    ``compiled``, else estimated from the layouts."""
    seconds: float | None = None
    """Estimated step time on the target (None without one)."""
    compiled: bool = False
    fits: bool = True
    tight: bool = False
    """Not compiled, and its variables alone take more than :data:`TIGHT` of
    a chip's memory: ranked after the candidates with room to spare."""
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def estimated(self) -> tuple[str, ...]:
        """Which figures are estimates rather than a compiler's, and whether
        the reasons are unchecked (only a compiled candidate's are checked
        against its program)."""
        out = ["seconds"] if self.seconds is not None else []
        if not self.compiled:
            out += ["bytes_per_device (variables only)", "comm_bytes", "reasons (unchecked)"]
        return tuple(out)

    def row(self) -> dict:
        return {"name": self.name, "mesh": _mesh_text(self.plan), "rules": len(self.plan.rules),
                "note": "; ".join(self.notes) or "—",
                "bytes_per_device": self.bytes_per_device, "comm_bytes": self.comm_bytes,
                "seconds": self.seconds, "fits": self.fits, "compiled": self.compiled,
                "estimated": ", ".join(self.estimated) or "—"}

    def _repr_html_(self) -> str:
        esc = html.escape
        rules = "".join(f"<tr><td><code>{esc(k)}</code></td><td><code>{esc(format_spec(a))}</code>"
                        f"</td><td>{esc(self.reasons.get(k, ''))}</td></tr>"
                        for k, a in ((r.key, r.axes) for r in self.plan.rules))
        return (f"<div><b>{esc(self.name)}</b> on {esc(_mesh_text(self.plan))}: "
                f"{esc(human_bytes(self.bytes_per_device))} per device, "
                f"{esc(human_bytes(self.comm_bytes))} communicated per device"
                + (f", ~{esc(human_seconds(self.seconds))} per step" if self.seconds else "")
                + ("" if self.compiled else " <i>(estimated, not compiled: the reasons are "
                                            "unchecked)</i>")
                + f"<table>{rules}</table></div>")

    def __str__(self) -> str:
        lines = [f"{self.name} on {_mesh_text(self.plan)}: {human_bytes(self.bytes_per_device)} "
                 f"per device, {human_bytes(self.comm_bytes)} communicated"
                 + ("" if self.compiled else " (estimated; reasons unchecked)")]
        for r in self.plan.rules:
            lines.append(f"  {r.key!r}: {format_spec(r.axes)}  # {self.reasons.get(r.key, '')}")
        return "\n".join(lines)


def _mesh_text(plan: Plan) -> str:
    return format_mesh(plan.mesh_dict)


TABLE_COLUMNS = ["name", "mesh", "rules", "note", "bytes_per_device", "comm_bytes", "seconds",
                 "fits", "compiled", "estimated"]


class Suggestions(list):
    """Candidates, best first; shows itself as a table."""

    smallest: tuple[int, str, str] | None = None
    """``(bytes per device, mesh, strategy)`` of the smallest plan considered,
    kept or not: what a budget must allow."""
    ranking: str = ""
    """What the candidates are ranked by (``suggest(prefer=)``)."""

    @property
    def table(self) -> pd.DataFrame:
        """One row per candidate: ``name``, ``mesh``, ``rules`` (how many),
        ``note``, ``bytes_per_device``, ``comm_bytes``, ``seconds``, ``fits``,
        ``compiled`` and ``estimated`` (which figures are estimates)."""
        return pd.DataFrame([c.row() for c in self], columns=TABLE_COLUMNS)

    def _repr_html_(self) -> str:
        frame = self.table.copy()
        if len(frame):
            frame["bytes_per_device"] = frame["bytes_per_device"].map(human_bytes)
            frame["comm_bytes"] = frame["comm_bytes"].map(human_bytes)
            frame["seconds"] = frame["seconds"].map(lambda s: human_seconds(s) if s else "—")
        frame = frame.rename(columns={
            "name": "plan", "bytes_per_device": "per device", "comm_bytes": "communicated",
            "seconds": "step (estimate)", "estimated": "estimates"})
        return frame.to_html(index=True, escape=True)

    def __str__(self) -> str:
        return "\n\n".join(f"[{i}] {c}" for i, c in enumerate(self))
