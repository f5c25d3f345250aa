"""The planner's ranked :class:`~shardviz.planner.candidates.Suggestions`
as text (each candidate, numbered) and as HTML (one table row per
candidate)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..format import human_bytes, human_seconds
from . import candidate_view

if TYPE_CHECKING:
    from ..planner.candidates import Suggestions


def html(suggestions: Suggestions) -> str:
    """The :attr:`~shardviz.planner.candidates.Suggestions.table`, its
    bytes and seconds in words."""
    frame = suggestions.table.copy()
    if len(frame):
        frame["bytes_per_device"] = frame["bytes_per_device"].map(human_bytes)
        frame["comm_bytes"] = frame["comm_bytes"].map(human_bytes)
        frame["seconds"] = frame["seconds"].map(lambda s: human_seconds(s) if s else "—")
    frame = frame.rename(columns={
        "name": "plan", "bytes_per_device": "per device", "comm_bytes": "communicated",
        "seconds": "step (estimate)", "estimated": "estimates"})
    return frame.to_html(index=True, escape=True)


def text(suggestions: Suggestions) -> str:
    """Each candidate's text, numbered as ``suggestions[i]``."""
    return "\n\n".join(f"[{i}] {candidate_view.text(c)}" for i, c in enumerate(suggestions))
