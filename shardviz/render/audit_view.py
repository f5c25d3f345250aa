"""An :class:`~shardviz.diagnosis.audit.Audit` of a layout map as text (a
line per finding, and its fix) and as HTML (the findings' table)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..diagnosis.audit import Audit


def text(audit: Audit) -> str:
    """A head line with the count, then each finding and its fix."""
    head = (f"shardviz.audit of {audit.model_name} on {audit.plan.mesh_dict}: "
            f"{len(audit.findings)} finding{'s' if len(audit.findings) != 1 else ''}")
    lines = [head]
    for row in audit.findings.to_dict("records"):
        where = f" [{row['mesh']}]" if row["mesh"] else ""
        lines.append(f"  {row['kind']}{where}: {row['message']}")
        if row["fix"]:
            lines.append(f"    fix: {row['fix']}")
    return "\n".join(lines)


def html(audit: Audit) -> str:
    """The :attr:`~shardviz.diagnosis.audit.Audit.findings` table."""
    return audit.findings.to_html(index=False, na_rep="")
