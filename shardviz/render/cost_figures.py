"""Pictures of what a plan costs: bytes per device, and the flow of layers
and the collectives XLA inserts between them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd
from matplotlib.patches import Rectangle

from ..format import human_bytes, human_seconds
from ..model.scan import layer_path
from .figure import Board, ShardvizFigure, byte_unit, header, new_figure
from .palette import FIGURE_STATUS_COLOURS, KIND_COLOURS, NETWORK_COLOURS, STACK_COLOURS
from .text import verdict_word

if TYPE_CHECKING:
    from ..report.mesh_view import MeshView

MAX_MEMORY_BARS = 32
"""Past this many devices, the memory picture draws one bar for them all
(under a NamedSharding every device holds one shard of every tensor, so every
device holds the same bytes)."""


def memory_figure(parts: dict[str, int], memory: pd.DataFrame, devices: pd.DataFrame,
                  mesh: MeshView, chip: str, title: str) -> ShardvizFigure:
    """Bytes per device, stacked: variables, optimizer state, inputs,
    outputs and XLA's temporaries (which add up to XLA's memory analysis),
    with the target chip's capacity when there is one.

    ``parts``: bytes by what holds them (a Report's ``memory_parts``);
    ``memory`` and ``devices``: those frames of a Report; ``mesh``: its
    MeshView; ``chip``: the target chip's name; ``title``: the plan line."""
    stacks = parts
    owner = dict(zip(devices["device"], devices["process"])) \
        if mesh.size <= MAX_MEMORY_BARS else {}
    placed = sorted(mesh.coords, key=lambda d: (owner.get(d, 0), d)) \
        if mesh.size <= MAX_MEMORY_BARS else []
    labels = [str(d) for d in placed] or [f"each of the {mesh.size:,} devices"]
    fig = new_figure(min(12, 5.5 + 0.2 * len(labels)), 3.4)
    ax = fig.add_axes((0.1, 0.16, 0.58, 0.62))
    row = memory.iloc[0]
    capacity = row["capacity_bytes"] if row["capacity_bytes"] == row["capacity_bytes"] else None
    scale, unit = byte_unit(max(sum(stacks.values()), capacity or 0))
    bottom = [0.0] * len(labels)
    for name, value in stacks.items():
        ax.bar(range(len(labels)), [value / scale] * len(labels), bottom=bottom,
               color=STACK_COLOURS[name], label=f"{name}: {human_bytes(value)}",
               width=0.8 if placed else 0.5)
        bottom = [b + value / scale for b in bottom]
    if capacity is not None:
        fits = row["fits"]
        estimate = " (estimate)" if row["estimate"] else ""
        status = "unknown" if fits is None or fits != fits else "ok" if fits else "error"
        ax.axhline(capacity / scale, color=FIGURE_STATUS_COLOURS[status],
                   linewidth=1.5, linestyle="--",
                   label=f"{chip} capacity: {human_bytes(capacity)}"
                   f" — {verdict_word(fits).lower()}{estimate}")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=7)
    hosts = sorted({owner.get(d, 0) for d in placed})
    if len(hosts) > 1:  # group the bars by host
        for h in hosts:
            members = [i for i, d in enumerate(placed) if owner.get(d, 0) == h]
            if members[0] > 0:
                ax.axvline(members[0] - 0.5, color="#888888", linewidth=0.8, linestyle=":")
            ax.text((members[0] + members[-1]) / 2, -0.16, f"host {h}", ha="center", va="top",
                    fontsize=7, transform=ax.get_xaxis_transform(), color="#444444")
    ax.set_xlabel("device" if placed else "", fontsize=8,
                  labelpad=14 if len(hosts) > 1 else 4)
    ax.set_ylabel(f"{unit} per device", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    total = sum(stacks.values())
    fig.text(0.02, 0.97, f"memory per device: {human_bytes(total)}", fontsize=10,
             weight="bold", va="top")
    fig.text(0.02, 0.9, title, fontsize=8, va="top", color="#444444")
    return fig


FLOW_ZOOM = 1.35
"""The flow picture is drawn this much larger than its first layout, fonts
and all, so that its smallest labels are about 8 pixels high at 80 dpi."""

AXIS_COLOURS = ("#4477AA", "#EE6677", "#228833", "#CCBB44", "#66CCEE", "#AA3377")


def flow_figure(activations: pd.DataFrame, collectives: pd.DataFrame, fixable: set[int],
                mesh: MeshView, hardware: Any, timed: bool, title: str,
                max_layers: int = 60) -> ShardvizFigure:
    """Layers in call order: how each output is split over the mesh axes,
    with the collectives XLA inserts marked at their layer, sized by bytes
    (by estimated time where ``timed``: a target with published links).

    ``activations`` and ``collectives``: those frames of a Report with a
    pass; ``fixable``: the collectives whose explanation found a fix;
    ``hardware``: the target's chip (its links name the networks);
    ``title``: the plan line."""
    acts = activations
    shown: list[Any] = list(acts.head(max_layers).itertuples(index=False))
    rows_of = collectives.to_dict("records")
    for i, c in enumerate(rows_of):
        c["index"], c["fix"] = i, i in fixable
    axis_colour: dict[Any, str] = {a: AXIS_COLOURS[i % len(AXIS_COLOURS)]
                   for i, a in enumerate(mesh.axis_names)}
    by_layer: dict = {}
    unplaced: list[dict] = []
    layer_rows = {layer_path(a.path): i for i, a in enumerate(shown)}
    for c in rows_of:
        first = c["layer"].split(", ")[0] if c["layer"] else ""
        row = layer_rows.get(first)
        (by_layer.setdefault(row, []) if row is not None else unplaced).append(c)
    rows = len(shown) + (1 if unplaced else 0)
    max_rank = max((len(a.shape) for a in shown), default=1)
    z = FLOW_ZOOM
    fig = new_figure((2.2 + 0.5 * max_rank + 3.4) * z, (0.9 + 0.3 * rows) * z)
    name_w, dims_x = 3.4, 3.6
    coll_x = dims_x + 0.95 * max_rank + 0.3
    ax = Board(fig, (0.01, 0.01, 0.98, 1 - 0.75 * z / fig.get_figheight()), (0, coll_x + 6.0),
               (0, rows))
    biggest = max(((c["seconds"] or 0) if timed else c["bytes_per_device"] for c in rows_of),
                  default=1) or 1
    names_out, dims_out, marks = [], [], []
    for i, a in enumerate(shown):
        name = a.label.replace("/output", "", 1)
        if len(name) > 42:
            name = "…" + name[-41:]
        names_out.append((name_w, i + 0.5, name, "black", 7 * z))
        spec = a.actual_spec or (None,) * len(a.shape)
        for d, (size, axis) in enumerate(zip(a.shape, spec)):
            x = dims_x + 0.95 * d
            names = axis if isinstance(axis, tuple) else ((axis,) if axis else ())
            face = axis_colour.get(getattr(names[0], "axis", names[0]), "#BBBBBB") if names else "#EEEEEE"
            ax.add_patch(Rectangle((x, i + 0.12), 0.88, 0.76, facecolor=face,
                                   edgecolor="#999999", linewidth=0.5))
            label = f"{size}" + (f"/{'+'.join(names)}" if names else "")
            dims_out.append((x + 0.44, i + 0.5, label, "white" if names else "#333333", 6 * z))
        if a.honored is False:
            ax.add_patch(Rectangle((dims_x - 0.05, i + 0.06), 0.95 * len(a.shape) + 0.02, 0.88,
                                   fill=False, edgecolor=FIGURE_STATUS_COLOURS["error"], linewidth=1.6))
            dims_out.append((coll_x - 0.1, i + 0.5, "✗", FIGURE_STATUS_COLOURS["error"], 9 * z))
        marks += _draw_collectives(ax, by_layer.get(i, []), coll_x, i, biggest, timed=timed,
                                   zoom=z)
    if unplaced:
        names_out.append((name_w, rows - 0.5, "(not in a layer)", "#444444", 7 * z))
        marks += _draw_collectives(ax, unplaced, coll_x, rows - 1, biggest, timed=timed, zoom=z)
    ax.labels(names_out, ha="right")
    ax.labels(dims_out)
    ax.labels(marks, ha="left")
    heading = f"layer outputs and collectives — {title}"
    more = f"  (first {max_layers} of {len(acts)} layers)" if len(acts) > max_layers else ""
    header(fig, [(heading + more, 9 * z, "bold", "black")])
    key = Board(fig, (0, 0, 1, 1), (0, fig.get_figwidth()), (0, fig.get_figheight()))
    x, items = 0.14 * z, []
    for a in mesh.axis_names:
        items.append((x, 0.5 * z, f"■ {a}", axis_colour[a], 8 * z))
        x += (0.25 + 0.07 * len(a)) * z
    if timed:
        hw = hardware
        for net in dict.fromkeys((hw.link, hw.between)):
            items.append((x, 0.5 * z, f"● {net}", NETWORK_COLOURS[net], 8 * z))
            x += (0.3 + 0.07 * len(net)) * z
    what = "estimated time" if timed else "bytes"
    items.append((x + 0.1 * z, 0.5 * z, f"dims: size/axis · ● #collective, area ∝ {what} · "
                  "✗ requested layout not honoured"
                  + (" · fix: report.why(#) found one" if fixable else ""), "#444444", 7 * z))
    key.labels(items, ha="left")
    return fig


def _draw_collectives(ax, collectives, x, row, biggest, per_row: int = 2, width: float = 2.7,
                      timed: bool = False, zoom: float = 1.0):
    """Markers, left to right; returns their labels. Area is proportional to
    bytes, or, on a target (``timed``), to the estimated time, and the
    colour is the network rather than the kind."""
    labels = []
    for j, c in enumerate(collectives[:per_row]):
        cx = x + 0.25 + j * width
        size = (c["seconds"] or 0) if timed else c["bytes_per_device"]
        colour = (NETWORK_COLOURS.get(c["network"], "#888888") if timed
                  else KIND_COLOURS.get(c["kind"], "#888888"))
        ax.scatter([cx], [row + 0.5], s=(15 + 160 * size / biggest) * zoom ** 2, color=colour,
                   edgecolors="white", linewidths=0.5)
        axes = "+".join(c["axes"]) if c["axes"] else "?"
        if not c["complete"]:
            axes += f"({c['group_size']})"
        tag = {"backward": " bwd", "update": " upd"}.get(c["pass"], "")
        when = f" {c['network']} ~{human_seconds(c['seconds'])}" if timed else ""
        fix = " · fix" if c.get("fix") else ""
        number = f"#{c['index']} " if "index" in c else ""
        labels.append((cx + 0.25, row + 0.5,
                       f"{number}{c['kind']} {axes} {human_bytes(c['bytes_per_device'])}"
                       f"{when}{tag}{fix}", FIGURE_STATUS_COLOURS["ok"] if fix else "black", 6 * zoom))
    if len(collectives) > per_row:
        labels.append((x + 0.25 + per_row * width, row + 0.5, f"+{len(collectives) - per_row}",
                       "black", 6 * zoom))
    return labels
