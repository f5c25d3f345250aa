"""The compiled program's memory over its schedule and at its peak, by
role: the picture a memory viewer draws after a run, drawn from the
compiler's buffer assignment before any hardware. Takes the ``timeline``
and ``peak`` frames."""

from __future__ import annotations

import pandas as pd

from ..format import human_bytes
from .figure import ShardvizFigure, byte_unit, header, new_figure
from .palette import FIGURE_STATUS_COLOURS, ROLE_COLOURS
from .peak_view import by_layer, by_role

TOP_LAYERS = 12


def peak_figure(timeline: pd.DataFrame, peak: pd.DataFrame, capacity: float | None,
                position: int | None, title: str) -> ShardvizFigure:
    """Left: live bytes by role over the schedule, stacked, with the peak's
    position and the chip's ``capacity`` (None on the simulated CPU) marked.
    Right: the largest layers at the peak, each bar split by role."""
    fig = new_figure(12, 4.6)
    roles = list(by_role(peak)["role"]) or sorted(set(timeline["role"]))
    wide = timeline.pivot_table(index="position", columns="role", values="bytes",
                                aggfunc="max", fill_value=0)
    order = [r for r in roles if r in wide.columns] + \
        [r for r in wide.columns if r not in roles]
    drawn = max(float(wide.sum(axis=1).max()) if len(wide) else 0.0,
                float(peak["bytes"].sum()) if len(peak) else 0.0, 1.0)
    # The chip's line is drawn where it is near what the program holds; far above, it is named.
    near = capacity is not None and capacity <= 2 * drawn
    scale, unit = byte_unit(max(drawn, capacity or 0.0) if near else drawn)
    left = fig.add_axes((0.06, 0.14, 0.42, 0.68))
    if len(wide):
        left.stackplot(wide.index, *[wide[r] / scale for r in order],
                       colors=[ROLE_COLOURS.get(r, "#DDDDDD") for r in order], labels=order,
                       linewidth=0)
    if capacity and near:
        left.axhline(capacity / scale, color=FIGURE_STATUS_COLOURS["error"], linestyle="--",
                     linewidth=1.2, label=f"capacity {human_bytes(capacity)}")
    elif capacity:
        left.plot([], [], " ", label=f"capacity {human_bytes(capacity)} (far above)")
    if position is not None:
        left.axvline(position, color="black", linewidth=0.8, linestyle=":",
                     label=f"peak: {human_bytes(float(peak['bytes'].sum()))}")
    left.set_xlabel("position in the compiled program's schedule", fontsize=8)
    left.set_ylabel(f"live bytes per device ({unit})", fontsize=8)
    left.tick_params(labelsize=7)
    left.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    right = fig.add_axes((0.76, 0.14, 0.22, 0.68))
    layers = by_layer(peak, top=TOP_LAYERS * len(ROLE_COLOURS))
    names: list[str] = []
    if len(layers):
        per = layers.pivot_table(index="layer", columns="role", values="bytes", aggfunc="sum",
                                 fill_value=0)
        totals = per.sum(axis=1).sort_values(ascending=False)
        names = list(totals.index[:TOP_LAYERS])[::-1]
        scale, unit = byte_unit(float(totals.iloc[0]))
        base = [0.0] * len(names)
        for role in [r for r in order if r in per.columns]:
            values = [float(per.loc[n, role]) / scale for n in names]
            right.barh(range(len(names)), values, left=base, color=ROLE_COLOURS.get(role),
                       height=0.7)
            base = [b + v for b, v in zip(base, values)]
    right.set_yticks(range(len(names)))
    right.set_yticklabels([n if len(n) <= 32 else "…" + n[-31:] for n in names], fontsize=6.5)
    right.set_xlabel(f"bytes at the peak ({unit})", fontsize=8)
    right.tick_params(axis="x", labelsize=7)
    header(fig, [("Memory over the program, by role, and the largest layers at its peak",
                  10, "bold", "black"), (title, 8, "normal", "#555555")])
    return fig
