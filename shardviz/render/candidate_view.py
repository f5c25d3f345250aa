"""One suggested plan, a :class:`~shardviz.planner.candidates.Candidate`, as
text and as HTML: its figures, then each rule with its reason."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from ..format import format_mesh, format_spec, human_bytes, human_seconds

if TYPE_CHECKING:
    from ..planner.candidates import Candidate


def html(candidate: Candidate) -> str:
    """The figures in a line, then a table of the rules and their reasons."""
    esc = escape
    rules = "".join(f"<tr><td><code>{esc(k)}</code></td><td><code>{esc(format_spec(a))}</code>"
                    f"</td><td>{esc(candidate.reasons.get(k, ''))}</td></tr>"
                    for k, a in ((r.key, r.axes) for r in candidate.plan.rules))
    return (f"<div><b>{esc(candidate.name)}</b> on {esc(format_mesh(candidate.plan.mesh_dict))}: "
            f"{esc(human_bytes(candidate.bytes_per_device))} per device, "
            f"{esc(human_bytes(candidate.comm_bytes))} communicated per device"
            + (f", ~{esc(human_seconds(candidate.seconds))} per step" if candidate.seconds else "")
            + ("" if candidate.compiled else " <i>(estimated, not compiled: the reasons are "
                                             "unchecked)</i>")
            + f"<table>{rules}</table></div>")


def text(candidate: Candidate) -> str:
    """The figures in a line, then one line per rule with its reason."""
    lines = [f"{candidate.name} on {format_mesh(candidate.plan.mesh_dict)}: "
             f"{human_bytes(candidate.bytes_per_device)} per device, "
             f"{human_bytes(candidate.comm_bytes)} communicated"
             + ("" if candidate.compiled else " (estimated; reasons unchecked)")]
    for r in candidate.plan.rules:
        lines.append(f"  {r.key!r}: {format_spec(r.axes)}  # {candidate.reasons.get(r.key, '')}")
    return "\n".join(lines)
