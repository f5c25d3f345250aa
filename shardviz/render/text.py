"""Terminal rendering of a Report with rich: summary, problems, tables."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, cast

from ..format import format_spec, human_bytes, human_seconds, plural

if TYPE_CHECKING:
    from rich.console import JustifyMethod

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
STATUS_STYLE = {"sharded": "green", "replicated": "", "error": "bold red"}
OK_STYLE = {"": "", "yes": "[green]yes[/]", "dropped": "[bold red]DROPPED[/]",
            "uneven": "[yellow]uneven[/]"}


def _shape(shape) -> str:
    if shape is None:
        return "—"
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def summary_line(report) -> str:
    s = report.summary()
    mesh = " x ".join(f"{k}={v}" for k, v in s["mesh"].items())
    abstract = " (abstract)" if s["abstract_mesh"] else ""
    if s.get("target", "cpu") != "cpu":
        abstract += f" of {s['target']}"
    p = s["problems"]
    traced = ""
    if s["traced"]:
        traced = (f"; {s['traced']} forward pass: {plural(s['collectives'], 'collective')}, "
                  f"{human_bytes(s['collective_bytes'])} per device")
    return (
        f"{s['model']}: {plural(s['variables'], 'variable')}, {plural(s['params'], 'param')} "
        f"({human_bytes(s['variable_bytes'])}) on mesh {mesh}{abstract}; "
        f"{s['sharded']} sharded, {s['replicated']} replicated, {s['failing']} failing; "
        f"{human_bytes(s['variable_bytes_per_device'])} of variables per device; "
        f"{plural(p['error'], 'error')}, {plural(p['warning'], 'warning')}, "
        f"{plural(p['info'], 'note')}{traced}"
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
        table.add_column(col, justify=cast("JustifyMethod", justify),
                         no_wrap=col in ("path", "shape", "spec", "shard"),
                         overflow="ellipsis" if col == "rule" else "fold")
    frame = report.variables
    shown = frame if max_rows is None else frame.head(max_rows)
    for v in shown.itertuples(index=False):
        error = v.status == "error"
        style = STATUS_STYLE[v.status]
        status = f"[{style}]{v.status}[/]" if style else v.status
        table.add_row(
            v.path, _shape(v.shape), v.dtype,
            f"{tuple(v.spec)!r}" if error else format_spec(v.spec),
            v.rule or "—", _shape(v.shard_shape), human_bytes(v.bytes_per_device), status,
        )
    if max_rows is not None and len(frame) > max_rows:
        table.caption = f"... {len(frame) - max_rows} more; see report.variables"
    return table


def activations_table(report, max_rows: int | None = 40):
    from rich.table import Table

    table = Table(title=f"Activations ({report.pass_name})", expand=False)
    for col in ("output path", "shape", "requested", "actual", "shard", "per device", "ok"):
        table.add_column(col, no_wrap=col in ("output path", "shape", "requested", "actual",
                                              "shard"),
                         justify="right" if col in ("shape", "shard", "per device") else "left")
    frame = report.activations
    shown = frame if max_rows is None else frame.head(max_rows)
    for a in shown.itertuples(index=False):
        table.add_row(a.label, _shape(a.shape),
                      format_spec(a.requested_spec) if a.requested_spec is not None else "—",
                      format_spec(a.actual_spec), _shape(a.shard_shape),
                      human_bytes(a.bytes_per_device or 0), OK_STYLE[a.ok])
    if max_rows is not None and len(frame) > max_rows:
        table.caption = f"... {len(frame) - max_rows} more; see report.activations"
    return table


def collectives_table(report):
    from rich.table import Table

    timed = not report.target.is_cpu
    table = Table(title="Collectives (compiled HLO, per device)", expand=False)
    columns = ["kind", "layer", "pass", "over axes", "bytes"]
    if timed:
        columns += ["network", "time (estimate)"]
    for col in columns:
        table.add_column(col, justify="right" if col in ("bytes", "time (estimate)") else "left")
    frame = report.collectives
    for c in frame.to_dict("records"):
        row = [c["kind"] + (" (async)" if c["async"] else ""), c["layer"] or "—",
               c["pass"], c["over"], human_bytes(c["bytes_per_device"])]
        if timed:
            row += [c["network"], human_seconds(c["seconds"])]
        table.add_row(*row)
    if frame.empty:
        table.caption = "none: every device computes its part alone"
    return table


def memory_line(report) -> str:
    m = report.memory.iloc[0]
    flops = f", {report.flops:,.0f} flops" if report.flops is not None else ""
    line = (f"Memory per device (XLA): arguments {human_bytes(m['argument_bytes'])}, outputs "
            f"{human_bytes(m['output_bytes'])}, temporaries {human_bytes(m['temp_bytes'])}{flops}")
    return line + fit_text(report)


def fit_text(report) -> str:
    """``"; needs 4.9 GiB of 14.9 GiB on v5e:4x4: fits"``, or nothing on the CPU."""
    m = report.memory.iloc[0]
    if m["capacity_bytes"] is None or m["capacity_bytes"] != m["capacity_bytes"]:
        return ""
    needed = m["total_bytes"] if m["total_bytes"] is not None else m["variable_bytes"]
    verdict = "fits" if m["fits"] else "DOES NOT FIT"
    estimate = " (estimate)" if m["estimate"] else ""
    return (f"; needs {human_bytes(needed)} of {human_bytes(m['capacity_bytes'])} per chip on "
            f"{report.target.label}{estimate}: {verdict}")


def estimate_line(report) -> str:
    """One line of :attr:`Report.estimate`, or nothing."""
    e = report.estimate
    if e.empty:
        return ""
    parts = [f"{row.part} {human_seconds(row.seconds)}" + (" (bound)" if row.bound else "")
             for row in e.itertuples(index=False)]
    return f"Step time on {report.target.label} (estimates): " + ", ".join(parts)


def report_renderables(report, max_rows: int | None = 40):
    from rich.text import Text

    yield Text(summary_line(report), style="bold")
    for note in report.notes:
        yield Text("note: " + note, style="dim")
    if report.problem_list:
        yield problems_table(report)
    yield variables_table(report, max_rows)
    if report.pass_name is not None:
        yield activations_table(report, max_rows)
        yield collectives_table(report)
        yield Text(memory_line(report))
        if estimate_line(report):
            yield Text(estimate_line(report))


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


def jax_text(shape, sharding, *, width: int = 80) -> str:
    """What ``jax.debug.visualize_sharding`` prints for a 1-D or 2-D tensor,
    as plain text (never written to the notebook)."""
    from .._adapters.jax import visualize_sharding_text

    return visualize_sharding_text(shape, sharding, width)
