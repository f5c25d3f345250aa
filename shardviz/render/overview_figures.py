"""Pictures of many things at once: two reports side by side, many
variables' tiles in one grid, and a sweep over mesh shapes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..format import format_spec
from .figure import Board, ShardvizFigure, byte_unit, draw_panel, header, new_figure, plan_line
from .palette import FIGURE_STATUS_COLOURS, KIND_COLOURS, STACK_COLOURS
from .tiles import tile_layout


def compare_figure(a, b, labels=("A", "B")) -> ShardvizFigure:
    """Two reports side by side: memory per device, collective bytes by kind,
    and problems by severity."""
    fig = new_figure(11, 3.6)
    reports = (a, b)
    ax1 = fig.add_axes((0.06, 0.16, 0.22, 0.62))
    stack_names = list(dict.fromkeys(n for r in reports for n in r.memory_parts))
    bottoms = [0.0, 0.0]
    scale, unit = byte_unit(max(sum(r.memory_parts.values()) for r in reports))
    for name in stack_names:
        values = [r.memory_parts.get(name, 0) / scale for r in reports]
        ax1.bar(labels, values, bottom=bottoms, color=STACK_COLOURS[name], label=name)
        bottoms = [x + y for x, y in zip(bottoms, values)]
    ax1.set_title(f"memory per device ({unit})", fontsize=9)
    ax1.tick_params(labelsize=7)
    ax1.legend(fontsize=6, frameon=False)
    ax2 = fig.add_axes((0.39, 0.16, 0.25, 0.62))
    by_kind = [r.collectives.groupby("kind")["bytes_per_device"].sum().to_dict()
               for r in reports]
    kinds = [k for k in KIND_COLOURS if any(k in b for b in by_kind)]
    width = 0.38
    totals = [sum(b.values()) for b in by_kind]
    cscale, cunit = byte_unit(max(totals + [1]))
    for j, b in enumerate(by_kind):
        values = [b.get(k, 0) / cscale for k in kinds]
        ax2.bar([i + (j - 0.5) * width for i in range(len(kinds))], values, width,
                label=labels[j], color=["#4477AA", "#EE6677"][j])
    ax2.set_xticks(range(len(kinds)))
    ax2.set_xticklabels(kinds, fontsize=7, rotation=15)
    ax2.set_title(f"collective bytes per device ({cunit})", fontsize=9)
    ax2.tick_params(labelsize=7)
    ax2.legend(fontsize=7, frameon=False)
    if not kinds:
        ax2.text(0.5, 0.5, "no collectives" if all(r.pass_name for r in reports)
                 else "no forward pass",
                 ha="center", va="center", transform=ax2.transAxes, fontsize=8)
    ax3 = fig.add_axes((0.72, 0.16, 0.25, 0.62))
    severities = ("error", "warning", "info")
    for j, r in enumerate(reports):
        counts = [sum(1 for p in r.problem_list if p.severity == s) for s in severities]
        ax3.bar([i + (j - 0.5) * width for i in range(3)], counts, width, label=labels[j],
                color=["#4477AA", "#EE6677"][j])
    ax3.set_xticks(range(3))
    ax3.set_xticklabels(severities, fontsize=7)
    most = max([sum(1 for p in r.problem_list if p.severity == s) for r in reports
                for s in severities] + [1])
    ax3.set_ylim(0, most * 1.15)
    from matplotlib.ticker import MaxNLocator

    ax3.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax3.set_title("problems", fontsize=9)
    ax3.tick_params(labelsize=7)
    ax3.legend(fontsize=7, frameon=False)
    for j, r in enumerate(reports):
        line = plan_line(r.model_name, r.plan.mesh_dict, r.pass_name)
        fig.text(0.01, 0.97 - 0.06 * j, f"{labels[j]}: {line}", fontsize=8, va="top")
    return fig


GRID_CELL = (2.5, 2.2)
"""Inches per variable in :func:`grid_figure`: room for a 9 pt name on two
lines, its shape and spec at 7.5 pt, and tiles labelled at 7.5 pt."""


def _two_lines(path: str, chars: int) -> str:
    """``path`` on at most two lines of ``chars`` characters, broken at a
    ``/`` where it can be; what does not fit is elided at the front.

    >>> _two_lines("decoder/block_0/attention/query/kernel", 24).split()
    ['decoder/block_0/', 'attention/query/kernel']
    >>> _two_lines("a" * 30 + "b" * 30, 24).split()
    ['…aaaaaaaaaaaaaaaaabbbbbb', 'bbbbbbbbbbbbbbbbbbbbbbbb']
    """
    if len(path) <= chars:
        return path
    cut = path.rfind("/", 0, chars + 1)
    if 0 < cut and len(path) - cut - 1 <= chars:
        return path[:cut + 1] + "\n" + path[cut + 1:]
    if len(path) > 2 * chars:
        path = "…" + path[-(2 * chars - 1):]
    return path[:chars] + "\n" + path[chars:]


def grid_figure(cells: Sequence[tuple[str, Any, str]], coords: Any, title: str,
                columns: int = 5) -> ShardvizFigure:
    """Many variables' tiles in one figure, one cell per variable, with labels
    readable at the size the figure is shown (9 pt names, 7.5 pt details).
    ``cells``: ``(path, TensorGeometry, status)`` per variable; ``coords``:
    each device's mesh coordinates (``MeshView.coords``); ``title``: the
    line after the count."""
    paths = [path for path, _, _ in cells]
    n = len(paths)
    columns = max(1, min(columns, n))
    grid_rows = math.ceil(n / columns)
    cell_w, cell_h = GRID_CELL
    top = 0.5
    fig = new_figure(cell_w * columns, cell_h * grid_rows + top)
    ax = Board(fig, (0.0, 0.0, 1.0, 1 - top / fig.get_figheight()), (0, columns), (0, grid_rows))
    chars = int((cell_w - 0.15) * 72 / (9 * 0.6))
    titles: list[tuple] = []
    for k, (path, g, status) in enumerate(cells):
        gx, gy = k % columns, k // columns
        layout = tile_layout(g.shape, g.indices())
        titles.append((gx + 0.5, gy + 0.1, _two_lines(path, chars),
                       FIGURE_STATUS_COLOURS["error"] if status == "error" else "black", 9))
        titles.append((gx + 0.5, gy + 0.235, f"{g.shape} {format_spec(g.spec)}", "#444444", 7.5))
        panel = layout.panels[0]
        draw_panel(ax, layout, panel, gx + 0.06, gy + 0.3, 0.88, 0.65, coords, 7.5,
                    labels=len(layout.tiles_in(panel)) <= 16, inches_per_unit=cell_w,
                    inches_per_unit_y=cell_h)
    ax.labels(titles)
    header(fig, [(f"{n} variables — {title}", 10, "bold", "black")])
    return fig


def sweep_figure(frame) -> ShardvizFigure:
    """A sweep (:func:`shardviz.sweep`): bytes per device and collective
    bytes per mesh shape, side by side; meshes where the rules fail are
    drawn empty with their error count."""
    n = len(frame)
    fig = new_figure(max(5.0, 1.1 * n + 2.0), 3.6)
    ax = fig.add_axes((0.1, 0.28, 0.85, 0.52))
    xs = np.arange(n)
    ok = frame["errors"].to_numpy() == 0
    memory = frame["bytes_per_device"].fillna(0).to_numpy(dtype=float)
    comm = frame["collective_bytes"].fillna(0).to_numpy(dtype=float)
    largest = max(memory.max() if n else 0.0, comm.max() if n else 0.0, 1.0)
    scale, unit = byte_unit(largest)
    ax.bar(xs - 0.2, np.where(ok, memory / scale, 0), 0.4, color=STACK_COLOURS["variables"],
           label="bytes per device")
    if frame["collective_bytes"].notna().any():
        ax.bar(xs + 0.2, np.where(ok, comm / scale, 0), 0.4, color=KIND_COLOURS["all-reduce"],
               label="collective bytes per device")
    for x, good, errors in zip(xs, ok, frame["errors"]):
        if not good:
            ax.text(float(x), 0.02 * largest / scale, f"{errors} error{'s' if errors != 1 else ''}",
                    ha="center", va="bottom", color=FIGURE_STATUS_COLOURS["error"], fontsize=8, rotation=90)
    if "fits" in frame and frame["fits"].notna().any():
        for x, fits in zip(xs, frame["fits"]):
            if fits is False:
                ax.text(float(x), largest / scale, "does not fit", ha="center", va="top",
                        color=FIGURE_STATUS_COLOURS["error"], fontsize=7, rotation=90)
    ax.set_xticks(xs)
    ax.set_xticklabels(frame["mesh"], fontsize=7, rotation=20, ha="right")
    ax.set_ylabel(unit, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, frameon=False, loc="lower left", bbox_to_anchor=(0, 1.01), ncol=2)
    fig.text(0.02, 0.96, f"one rule set over {n} mesh shapes", fontsize=10, weight="bold",
             va="top")
    return fig
