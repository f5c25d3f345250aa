"""A :class:`~shardviz.planner.fit_answer.FitAnswer` as HTML: its answers,
the expected step time at the answer, its notes and every compile, for the
Explorer's Fit tab and ``shardviz fit --html`` (with the Report of the
answer after it)."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import pandas as pd

from ..format import human_bytes, human_seconds, plural
from .export import report_html_file

if TYPE_CHECKING:
    from ..planner.fit_answer import FitAnswer


def fit_html(answer: FitAnswer) -> str:
    """The answer's tables: one row per remat mode, the expected step time,
    the notes, and the compiles (folded)."""
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in answer.notes)
    head = html.escape(str(answer).splitlines()[0])
    return (f"<p><b>{head}</b></p>" + answers_table(answer.answers) + expected_step_html(answer)
            + (f"<ul>{notes}</ul>" if notes else "")
            + f"<details><summary>{plural(answer.compile_count, 'compile')}</summary>"
            f"{compiles_table(answer.compiles)}</details>")


def fit_html_file(answer: FitAnswer, title: str = "shardviz fit") -> str:
    """One HTML file, readable offline: the answer, then the full report of
    the train step at the answer."""
    if answer.report is None:
        return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
                f"<title>{html.escape(title)}</title></head><body>"
                f"<h1>{html.escape(title)}</h1>{fit_html(answer)}</body></html>")
    return report_html_file(answer.report, title, preface="<h2>The answer</h2>"
                            + fit_html(answer) + "<h2>The train step at the answer</h2>")


def answers_table(rows: pd.DataFrame) -> str:
    """One row per remat mode: what fits, its bytes per chip, and the next one refused."""
    body = []
    for row in rows.to_dict("records"):
        body.append([_mode(row["remat"]), row["target"], row["mesh"], _count(row["batch"]),
                     _bytes(row["bytes_per_device"]), _bytes(row["capacity_bytes"]),
                     row["next"], _bytes(row["next_bytes_per_device"]), _count(row["compiles"])])
    return _table(["remat", "target", "mesh", "batch", "per chip", "chip holds", "refused next",
                   "it needs", "compiles"], body)


def compiles_table(compiles: pd.DataFrame) -> str:
    """Every train step compiled (or ruled out without a compile), in order."""
    body = [[_mode(c["remat"]), c["target"], c["mesh"], _count(c["batch"]),
             _bytes(c["bytes_per_device"]), _bytes(c["capacity_bytes"]),
             "fits" if c["fits"] else "refused",
             ("from the cache" if c.get("from_cache") is True else "yes") if c["compiled"]
             else "no",
             human_seconds(c["seconds"]) if c["compiled"] else ""]
            for c in compiles.to_dict("records")]
    return _table(["remat", "target", "mesh", "batch", "per chip", "chip holds", "verdict",
                   "compiled", "time"], body)


def expected_step_html(answer: FitAnswer) -> str:
    """The expected step time at the answer (the estimate's ``expected`` row), if given."""
    if answer.report is None:
        return ""
    estimate = answer.report.estimate
    expected = estimate[estimate["part"] == "expected"]
    if expected.empty:
        return ""
    row = expected.iloc[0]
    return (f"<p><b>Expected step time</b> at this answer: {human_seconds(row['seconds'])} "
            f"<span style='color:#555'>({html.escape(str(row['source']))})</span></p>")


def _table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_text(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _text(value: object) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def _bytes(value: object) -> str:
    return "" if _text(value) == "" else human_bytes(float(value))  # type: ignore[arg-type]


def _count(value: object) -> str:
    return "" if _text(value) == "" else f"{int(value):,}"  # type: ignore[call-overload]


def _mode(remat: object) -> str:
    return remat if isinstance(remat, str) else "no remat"
