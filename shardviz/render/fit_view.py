"""A :class:`~shardviz.planner.fit_answer.FitAnswer` as text and as HTML:
``text`` for ``print``, ``html`` for the notebook (the answers, the expected
step time at the answer, the notes and every compile), ``html_file`` for
``shardviz fit --html`` (with the Report of the answer after it), and the
tables the Explorer's Fit tab lays out apart."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..format import human_bytes, human_seconds, plural
from .export import report_html_file

if TYPE_CHECKING:
    from ..planner.fit_answer import FitAnswer


def text(answer: FitAnswer) -> str:
    """One line for the question, one per remat mode, one per note."""
    lines = [f"shardviz.fit: the {answer.question}, {answer.tuning.describe()} "
             f"({count_text(answer)})"]
    if answer.report is not None and answer.report.target.estimated:
        lines[0] += (f"; estimates: {answer.report.target.label}'s memory is taken from the "
                     "simulated CPUs' compiled program")
    rows: list[dict[Any, Any]] = answer.answers.to_dict("records")
    for row in rows:
        remat = row["remat"] if isinstance(row["remat"], str) else "no remat"
        if pd.isna(row["batch"]):
            refused = row["next"] if str(row["next"]).startswith("no ") else (
                f"{row['next']} is refused")
            lines.append(f"  {remat}: nothing fits ({refused})")
            continue
        used = (f"{human_bytes(row['bytes_per_device'])} of "
                f"{human_bytes(row['capacity_bytes'])}")
        peak = row["peak_bytes_per_device"]
        if _given(peak) and row["bytes_per_device"] > row["capacity_bytes"]:
            # The compiler checks what is live at once, not the sum of its buffers.
            used += f" ({human_bytes(float(peak))} live at the peak, which the compiler checks)"
        refused = ""
        if _given(row["next"]) and _given(row["next_bytes_per_device"]):
            refused = f"; {row['next']} needs {human_bytes(row['next_bytes_per_device'])}"
        elif _given(row["next"]):
            refused = f"; {row['next']}"
        lines.append(f"  {remat}: batch {int(row['batch'])} on {row['target']} "
                     f"(mesh {row['mesh']}), {used} per chip{refused}{speed_text(row)}")
    lines += [f"  note: {n}" for n in answer.notes]
    return "\n".join(lines)


def speed_text(row: dict) -> str:
    """``"; expected step 0.74 s, 45,300 tokens/s, 0.0061 chip-hours per million
    tokens (estimates)"``, or nothing where no step time is expected."""
    step: Any = row.get("step_seconds")
    if not _given(step):
        return ""
    out = f"; expected step {human_seconds(float(step))}"
    tokens: Any = row.get("tokens_per_second")
    cost: Any = row.get("chip_hours_per_million_tokens")
    if _given(tokens) and _given(cost):
        out += f", {float(tokens):,.0f} tokens/s, {float(cost):.3g} chip-hours per million tokens"
    return out + " (estimates)"


def count_text(answer: FitAnswer) -> str:
    """``"5 compiles, 2 read from the compile cache"``."""
    cached = answer.cached_count
    return plural(answer.compile_count, "compile") + (
        f", {cached} read from the compile cache" if cached else "")


def html(answer: FitAnswer) -> str:
    """The answer's tables: one row per remat mode, the expected step time,
    the notes, and the compiles (folded)."""
    notes = "".join(f"<li>{escape(n)}</li>" for n in answer.notes)
    head = escape(text(answer).splitlines()[0])
    return (f"<p><b>{head}</b></p>" + answers_table(answer.answers) + expected_step_html(answer)
            + (f"<ul>{notes}</ul>" if notes else "")
            + f"<details><summary>{plural(answer.compile_count, 'compile')}</summary>"
            f"{compiles_table(answer.compiles)}</details>")


def html_file(answer: FitAnswer, pictures=(), title: str = "shardviz fit") -> str:
    """One HTML file, readable offline: the answer, then the full report of
    the train step at the answer with its ``pictures`` (``answer.report.pictures()``)."""
    if answer.report is None:
        return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
                f"<title>{escape(title)}</title></head><body>"
                f"<h1>{escape(title)}</h1>{html(answer)}</body></html>")
    return report_html_file(answer.report, pictures, title, preface="<h2>The answer</h2>"
                            + html(answer) + "<h2>The train step at the answer</h2>")


def answers_table(rows: pd.DataFrame) -> str:
    """One row per remat mode: what fits, its bytes per chip, and the next one refused."""
    body = []
    for row in rows.to_dict("records"):
        step: Any = row.get("step_seconds")
        tokens: Any = row.get("tokens_per_second")
        body.append([_mode(row["remat"]), row["target"], row["mesh"], _count(row["batch"]),
                     _bytes(row["bytes_per_device"]), _bytes(row["capacity_bytes"]),
                     row["next"], _bytes(row["next_bytes_per_device"]), _count(row["compiles"]),
                     human_seconds(float(step)) if _given(step) else "",
                     f"{float(tokens):,.0f}" if _given(tokens) else ""])
    return _table(["remat", "target", "mesh", "batch", "per chip", "chip holds", "refused next",
                   "it needs", "compiles", "expected step", "tokens/s"], body)


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
            f"<span style='color:#555'>({escape(str(row['source']))})</span></p>")


def _table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(_text(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _given(value: object) -> bool:
    """Neither None nor a missing value (NaN) of a frame."""
    return value is not None and not (isinstance(value, float) and pd.isna(value))


def _text(value: object) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def _bytes(value: object) -> str:
    return "" if _text(value) == "" else human_bytes(float(value))  # type: ignore[arg-type]


def _count(value: object) -> str:
    return "" if _text(value) == "" else f"{int(value):,}"  # type: ignore[call-overload]


def _mode(remat: object) -> str:
    return remat if isinstance(remat, str) else "no remat"
