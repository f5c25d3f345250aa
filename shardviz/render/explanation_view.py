"""An :class:`~shardviz.explain.Explanation` of one collective as text
(wrapped to a width, for ``print`` and ``shardviz report --why``) and as
HTML (the notebook, the Explorer's Communication tab, the exported file)."""

from __future__ import annotations

import textwrap
from html import escape
from typing import TYPE_CHECKING

from ..trace.sources import short_file

if TYPE_CHECKING:
    from ..explain.explanation import Explanation


def text(why: Explanation, width: int = 88) -> str:
    """The explanation as plain text, wrapped to ``width`` columns."""
    lines = [f"Collective {why.index}: {why.kind} at {why.layer or '?'}",
             f"  source: {short_file(why.source) if why.source else 'unknown'}"
             + (f" (from {why.source_from})" if why.source_from not in ("", "itself")
                else ""),
             "", *_wrap(why.text, width), ""]
    if why.fix is not None:
        lines += _wrap(f"Fix: {why.fix_change}", width) + _wrap(why.fix_cost, width)
    else:
        lines += ["No local fix.", *_wrap(why.fix_cost, width)]
    if why.tried:
        lines += ["", "Tried:"]
        for t in why.tried:
            wrapped = _wrap(f"{t.change}: {t.outcome}", width - 4)
            lines += ["  - " + wrapped[0]] + ["    " + w for w in wrapped[1:]]
    return "\n".join(lines)


def html(why: Explanation) -> str:
    """The collective, what it communicates and why, the fix, and the changes tried (folded)."""
    esc = escape
    fix = (f"<p><b>Fix:</b> {_code(why.fix_change)}<br>{_code(why.fix_cost)}</p>"
           if why.fix is not None else f"<p><b>No local fix.</b> {_code(why.fix_cost)}</p>")
    tried = "".join(f"<li>{_code(t.change)}: {_code(t.outcome)}</li>" for t in why.tried)
    source = esc(short_file(why.source)) if why.source else "unknown"
    return (
        "<div class='shardviz-why' style='max-width:60em'>"
        f"<p><b>{esc(why.kind)}</b> at <code>{esc(why.layer or '?')}</code>, "
        f"<span style='color:#555'>{source}</span></p>"
        f"<p>{_code(why.text)}</p>{fix}"
        + (f"<details><summary>{len(why.tried)} changes tried</summary><ul>{tried}</ul>"
           "</details>" if why.tried else "")
        + "</div>")


def _code(text: str) -> str:
    """Markdown-ish backticks to <code>, the rest escaped."""
    parts = escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _wrap(text: str, width: int = 88) -> list[str]:
    return [line for para in text.split("\n") for line in (textwrap.wrap(para, width) or [""])]
