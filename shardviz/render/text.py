"""Terminal rendering of a Report with rich: summary, problems, tables."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from ..format import format_mesh, format_spec, human_bytes, human_seconds, plural

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import JustifyMethod

    from ..errors import Problem

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
    mesh = format_mesh(s["mesh"], times=" x ")
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


def problems_table(problems: Sequence[Problem]):
    """The problems, most severe first (a Report's ``problem_list``), as a rich Table."""
    from rich.table import Table

    table = Table(title="Problems", show_lines=False, expand=False)
    for col in ("severity", "kind", "where", "message", "hint"):
        # Messages wrap between words; the short columns never wrap.
        table.add_column(col, overflow="fold", no_wrap=col in ("severity", "kind"),
                         ratio=2 if col in ("message", "hint") else None)
    for p in problems:
        where = p.path or p.rule or p.layer or ""
        table.add_row(f"[{SEVERITY_STYLE[p.severity]}]{p.severity}[/]", p.kind, where,
                      p.message, p.hint)
    return table


def fitted_table(title: str, columns: list[tuple[str, str]], rows: list[list[str]],
                 width: int | None, drop: tuple[str, ...], caption: str = ""):
    """A rich Table whose cells never break inside a word: when the table is
    wider than ``width``, columns are dropped in the order ``drop`` gives,
    and the caption says which. Only the first column (a path) may fold, and
    only when the table is still too wide without every droppable column.

    ``columns`` are ``(name, justify)``; cells may hold rich markup.
    """
    from rich.table import Table
    from rich.text import Text

    names = [name for name, _ in columns]
    size = {name: max([len(name)] + [len(Text.from_markup(r[k]).plain) for r in rows])
            for k, name in enumerate(names)}
    kept = list(names)

    def total() -> int:
        return sum(size[n] + 3 for n in kept) + 1

    dropped = []
    for name in drop:
        if width is None or total() <= width:
            break
        if name not in kept:  # a column this table does not have (a train step's pass, ...)
            continue
        kept.remove(name)
        dropped.append(name)
    fold_first = width is not None and total() > width
    notes = [caption] if caption else []
    if dropped:
        notes.append(f"{', '.join(dropped)} not shown at {width} columns; see --json or "
                     "a wider terminal")
    table = Table(title=title, expand=False, caption="; ".join(notes) or None)
    for k, (name, justify) in enumerate(columns):
        if name in kept:
            table.add_column(name, justify=cast("JustifyMethod", justify),
                             no_wrap=not (k == 0 and fold_first), overflow="fold")
    for r in rows:
        table.add_row(*[cell for name, cell in zip(names, r) if name in kept])
    return table


def variables_table(frame: pd.DataFrame, max_rows: int | None = 40, width: int | None = None):
    """The variables frame as a rich Table that fits ``width`` columns."""
    shown: Any = frame if max_rows is None else frame.head(max_rows)
    rows = []
    for v in shown.itertuples(index=False):
        error = v.status == "error"
        style = STATUS_STYLE[v.status]
        rows.append([
            v.path, _shape(v.shape), v.dtype,
            f"{tuple(v.spec)!r}" if error else format_spec(v.spec),
            v.rule or "—", _shape(v.shard_shape), human_bytes(v.bytes_per_device),
            f"[{style}]{v.status}[/]" if style else v.status,
        ])
    more = (f"... {len(frame) - max_rows} more; see report.variables"
            if max_rows is not None and len(frame) > max_rows else "")
    columns = [("path", "left"), ("shape", "right"), ("dtype", "left"), ("spec", "left"),
               ("rule", "left"), ("shard", "right"), ("per device", "right"),
               ("status", "left")]
    return fitted_table("Variables", columns, rows, width,
                        ("dtype", "shape", "shard", "rule", "per device"), more)


def activations_table(frame: pd.DataFrame, pass_name: str, max_rows: int | None = 40,
                      width: int | None = None):
    """The activations frame of ``pass_name`` as a rich Table that fits ``width`` columns."""
    shown: Any = frame if max_rows is None else frame.head(max_rows)
    rows = [[a.label, _shape(a.shape),
             format_spec(a.requested_spec) if a.requested_spec is not None else "—",
             format_spec(a.actual_spec), _shape(a.shard_shape),
             human_bytes(a.bytes_per_device or 0), OK_STYLE[a.ok]]
            for a in shown.itertuples(index=False)]
    more = (f"... {len(frame) - max_rows} more; see report.activations"
            if max_rows is not None and len(frame) > max_rows else "")
    columns = [("output path", "left"), ("shape", "right"), ("requested", "left"),
               ("actual", "left"), ("shard", "right"), ("per device", "right"), ("ok", "left")]
    return fitted_table(f"Activations ({pass_name})", columns, rows, width,
                        ("shape", "shard", "per device"), more)


def collectives_table(frame: pd.DataFrame, timed: bool, width: int | None = None):
    """The collectives frame as a rich Table that fits ``width`` columns; with
    ``timed`` each one's network and estimated time."""
    columns = [("#", "right"), ("kind", "left"), ("layer", "left"), ("pass", "left"),
               ("over axes", "left"), ("bytes", "right")]
    if timed:
        columns += [("network", "left"), ("time (estimate)", "right")]
    columns.append(("source", "left"))
    rows = []
    for i, c in enumerate(frame.to_dict("records")):
        row = [str(i), c["kind"] + (" (async)" if c["async"] else ""), c["layer"] or "—",
               c["pass"], c["over"], human_bytes(c["bytes_per_device"])]
        if timed:
            row += [c["network"], human_seconds(c["seconds"])]
        row.append(os.path.basename(c["source"]) if c["source"] else "—")
        rows.append(row)
    caption = ("report.why(#) or --explain says why each is there" if rows
               else "none: every device computes its part alone")
    return fitted_table("Collectives (compiled HLO, per device)", columns, rows, width,
                        ("source", "pass", "bytes", "network"), caption)


def memory_line(report) -> str:
    m = report.memory.iloc[0]
    flops = f", {report.flops:,.0f} flops" if report.flops is not None else ""
    line = (f"Memory per device (XLA): arguments {human_bytes(m['argument_bytes'])}, outputs "
            f"{human_bytes(m['output_bytes'])}, temporaries {human_bytes(m['temp_bytes'])}"
            + (f", and {human_bytes(m['unread_bytes'])} of arguments it never reads"
               if m["unread_bytes"] else "") + flops)
    return line + fit_text(report) + cache_text(report)


def cache_text(report) -> str:
    """Where the compiler's figures came from, when not from a compile just now."""
    return (" (the compiler's figures read from shardviz's compile cache)"
            if report.from_cache else "")


def fit_text(report) -> str:
    """``"; needs 4.9 GiB of 14.9 GiB on v5e:4x4: fits"``, or nothing on the CPU."""
    m = report.memory.iloc[0]
    if m["capacity_bytes"] is None or m["capacity_bytes"] != m["capacity_bytes"]:
        return ""
    needed = m["total_bytes"] if m["total_bytes"] is not None else m["variable_bytes"]
    verdict = verdict_word(m["fits"])
    estimate = " (estimate)" if m["estimate"] else ""
    peak = m.get("peak_bytes")
    # What the compiler checks is the peak; say it where it is what makes a program fit.
    at_peak = (f" ({human_bytes(peak)} live at the peak)" if m["fits"] and peak is not None
               and peak == peak and needed > m["capacity_bytes"] else "")
    needs = "needs" if m["total_bytes"] is not None else "the variables alone need"
    return (f"; {needs} {human_bytes(needed)}{at_peak} of {human_bytes(m['capacity_bytes'])} "
            f"per chip on {report.target.label}{estimate}: {verdict}")


def verdict_word(fits) -> str:
    """How every view says the verdict: ``fits``, ``DOES NOT FIT``, or, where
    nothing was compiled and the variables alone fit, that it is unknown.

    >>> verdict_word(True), verdict_word(False), verdict_word(None)
    ('fits', 'DOES NOT FIT', 'UNKNOWN, nothing was compiled')
    """
    if fits is None or fits != fits:
        return "UNKNOWN, nothing was compiled"
    return "fits" if fits else "DOES NOT FIT"


def estimate_line(report) -> str:
    """One line of :attr:`Report.estimate`, or nothing."""
    e = report.estimate
    if e.empty:
        return ""
    parts = [f"{row.part} {human_seconds(row.seconds)}" + (" (bound)" if row.bound else "")
             for row in e.itertuples(index=False)]
    return (f"Step time on {report.target.label} (estimates): " + ", ".join(parts)
            + f". {report.estimate_checked}")


def report_renderables(report, max_rows: int | None = 40, width: int | None = None):
    """The report for a terminal of ``width`` columns (None: any width)."""
    from rich.text import Text

    yield Text(summary_line(report), style="bold")
    for note in report.notes:
        yield Text("note: " + note, style="dim")
    if report.problem_list:
        yield problems_table(report.problem_list)
    yield variables_table(report.variables, max_rows, width)
    if report.pass_name is not None:
        yield activations_table(report.activations, report.pass_name, max_rows, width)
        yield collectives_table(report.collectives, report.target.timed, width)
        if report.step_setup is not None:
            yield Text("Train step: " + report.step_setup.describe())
        yield Text(memory_line(report))
        if estimate_line(report):
            yield Text(estimate_line(report))
    elif fit_text(report):
        yield Text(verdict_line(report))


def verdict_line(report) -> str:
    """The fit verdict when no pass compiled (the variables alone, or the
    compiler's refusal)."""
    return (f"Memory per device: variables {human_bytes(report.variable_bytes_per_device)}"
            + fit_text(report) + cache_text(report))


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
    return render_to_text(report_renderables(report, max_rows, width), width)


def jax_text(shape, sharding, *, width: int = 80) -> str:
    """What ``jax.debug.visualize_sharding`` prints for a 1-D or 2-D tensor,
    as plain text (never written to the notebook)."""
    from .._adapters.jax import visualize_sharding_text

    return visualize_sharding_text(shape, sharding, width)
