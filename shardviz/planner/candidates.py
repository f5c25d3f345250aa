"""The planner's results: one :class:`Candidate` plan with its reasons and
figures, and :class:`Suggestions`, the ranked list that shows itself as a
table (drawn by :mod:`shardviz.render.candidate_view` and
:mod:`shardviz.render.suggest_view`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pandas as pd

from ..format import format_mesh
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
        return {"name": self.name, "mesh": mesh_text(self.plan), "rules": len(self.plan.rules),
                "note": "; ".join(self.notes) or "—",
                "bytes_per_device": self.bytes_per_device, "comm_bytes": self.comm_bytes,
                "seconds": self.seconds, "fits": self.fits, "compiled": self.compiled,
                "estimated": ", ".join(self.estimated) or "—"}

    def _repr_html_(self) -> str:
        from ..render.candidate_view import html

        return html(self)

    def __str__(self) -> str:
        from ..render.candidate_view import text

        return text(self)


def mesh_text(plan: Plan) -> str:
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
        from ..render.suggest_view import html

        return html(self)

    def __str__(self) -> str:
        from ..render.suggest_view import text

        return text(self)
