"""Where a step's time goes, as text that fits a terminal and as HTML: the
seconds by kind of operation, then the layers that take the most. It takes
the ``op_times`` frame (estimates) and the expected step's source line."""

from __future__ import annotations

import pandas as pd

from ..format import human_seconds
from .peak_view import fit_width, wrap_note

KIND_WIDTH = 11
SECONDS_WIDTH = 10


def note(report) -> str:
    """The expected step and where it comes from, or why no operation was timed."""
    if report.op_times.empty:
        return ("No operations were timed: that needs a compiled program and a TPU target "
                "(such as v5e:2x4, with inputs or a batch).")
    est = report.estimate
    row = est[est["part"] == "expected"]
    return (f"Expected step {human_seconds(float(row['seconds'].iloc[0]))}: "
            f"{row['source'].iloc[0]}") if len(row) else ""


def by_kind(op_times: pd.DataFrame) -> pd.DataFrame:
    """Seconds, share and operations per kind, longest first.

    >>> ops = pd.DataFrame({"kind": ["matmul", "vector", "matmul"], "seconds": [2.0, 1.0, 1.0]})
    >>> by_kind(ops).to_dict("records")[0]
    {'kind': 'matmul', 'seconds': 3.0, 'share': 0.75, 'operations': 2}
    """
    if op_times.empty:
        return pd.DataFrame({"kind": [], "seconds": [], "share": [], "operations": []})
    sums = op_times.groupby("kind", sort=False)["seconds"].agg(["sum", "count"])
    sums = sums.sort_values("sum", ascending=False)
    total = float(sums["sum"].sum()) or 1.0
    return pd.DataFrame({"kind": sums.index, "seconds": sums["sum"].to_numpy(),
                         "share": sums["sum"].to_numpy() / total,
                         "operations": sums["count"].to_numpy()})


def by_layer(op_times: pd.DataFrame, top: int = 15) -> pd.DataFrame:
    """Seconds per layer, longest first, ``top`` of them."""
    if op_times.empty:
        return pd.DataFrame({"layer": [], "seconds": []})
    named = op_times.assign(layer=op_times["layer"].where(op_times["layer"] != "", "(no layer)"))
    sums = named.groupby("layer", sort=False)["seconds"].sum()
    return sums.sort_values(ascending=False).head(top).reset_index()


def text(op_times: pd.DataFrame, note: str, width: int = 80, top: int = 15) -> str:
    """The step's time as lines of at most ``width`` columns."""
    lines = [wrap_note(note, width) if len(note) > width else note]
    if op_times.empty:
        return "\n".join(lines)
    lines += ["", "By kind of operation:"]
    for kind, seconds, share, count in by_kind(op_times).itertuples(index=False):
        lines.append(f"  {kind:<{KIND_WIDTH}}{human_seconds(float(seconds)):>{SECONDS_WIDTH}}"
                     f"  {share:6.1%}  {int(count):>7,} ops")
    rest = max(10, width - 2 - SECONDS_WIDTH - 2)
    lines += ["", f"The layers that take the most ({len(op_times):,} operations):"]
    for layer, seconds in by_layer(op_times, top).itertuples(index=False):
        lines.append(f"  {human_seconds(float(seconds)):>{SECONDS_WIDTH}}  "
                     f"{fit_width(str(layer), rest)}")
    return "\n".join(lines)


def html(op_times: pd.DataFrame, note: str, top: int = 15) -> str:
    """The step's time as HTML: the note, the seconds by kind, the longest layers."""
    from html import escape

    out = [f"<p>{escape(note)}</p>"]
    if op_times.empty:
        return "".join(out)
    rows = "".join(f"<tr><td>{escape(str(kind))}</td><td>{human_seconds(float(s))}</td>"
                   f"<td>{share:.1%}</td><td>{int(n):,}</td></tr>"
                   for kind, s, share, n in by_kind(op_times).itertuples(index=False))
    out.append("<table><tr><th>kind</th><th>seconds</th><th>share</th><th>operations</th>"
               f"</tr>{rows}</table>")
    rows = "".join(f"<tr><td>{human_seconds(float(s))}</td><td>{escape(str(layer))}</td></tr>"
                   for layer, s in by_layer(op_times, top).itertuples(index=False))
    out.append(f"<table><tr><th>seconds</th><th>layer</th></tr>{rows}</table>")
    return "".join(out)
