"""Notebook rendering of a Report: a compact HTML summary with its tables."""

from __future__ import annotations

import html
import string
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..format import format_spec, human_bytes, human_seconds
from ..trace.sources import short_file
from . import peak_view, time_view
from .palette import STATUS_COLOURS
from .text import estimate_line, fit_text, memory_line, summary_line, verdict_line

if TYPE_CHECKING:
    import pandas as pd

    from ..errors import Problem

CSS = string.Template("""
<style>
.shardviz-report { font-family: var(--jp-ui-font-family, sans-serif); font-size: 13px; }
.shardviz-report table { border-collapse: collapse; margin: 4px 0 10px 0; }
.shardviz-report table th, .shardviz-report table td { padding: 2px 8px; text-align: left;
  border-bottom: 1px solid #ddd; vertical-align: top; }
.shardviz-report th { background: #f3f3f3; }
.shardviz-report .sv-error { color: $error; font-weight: 600; }
.shardviz-report .sv-warning { color: $warning; }
.shardviz-report .sv-info { color: $info; }
.shardviz-report .sv-sharded { color: $ok; }
.shardviz-report tr.sv-row-error td { background: #fdecee; }
.shardviz-report tr.sv-row-warning td { background: #fff6e0; }
.shardviz-report code { font-size: 12px; }
.shardviz-report code:empty { display: none; }
.shardviz-report summary { cursor: pointer; font-weight: 600; margin: 4px 0; }
</style>
""").substitute(STATUS_COLOURS)


def styled(inner: str) -> str:
    """HTML wrapped so that the report's table styles apply to it."""
    return CSS + f'<div class="shardviz-report">{inner}</div>'


def _e(x) -> str:
    return html.escape("" if x is None else str(x))


def _table(headers, rows, row_classes=None) -> str:
    out = ["<table><thead><tr>"]
    out += [f"<th>{_e(h)}</th>" for h in headers]
    out.append("</tr></thead><tbody>")
    for i, row in enumerate(rows):
        cls = f' class="{row_classes[i]}"' if row_classes and row_classes[i] else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def problems_html(problems: Sequence[Problem]) -> str:
    """The problems, most severe first (a Report's ``problem_list``)."""
    rows = [
        [f'<span class="sv-{p.severity}">{_e(p.severity)}</span>', _e(p.kind),
         f"<code>{_e(p.path or p.rule or p.layer or '')}</code>", _e(p.message), _e(p.hint)]
        for p in problems
    ]
    return _table(["severity", "kind", "where", "message", "hint"], rows)


def variables_html(frame: pd.DataFrame, problems: Sequence[Problem], max_rows: int = 200) -> str:
    """The variables frame as a table; rows with an error, or a warning among
    ``problems``, are highlighted."""
    warned = {p.path for p in problems if p.severity == "warning" and p.path}
    rows, classes = [], []
    shown: Any = frame.head(max_rows)
    for v in shown.itertuples(index=False):
        spec = repr(tuple(v.spec)) if v.status == "error" else format_spec(v.spec)
        rows.append([
            f"<code>{_e(v.path)}</code>", _e(v.shape), _e(v.dtype),
            f"<code>{_e(spec)}</code>", f"<code>{_e(v.rule or '')}</code>",
            _e(v.shard_shape if v.shard_shape is not None else "—"),
            _e(human_bytes(v.bytes_per_device)),
            f'<span class="sv-{v.status}">{_e(v.status)}</span>',
        ])
        classes.append("sv-row-error" if v.status == "error" else
                       "sv-row-warning" if v.path in warned else "")
    table = _table(["path", "shape", "dtype", "spec", "rule", "shard", "per device", "status"],
                   rows, classes)
    more = len(frame) - max_rows
    if more > 0:
        table += f"<p>… {more} more; see <code>report.variables</code>.</p>"
    return table


def plan_html(plan) -> str:
    """The plan as a person reads it: the mesh, the batch axis, and the rules
    in order, as small tables (not the Plan's repr)."""
    mesh = _table(["axis", "size"], [[f"<code>{_e(n)}</code>" + (" (batch)" if n ==
                                                                  plan.batch_axis else ""),
                                      _e(s)] for n, s in plan.mesh])
    rules = _table(["#", "key", "axes"], [[_e(i), f"<code>{_e(r.key)}</code>",
                                           f"<code>{_e(r.axes)}</code>"]
                                          for i, r in enumerate(plan.rules)])
    return (f'<div class="shardviz-report"><b>Plan</b>: mesh of {plan.mesh_size} devices'
            f'<div style="display:flex;gap:24px">{mesh}'
            f'{rules if plan.rules else "<p><i>no rules: every variable replicated</i></p>"}'
            "</div></div>")


def rules_html(rules: pd.DataFrame) -> str:
    """The rules frame: each rule, what it matches and wins."""
    rows = [
        [_e(r["index"]), f"<code>{_e(r['key'])}</code>", f"<code>{_e(r['axes'])}</code>",
         _e(r["matches"]), _e(r["wins"]), _e(r["status"])]
        for r in rules.to_dict("records")
    ]
    return _table(["#", "key", "axes", "matches", "wins", "status"], rows)


def activations_html(activations: pd.DataFrame) -> str:
    """The activations frame; outputs whose requested layout XLA dropped are highlighted."""
    rows, classes = [], []
    frame: Any = activations
    for a in frame.itertuples(index=False):
        rows.append([
            f"<code>{_e(a.label)}</code>", _e(a.shape),
            f"<code>{_e(format_spec(a.requested_spec) if a.requested_spec is not None else '')}"
            "</code>",
            f"<code>{_e(format_spec(a.actual_spec))}</code>", _e(a.shard_shape),
            _e(human_bytes(a.bytes_per_device or 0)), _e(a.ok.upper() if a.ok == "dropped"
                                                         else a.ok),
        ])
        classes.append("sv-row-error" if a.ok == "dropped" else "")
    return _table(["output path", "shape", "requested", "actual", "shard", "per device", "ok"],
                  rows, classes)


def collectives_html(frame: pd.DataFrame, timed: bool) -> str:
    """The collectives frame; with ``timed`` (a target with published links)
    each one's network and estimated time."""
    if frame.empty:
        return "<p>No collectives: every device computes its part alone.</p>"

    rows = [[str(i), _e(c["kind"]), f"<code>{_e(c['layer'])}</code>", _e(c["pass"]),
             _e(c["over"]), _e(human_bytes(c["bytes_per_device"]))]
            + ([_e(c["network"]), _e(human_seconds(c["seconds"]))] if timed else [])
            + [f"<code>{_e(short_file(c['source']))}</code>" if c["source"] else "—"]
            for i, c in enumerate(frame.to_dict("records"))]
    headers = ["#", "kind", "layer", "pass", "over axes", "bytes per device"]
    return _table(headers + (["network", "time (estimate)"] if timed else []) + ["source"], rows)


def report_html(report, all_rows: bool = False) -> str:
    """The report as HTML; ``all_rows`` lists every variable (else the first 200)."""
    max_rows = len(report.variables) if all_rows else 200
    parts = [CSS, '<div class="shardviz-report">', f"<p><b>{_e(summary_line(report))}</b></p>"]
    for note in report.notes:
        parts.append(f"<p><i>note: {_e(note)}</i></p>")
    if report.problem_list:
        parts.append(f"<details open><summary>Problems ({len(report.problem_list)})</summary>"
                     + problems_html(report.problem_list) + "</details>")
    if report.plan.rules:
        parts.append("<details><summary>Rules</summary>" + rules_html(report.rules)
                     + "</details>")
    parts.append(f"<details open><summary>Variables ({len(report.variables)})</summary>"
                 + variables_html(report.variables, report.problem_list, max_rows)
                 + "</details>")
    if report.pass_name is not None:

        parts.append(f"<details open><summary>Activations ({report.pass_name})"
                     f"</summary>{activations_html(report.activations)}</details>")
        parts.append(f"<details open><summary>Collectives ({len(report.collectives)})"
                     f"</summary>{collectives_html(report.collectives, report.target.timed)}"
                     "</details>")
        if report.step_setup is not None:
            parts.append(f"<p>Train step: {_e(report.step_setup.describe())}</p>")
        parts.append(f"<p>{_e(memory_line(report))}</p>")
        if len(report.peak):
            parts.append("<details><summary>What is live at the peak</summary>"
                         f"{peak_view.html(report.peak, report.peak_note)}</details>")
        if estimate_line(report):
            parts.append(f"<p>{_e(estimate_line(report))}</p>")
        if len(report.op_times):
            parts.append("<details><summary>Where the step's time goes</summary>"
                         f"{time_view.html(report.op_times, time_view.note(report))}</details>")
    else:

        if fit_text(report):
            parts.append(f"<p>{_e(verdict_line(report))}</p>")
    parts.append("</div>")
    return "".join(parts)
