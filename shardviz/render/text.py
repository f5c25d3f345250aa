"""Terminal rendering of a Report with rich: summary, problems, tables."""

from __future__ import annotations

import io

from ..checks import human_bytes
from ..geometry import format_spec

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
STATUS_STYLE = {"sharded": "green", "replicated": "", "error": "bold red"}


def _shape(shape) -> str:
    if shape is None:
        return "—"
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def summary_line(report) -> str:
    s = report.summary()
    mesh = " x ".join(f"{k}={v}" for k, v in s["mesh"].items())
    abstract = " (abstract)" if s["abstract_mesh"] else ""
    p = s["problems"]
    return (
        f"{s['model']}: {s['variables']} variables, {s['params']:,} params "
        f"({human_bytes(s['variable_bytes'])}) on mesh {mesh}{abstract}; "
        f"{s['sharded']} sharded, {s['replicated']} replicated, {s['failing']} failing; "
        f"{human_bytes(s['variable_bytes_per_device'])} of variables per device; "
        f"{p['error']} errors, {p['warning']} warnings, {p['info']} notes"
    )


def problems_table(report):
    from rich.table import Table

    table = Table(title="Problems", show_lines=False, expand=False)
    for col in ("severity", "kind", "where", "message", "hint"):
        table.add_column(col, overflow="fold")
    for p in report.problem_list:
        where = p.path or p.rule or p.layer or ""
        table.add_row(f"[{SEVERITY_STYLE[p.severity]}]{p.severity}[/]", p.kind, where,
                      p.message, p.hint)
    return table


def variables_table(report, max_rows: int | None = 40):
    from rich.table import Table

    table = Table(title="Variables", expand=False)
    for col, justify in (("path", "left"), ("shape", "right"), ("dtype", "left"),
                         ("spec", "left"), ("rule", "left"), ("shard", "right"),
                         ("per device", "right"), ("status", "left")):
        table.add_column(col, justify=justify, no_wrap=col in ("path", "spec"),
                         overflow="ellipsis" if col == "rule" else "fold")
    layouts = report.variable_layouts
    shown = layouts if max_rows is None else layouts[:max_rows]
    for vl in shown:
        g = vl.geometry
        rule = (report.plan.rules[vl.match.rule].key if vl.source == "rule"
                else "<own layout>" if vl.source == "own" else "—")
        style = STATUS_STYLE[vl.status]
        status = f"[{style}]{vl.status}[/]" if style else vl.status
        table.add_row(
            vl.info.path, _shape(vl.info.shape), vl.info.dtype,
            format_spec(g.spec) if vl.error is None else f"{tuple(vl.axes)!r}",
            rule, _shape(g.shard_shape) if vl.error is None else "—",
            human_bytes(g.bytes_per_device), status,
        )
    if max_rows is not None and len(layouts) > max_rows:
        table.caption = f"... {len(layouts) - max_rows} more; see report.variables"
    return table


def report_renderables(report, max_rows: int | None = 40):
    from rich.text import Text

    yield Text(summary_line(report), style="bold")
    for note in report.scan.notes:
        yield Text("note: " + note, style="dim")
    if report.problem_list:
        yield problems_table(report)
    yield variables_table(report, max_rows)
    extra = getattr(report, "extra_renderables", None)
    if extra is not None:
        yield from extra()


def render_to_text(renderables, width: int = 120) -> str:
    """Render rich renderables to plain text (no colour codes)."""
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False,
                      legacy_windows=False, soft_wrap=False)
    for r in renderables:
        console.print(r)
    return buf.getvalue().rstrip("\n")


def report_text(report, width: int = 120, max_rows: int | None = 40) -> str:
    return render_to_text(report_renderables(report, max_rows), width)
