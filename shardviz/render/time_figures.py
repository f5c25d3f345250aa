"""Where a step's time goes: the compiled program's operations along the
step, by kind, and the layers that take the most time. Takes the
``op_times`` frame (every figure in it an estimate, from the operations'
fitted efficiencies)."""

from __future__ import annotations

import pandas as pd

from ..format import human_seconds
from ..trace.program_ops import KINDS
from .figure import ShardvizFigure, header, new_figure

TOP_LAYERS = 12
TIME_COLOURS = {
    "matmul": "#332288", "vector": "#88CCEE", "copy": "#DDCC77", "kernel": "#AA4499",
    "collective": "#CC6677", "prefetch": "#999933", "control": "#BBBBBB",
}
"""Colours of operation kinds in the step-time figure."""


def by_layer(op_times: pd.DataFrame, top: int = TOP_LAYERS) -> pd.DataFrame:
    """Seconds per layer and kind, for the ``top`` layers that take the most
    time; the rest summed into one ``other layers`` row.

    >>> ops = pd.DataFrame({"layer": ["a", "a", "b"], "kind": ["matmul", "vector", "matmul"],
    ...                     "seconds": [2.0, 1.0, 0.5]})
    >>> by_layer(ops, top=1).to_dict("records")
    [{'layer': 'a', 'kind': 'matmul', 'seconds': 2.0}, {'layer': 'a', 'kind': 'vector', \
'seconds': 1.0}, {'layer': 'other layers', 'kind': 'matmul', 'seconds': 0.5}]
    """
    ops = op_times.assign(layer=op_times["layer"].replace("", "(no layer)"))
    totals = ops.groupby("layer")["seconds"].sum().sort_values(ascending=False)
    kept = set(totals.index[:top])
    ops = ops.assign(layer=[x if x in kept else "other layers" for x in ops["layer"]])
    out = ops.groupby(["layer", "kind"], sort=False)["seconds"].sum().reset_index()
    rank = {name: i for i, name in enumerate([*totals.index[:top], "other layers"])}
    return out.sort_values(["layer", "seconds"], key=lambda c: c.map(rank) if c.name == "layer"
                           else -c).reset_index(drop=True)


def time_figure(op_times: pd.DataFrame, expected: float | None, title: str) -> ShardvizFigure:
    """Left: the step's operations in the compiler's order, one row per kind,
    each as long as its time. Right: the layers that take the most time,
    each bar split by kind."""
    fig = new_figure(12, 4.2)
    left = fig.add_axes((0.07, 0.16, 0.44, 0.64))
    start = op_times["seconds"].cumsum() - op_times["seconds"]
    total = float(op_times["seconds"].sum()) or 1.0
    scale, unit = (1e-3, "ms") if total >= 1e-3 else (1e-6, "µs")
    kinds = [k for k in KINDS if k in set(op_times["kind"])]
    for row, kind in enumerate(kinds):
        mine = op_times["kind"] == kind
        spans = [(s / scale, d / scale) for s, d in zip(start[mine], op_times["seconds"][mine])
                 if d > 0]
        left.broken_barh(spans, (row - 0.4, 0.8), facecolors=TIME_COLOURS[kind],
                         edgecolor="none")
    left.set_yticks(range(len(kinds)))
    left.set_yticklabels(kinds, fontsize=7.5)
    left.set_xlim(0, total / scale)
    left.set_xlabel(f"time along the step ({unit}; the device's sum of "
                    f"{human_seconds(total)})", fontsize=8)
    left.tick_params(axis="x", labelsize=7)
    left.invert_yaxis()
    right = fig.add_axes((0.70, 0.16, 0.28, 0.64))
    layers = by_layer(op_times)
    names = list(dict.fromkeys(layers["layer"]))[::-1]
    base = {n: 0.0 for n in names}
    for kind in kinds:
        part = layers[layers["kind"] == kind].set_index("layer")["seconds"]
        values = [float(part.get(n, 0.0)) / scale for n in names]
        right.barh(range(len(names)), values, left=[base[n] for n in names],
                   color=TIME_COLOURS[kind], height=0.7, label=kind)
        for n, v in zip(names, values):
            base[n] += v
    right.set_yticks(range(len(names)))
    right.set_yticklabels([n if len(n) <= 30 else "…" + n[-29:] for n in names], fontsize=6.5)
    right.set_xlabel(f"seconds per step by layer ({unit})", fontsize=8)
    right.tick_params(axis="x", labelsize=7)
    right.legend(fontsize=6.5, loc="lower right", frameon=False)
    step = f"expected step {human_seconds(expected)}; " if expected else ""
    header(fig, [("Where the step's time goes: each operation of the compiled program, "
                  "and the layers that take the most", 10, "bold", "black"),
                 (f"{title} — {step}estimates from efficiencies fitted to a chip's profiles",
                  8, "normal", "#555555")])
    return fig
