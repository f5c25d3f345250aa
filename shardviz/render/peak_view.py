"""What is live at the compiled program's peak, as text that fits a
terminal: the bytes by role, then the largest buffers with their layers.
It takes the ``peak`` frame and the report's ``peak_note``."""

from __future__ import annotations

import pandas as pd

from ..format import human_bytes

ROLE_WIDTH = 17
BYTES_WIDTH = 10


def fit_width(text: str, width: int) -> str:
    """``text`` in ``width`` columns; a long path keeps its end (the layer's
    own name), with an ellipsis where it was cut.

    >>> fit_width("model/block_12/attention/query/kernel", 20)
    '…ention/query/kernel'
    """
    return text if len(text) <= width else "…" + text[-(width - 1):]


def by_role(peak: pd.DataFrame) -> pd.DataFrame:
    """Bytes and share per role, largest first."""
    if peak.empty:
        return pd.DataFrame({"role": [], "bytes": [], "share": []})
    sums = peak.groupby("role", sort=False)["bytes"].sum().sort_values(ascending=False)
    total = float(sums.sum()) or 1.0
    return pd.DataFrame({"role": sums.index, "bytes": sums.to_numpy(),
                         "share": sums.to_numpy() / total})


def by_layer(peak: pd.DataFrame, top: int = 15) -> pd.DataFrame:
    """Bytes per (layer, role), largest first, ``top`` of them."""
    if peak.empty:
        return pd.DataFrame({"layer": [], "role": [], "bytes": []})
    named = peak.assign(layer=peak["layer"].where(peak["layer"] != "", "(no layer)"))
    sums = named.groupby(["layer", "role"], sort=False)["bytes"].sum()
    return sums.sort_values(ascending=False).head(top).reset_index()


def text(peak: pd.DataFrame, note: str, width: int = 80, top: int = 15) -> str:
    """The peak as lines of at most ``width`` columns."""
    lines = [note if len(note) <= width else wrap_note(note, width)]
    if peak.empty:
        return "\n".join(lines)
    lines += ["", "By role:"]
    for role, size, share in by_role(peak).itertuples(index=False):
        lines.append(f"  {role:<{ROLE_WIDTH}}{human_bytes(float(size)):>{BYTES_WIDTH}}"
                     f"  {share:6.1%}")
    rest = max(10, width - 2 - BYTES_WIDTH - 2 - ROLE_WIDTH - 1)
    lines += ["", f"The largest by layer and role ({len(peak):,} buffers live):"]
    for layer, role, size in by_layer(peak, top).itertuples(index=False):
        lines.append(f"  {human_bytes(float(size)):>{BYTES_WIDTH}}  {role:<{ROLE_WIDTH}} "
                     f"{fit_width(str(layer), rest)}")
    return "\n".join(lines)


def html(peak: pd.DataFrame, note: str, top: int = 15) -> str:
    """The peak as HTML: the note, the bytes by role, the largest by layer."""
    from html import escape

    out = [f"<p>{escape(note)}</p>"]
    if peak.empty:
        return "".join(out)
    rows = "".join(f"<tr><td>{escape(str(role))}</td><td>{human_bytes(float(size))}</td>"
                   f"<td>{share:.1%}</td></tr>"
                   for role, size, share in by_role(peak).itertuples(index=False))
    out.append(f"<table><tr><th>role</th><th>bytes</th><th>share</th></tr>{rows}</table>")
    rows = "".join(f"<tr><td>{human_bytes(float(size))}</td><td>{escape(str(role))}</td>"
                   f"<td>{escape(str(layer))}</td></tr>"
                   for layer, role, size in by_layer(peak, top).itertuples(index=False))
    out.append(f"<table><tr><th>bytes</th><th>role</th><th>layer</th></tr>{rows}</table>")
    return "".join(out)


def wrap_note(note: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(note, width, break_long_words=False))
