"""matplotlib pictures of layouts, meshes, memory and communication.

Every function returns a :class:`ShardvizFigure`: a plain matplotlib Figure
drawn with the Agg canvas, never registered with pyplot, that shows itself
in a notebook and saves to PNG or SVG with ``fig.savefig``. Pictures only
read what they are given (a Report, tiles, a mesh); they never compute a
layout themselves.
"""

from __future__ import annotations

import functools
import io
import math

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PatchCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..errors import ShardvizError
from ..format import format_mesh, format_spec, human_bytes, human_seconds
from ..model.scan import layer_path
from .palette import (
    FIGURE_STATUS_COLOURS,
    KIND_COLOURS,
    NETWORK_COLOURS,
    STACK_COLOURS,
    device_style,
    text_colour,
)
from .tiles import TileLayout, tile_layout

DPI = 80
MAX_LABELLED = 160
"""Most device labels drawn in one panel; past this, tiles go unlabelled."""
MAX_BANDS = 8
"""A shard held by more devices than this is drawn as one summarised tile."""
MAX_PANELS = 16


class ShardvizFigure(Figure):
    """A matplotlib Figure that displays itself in notebooks as PNG."""

    shardviz_layout: TileLayout  # set by tensor_figure: the tiles it drew

    def _repr_png_(self):
        buf = io.BytesIO()
        self.savefig(buf, format="png", dpi=DPI)
        return buf.getvalue()


class Board:
    """A drawing area on a figure, in its own units with y pointing down.

    It offers the few Axes methods the diagrams use, drawing straight on the
    figure: an Axes costs more to create than a whole tile diagram to draw.
    """

    def __init__(self, fig, rect, xlim, ylim):
        from matplotlib.transforms import Affine2D

        left, bottom, width, height = rect
        (x0, x1), (y0, y1) = xlim, ylim
        sx, sy = width / (x1 - x0), height / (y1 - y0)
        self.fig = fig
        self.transform = Affine2D().translate(-x0, -y0).scale(sx, -sy).translate(
            left, bottom + height) + fig.transFigure

    def add_collection(self, collection):
        collection.set_transform(self.transform)
        self.fig.add_artist(collection)

    def add_patch(self, patch):
        patch.set_transform(self.transform)
        self.fig.add_artist(patch)

    def text(self, x, y, s, **kwargs):
        """One Text artist (for the odd rotated label glyph outlines cannot do)."""
        return self.fig.text(x, y, s, transform=self.transform, **kwargs)

    def labels(self, items, ha: str = "center", weight: str = "normal"):
        """Many labels ``(x, y, text, colour, size)``, vertically centred on y
        and aligned on x by ``ha`` ("center", "left" or "right"), drawn as one
        collection of glyph outlines: far cheaper than one Text artist each."""
        if not items:
            return
        from matplotlib.collections import PathCollection
        from matplotlib.transforms import Affine2D

        paths = [_label_path(text, round(size * 2) / 2, ha, weight)
                 for _, _, text, _, size in items]
        collection = PathCollection(
            paths, offsets=[(x, y) for x, y, *_ in items], offset_transform=self.transform,
            facecolors=[colour for *_, colour, _ in items], edgecolors="none", linewidths=0)
        # Points to pixels at the dpi of the drawing, which savefig may change.
        collection.set_transform(Affine2D().scale(1 / 72) + self.fig.dpi_scale_trans)
        self.fig.add_artist(collection)

    def scatter(self, xs, ys, s, color, **kwargs):
        from matplotlib.collections import CircleCollection
        from matplotlib.transforms import IdentityTransform

        circles = CircleCollection([s], offsets=list(zip(xs, ys)),
                                   offset_transform=self.transform, facecolors=[color],
                                   edgecolors=kwargs.get("edgecolors", "none"),
                                   linewidths=kwargs.get("linewidths", 0))
        circles.set_transform(IdentityTransform())
        self.fig.add_artist(circles)


@functools.lru_cache(maxsize=8192)
def _label_path(text: str, size: float, ha: str = "center", weight: str = "normal"):
    """The outline of ``text`` in points, its lines centred on (0, 0), or
    starting at x = 0 for ``ha="left"``."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.path import Path
    from matplotlib.textpath import TextPath

    prop = FontProperties(family="DejaVu Sans", weight=weight)
    lines = text.split("\n")
    step = size * 1.25
    vertices, codes = [], []
    for i, line in enumerate(lines):
        tp = TextPath((0, 0), line, size=size, prop=prop)
        if not len(tp.vertices):
            continue
        ext = tp.get_extents()
        dy = (len(lines) - 1) / 2 * step - i * step - size * 0.36
        dx = {"center": (ext.x0 + ext.x1) / 2, "right": ext.x1}.get(ha, 0.0)
        vertices.append(tp.vertices - (dx, -dy))
        codes.append(tp.codes)
    if not vertices:
        return Path(np.zeros((1, 2)))
    return Path(np.concatenate(vertices), np.concatenate(codes))


def header(fig, lines):
    """Left-aligned lines ``(text, size, weight, colour)`` at the top of a
    figure, 0.25 inch apart."""
    h = fig.get_figheight()
    board = Board(fig, (0, 0, 1, 1), (0, fig.get_figwidth()), (0, h))
    y = 0.22
    for text, size, weight, colour in lines:
        board.labels([(0.14, y, text, colour, size)], ha="left", weight=weight)
        y += size / 72 * 1.9


def new_figure(width: float, height: float) -> ShardvizFigure:
    fig = ShardvizFigure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _device_label(device, coords) -> str:
    if coords is None:
        return str(device)
    return f"{device}\n({','.join(map(str, coords))})"


def _draw_panel(ax, layout: TileLayout, panel, x0, y0, w, h, coords, fontsize, labels=True,
                inches_per_unit: float = 4.0, inches_per_unit_y: float | None = None):
    """Draw one panel's tiles into the box (x0, y0, w, h) of ``ax`` (y down).

    A shard held by one device is filled with that device's colour. A shard
    held by several (replicas) is drawn pale, with one colour chip per device
    inside it, so that copies never look like splits. ``inches_per_unit``
    (and ``_y``) give the printed size of one unit of ``ax``, so labels are
    drawn only where they fit. Returns False if labels were left out."""
    ipu_x, ipu_y = inches_per_unit, inches_per_unit_y or inches_per_unit
    n_rows, n_cols = layout.n_rows, layout.n_cols
    tiles = layout.tiles_in(panel)
    char_w = fontsize * 0.6 / 72  # inches per character
    rects, faces, edges, texts = [], [], [], []
    show_labels = labels and len(tiles) <= MAX_LABELLED
    for t in tiles:
        tx = x0 + w * t.cols[0] / n_cols
        tw = w * (t.cols[1] - t.cols[0]) / n_cols
        ty = y0 + h * t.rows[0] / n_rows
        th = h * (t.rows[1] - t.rows[0]) / n_rows
        devices = t.devices
        tw_in, th_in = tw * ipu_x, th * ipu_y
        if len(devices) == 1:
            (device,) = devices
            face, hatch = device_style(device)
            rects.append(Rectangle((tx, ty), tw, th, hatch=hatch or None))
            faces.append(face)
            edges.append("white" if hatch else "#333333")
            coord = coords.get(device) if coords else None
            room = tw_in / char_w
            if show_labels and room >= len(str(device)) + 0.5 and th_in > fontsize / 72:
                wide = coord is not None and room >= 3 * len(coord) + 2 and th_in > 2.4 * fontsize / 72
                label = _device_label(device, coord) if wide else str(device)
                texts.append((tx + tw / 2, ty + th / 2, label, text_colour(face), fontsize))
            continue
        rects.append(Rectangle((tx, ty), tw, th))
        faces.append("#F2F2F2")
        edges.append("#333333")
        if len(devices) > MAX_BANDS:
            room = tw_in / char_w
            if show_labels and room >= 12:
                texts.append((tx + tw / 2, ty + th / 2,
                              f"{len(devices)} copies\n{_id_list(devices)}", "black", fontsize))
            elif show_labels and room >= 3:
                texts.append((tx + tw / 2, ty + th / 2, f"×{len(devices)}", "black", fontsize))
            continue
        chip = min(tw_in * 0.85 / len(devices), th_in * 0.6, 0.45)
        cw, ch = chip / ipu_x, chip / ipu_y
        gap = cw * 0.12
        start = tx + (tw - len(devices) * cw) / 2
        chip_font = min(fontsize, chip * 72 * 0.45)
        for i, device in enumerate(devices):
            face, hatch = device_style(device)
            rects.append(Rectangle((start + i * cw + gap / 2, ty + (th - ch) / 2), cw - gap, ch,
                                   hatch=hatch or None))
            faces.append(face)
            edges.append("white")
            if show_labels and chip >= char_w * (len(str(device)) + 0.5):
                texts.append((start + (i + 0.5) * cw, ty + th / 2, str(device),
                              text_colour(face), chip_font))
        if show_labels and th_in > chip + 2.2 * fontsize / 72:
            texts.append((tx + tw / 2, ty + (th - ch) / 2 - 0.6 * fontsize / 72 / ipu_y,
                          f"{len(devices)} copies", "#444444", fontsize * 0.85))
    ax.add_collection(PatchCollection(rects, facecolors=faces, edgecolors=edges,
                                      linewidths=0.8, match_original=False))
    for r in (r for r in rects if r.get_hatch()):
        r.set_facecolor("none")
        r.set_edgecolor("white")
        r.set_linewidth(0)
        ax.add_patch(r)
    ax.labels(texts)
    return show_labels or not labels


def _id_list(devices, limit=6) -> str:
    if len(devices) <= limit:
        return ",".join(map(str, devices))
    return ",".join(map(str, devices[:limit - 1])) + f",…,{devices[-1]}"


def _dims_text(layout: TileLayout) -> str:
    shape = layout.shape
    parts = []
    if layout.row_dim is not None:
        parts.append(f"rows: dim {layout.row_dim} ({shape[layout.row_dim]})")
    if layout.col_dim is not None:
        parts.append(f"cols: dim {layout.col_dim} ({shape[layout.col_dim]})")
    if layout.panel_dims:
        parts.append("panels: " + ", ".join(f"dim {d} ({shape[d]})" for d in layout.panel_dims))
    if layout.unsplit_dims:
        parts.append("not split: " + ", ".join(f"dim {d} ({shape[d]})" for d in layout.unsplit_dims))
    return " · ".join(parts) if parts else "a scalar"


def _panel_title(layout: TileLayout, panel) -> str:
    return ", ".join(f"dim {d} [{a}:{b}]" for d, (a, b) in zip(layout.panel_dims, panel))


def tensor_figure(shape, dtype, indices, *, coords=None, title: str = "", spec=None,
                  rows: int | None = None, cols: int | None = None) -> ShardvizFigure:
    """The tiles of one tensor of any rank.

    Args:
        shape, dtype: the tensor's.
        indices: device id to the index tuple it holds (``devices_indices_map``).
        coords: device id to mesh coordinates, for the labels.
        title: what the tensor is (e.g. its path).
        spec: its PartitionSpec, for the title.
        rows, cols: the tensor dims to draw as rows and columns.
    """
    layout = tile_layout(shape, indices, rows, cols)
    panels = layout.panels[:MAX_PANELS]
    n = len(panels)
    grid_cols = min(n, 4) if n > 1 else 1
    grid_rows = math.ceil(n / grid_cols)
    panel_w, panel_h = (3.2, 2.4) if n > 1 else (5.6, 3.6)
    fig = new_figure(panel_w * grid_cols + 0.4, panel_h * grid_rows + 0.9)
    ax = Board(fig, (0.02, 0.02, 0.96, 0.96 - 0.75 / fig.get_figheight()),
               (0, grid_cols), (0, grid_rows))
    fontsize = 9 if n == 1 else 7
    unlabelled = False
    for k, panel in enumerate(panels):
        gx, gy = k % grid_cols, k // grid_cols
        pad = 0.06
        top = 0.12 if layout.panel_dims else 0.0
        if layout.panel_dims:
            ax.labels([(gx + 0.5, gy + 0.06, _panel_title(layout, panel), "black", 8)])
        ok = _draw_panel(ax, layout, panel, gx + pad, gy + pad + top, 1 - 2 * pad,
                         1 - 2 * pad - top, coords, fontsize,
                         inches_per_unit=fig.get_figwidth() * 0.96 / grid_cols,
                         inches_per_unit_y=(fig.get_figheight() * 0.96 - 0.75) / grid_rows)
        unlabelled |= not ok
    head = f"{title}  {tuple(shape)} {dtype}" + (f"  {format_spec(spec)}" if spec is not None else "")
    note = _dims_text(layout)
    if len(layout.panels) > MAX_PANELS:
        note += f" · first {MAX_PANELS} of {len(layout.panels)} panels"
    if unlabelled:
        note += " · too many tiles to label: see report.shards(path)"
    header(fig, [(head.strip(), 10, "bold", "black"), (note, 8, "normal", "#444444")])
    fig.shardviz_layout = layout
    return fig


def mesh_figure(mesh, host_of: dict | None = None) -> ShardvizFigure:
    """The device grid of a mesh: axis names and sizes, device ids and coordinates.

    1-D meshes are a row, 2-D a grid (first axis down, second across), 3-D
    and more one grid per index of the leading axes. With ``host_of``
    (device id to process) and more than one host, each device's cell says
    its host, and a dark line separates cells of different hosts.
    """
    names, shape = mesh.axis_names, mesh.shape
    ids = mesh.device_ids
    grids: list[tuple[tuple[int, ...], np.ndarray]]
    if len(shape) == 1:
        grids = [((), ids.reshape(1, -1))]
        row_name, col_name = None, f"{names[0]} ({shape[0]})"
    else:
        lead = shape[:-2]
        import itertools

        grids = [(idx, ids[idx]) for idx in itertools.product(*(range(s) for s in lead))] \
            if lead else [((), ids)]
        row_name, col_name = f"{names[-2]} ({shape[-2]})", f"{names[-1]} ({shape[-1]})"
    grids = grids[:MAX_PANELS]
    n = len(grids)
    gc = min(n, 4)
    gr = math.ceil(n / gc)
    rows, cols = grids[0][1].shape
    cell = max(0.18, min(0.9, 6.0 / max(cols, rows * 1.5)))
    fig = new_figure(max(3.0, gc * (cols * cell + 0.8)), max(1.6, gr * (rows * cell + 0.7) + 0.5))
    pw, ph = cols + 1.2, rows + 1.1
    ax = Board(fig, (0.03, 0.03, 0.94, 0.94 - 0.45 / fig.get_figheight()), (0, gc * pw), (0, gr * ph))
    labels = rows * cols * n <= 256
    fontsize = 8 if rows * cols <= 16 else 6
    coords = mesh.coords
    texts_axes = []
    for k, (lead_idx, grid) in enumerate(grids):
        ox, oy = (k % gc) * pw + 0.9, (k // gc) * ph + 0.8
        if lead_idx:
            texts_axes.append((ox + cols / 2, oy - 0.7,
                               ", ".join(f"{names[i]}={v}" for i, v in enumerate(lead_idx)),
                               "black", 8))
        rects, faces, texts = [], [], []
        for r in range(rows):
            for c in range(cols):
                device = int(grid[r, c])
                face, _ = device_style(device)
                rects.append(Rectangle((ox + c, oy + r), 1, 1))
                faces.append(face)
                if labels:
                    texts.append((ox + c + 0.5, oy + r + 0.5, _device_label(device, coords[device]),
                                  text_colour(face), fontsize))
        ax.add_collection(PatchCollection(rects, facecolors=faces, edgecolors="white", linewidths=1))
        if host_of and len(set(host_of.values())) > 1:
            _host_borders(ax, grid, ox, oy, host_of)
            if labels:
                texts = [(x, y, f"{t}\nhost {host_of.get(int(grid[int(y - oy), int(x - ox)]), 0)}",
                          colour, size) for x, y, t, colour, size in texts]
        ax.labels(texts)
        texts_axes.append((ox + cols / 2, oy - 0.3, col_name + " →", "black", 8))
        if row_name:
            ax.text(ox - 0.12, oy + rows / 2, row_name + " →", ha="right", va="center",
                    rotation=90, fontsize=8)
    ax.labels(texts_axes)
    title = "mesh " + format_mesh(zip(names, shape))
    title += f"  ({mesh.size} devices{', abstract' if mesh.abstract else ''})"
    header(fig, [(title, 10, "bold", "black")])
    return fig


def _host_borders(ax, grid, ox, oy, host_of) -> None:
    """Dark lines between neighbouring cells that belong to different hosts."""
    from matplotlib.collections import LineCollection

    rows, cols = grid.shape
    segments = []
    for r in range(rows):
        for c in range(cols):
            here = host_of.get(int(grid[r, c]), 0)
            if c + 1 < cols and host_of.get(int(grid[r, c + 1]), 0) != here:
                segments.append([(ox + c + 1, oy + r), (ox + c + 1, oy + r + 1)])
            if r + 1 < rows and host_of.get(int(grid[r + 1, c]), 0) != here:
                segments.append([(ox + c, oy + r + 1), (ox + c + 1, oy + r + 1)])
    if segments:
        lines = LineCollection(segments, colors="#222222", linewidths=2.5)
        ax.add_collection(lines)


MAX_MEMORY_BARS = 32
"""Past this many devices, the memory picture draws one bar for them all
(under a NamedSharding every device holds one shard of every tensor, so every
device holds the same bytes)."""


def memory_figure(report) -> ShardvizFigure:
    """Bytes per device, stacked: variables, optimizer state, inputs,
    outputs and XLA's temporaries (which add up to XLA's memory analysis),
    with the target chip's capacity when there is one."""
    stacks = report.memory_parts
    owner = dict(zip(report.devices["device"], report.devices["process"])) \
        if report.mesh_view.size <= MAX_MEMORY_BARS else {}
    devices = sorted(report.mesh_view.coords, key=lambda d: (owner.get(d, 0), d)) \
        if report.mesh_view.size <= MAX_MEMORY_BARS else []
    labels = [str(d) for d in devices] or [f"each of the {report.mesh_view.size:,} devices"]
    fig = new_figure(min(12, 5.5 + 0.2 * len(labels)), 3.4)
    ax = fig.add_axes((0.1, 0.16, 0.58, 0.62))
    row = report.memory.iloc[0]
    capacity = row["capacity_bytes"] if row["capacity_bytes"] == row["capacity_bytes"] else None
    scale, unit = _unit(max(sum(stacks.values()), capacity or 0))
    bottom = [0.0] * len(labels)
    for name, value in stacks.items():
        ax.bar(range(len(labels)), [value / scale] * len(labels), bottom=bottom,
               color=STACK_COLOURS[name], label=f"{name}: {human_bytes(value)}",
               width=0.8 if devices else 0.5)
        bottom = [b + value / scale for b in bottom]
    if capacity is not None:
        fits = bool(row["fits"])
        estimate = " (estimate)" if row["estimate"] else ""
        ax.axhline(capacity / scale, color=FIGURE_STATUS_COLOURS["ok" if fits else "error"],
                   linewidth=1.5, linestyle="--",
                   label=f"{report.target.hardware.name} capacity: {human_bytes(capacity)}"
                   f" — {'fits' if fits else 'does not fit'}{estimate}")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=7)
    hosts = sorted({owner.get(d, 0) for d in devices})
    if len(hosts) > 1:  # group the bars by host
        for h in hosts:
            members = [i for i, d in enumerate(devices) if owner.get(d, 0) == h]
            if members[0] > 0:
                ax.axvline(members[0] - 0.5, color="#888888", linewidth=0.8, linestyle=":")
            ax.text((members[0] + members[-1]) / 2, -0.16, f"host {h}", ha="center", va="top",
                    fontsize=7, transform=ax.get_xaxis_transform(), color="#444444")
    ax.set_xlabel("device" if devices else "", fontsize=8,
                  labelpad=14 if len(hosts) > 1 else 4)
    ax.set_ylabel(f"{unit} per device", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    total = sum(stacks.values())
    fig.text(0.02, 0.97, f"memory per device: {human_bytes(total)}", fontsize=10,
             weight="bold", va="top")
    fig.text(0.02, 0.9, _plan_line(report), fontsize=8, va="top", color="#444444")
    return fig


def _unit(largest: float) -> tuple[float, str]:
    """A binary unit for an axis whose largest value is ``largest`` bytes."""
    for power, name in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
        if largest >= 1024 ** power:
            return 1024 ** power, name
    return 1, "B"


def _plan_line(report) -> str:
    mesh = format_mesh(report.plan.mesh_dict)
    what = report.pass_name or "variables only (no forward pass)"
    return f"{report.model_name} on {mesh}: {what}"


FLOW_ZOOM = 1.35
"""The flow picture is drawn this much larger than its first layout, fonts
and all, so that its smallest labels are about 8 pixels high at 80 dpi."""

AXIS_COLOURS = ("#4477AA", "#EE6677", "#228833", "#CCBB44", "#66CCEE", "#AA3377")


def flow_figure(report, max_layers: int = 60) -> ShardvizFigure:
    """Layers in call order: how each output is split over the mesh axes,
    with the collectives XLA inserts marked at their layer, sized by bytes."""
    if report.pass_name is None:
        raise ShardvizError(
            "The flow picture needs a forward pass, and this report has none.",
            hint="Analyse with inputs, e.g. shardviz.analyze(model, plan, inputs=(8, 128)).",
        )
    acts = report.activations
    shown = list(acts.head(max_layers).itertuples(index=False))
    collectives = report.collectives.to_dict("records")
    fixable = {i for i, why in report.explained.items() if why.fix is not None}
    for i, c in enumerate(collectives):
        c["index"], c["fix"] = i, i in fixable
    axis_colour = {a: AXIS_COLOURS[i % len(AXIS_COLOURS)]
                   for i, a in enumerate(report.mesh_view.axis_names)}
    by_layer: dict = {}
    unplaced: list[dict] = []
    layer_rows = {layer_path(a.path): i for i, a in enumerate(shown)}
    for c in collectives:
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
    timed = report.target.timed
    biggest = max(((c["seconds"] or 0) if timed else c["bytes_per_device"] for c in collectives),
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
    title = f"layer outputs and collectives — {_plan_line(report)}"
    more = f"  (first {max_layers} of {len(acts)} layers)" if len(acts) > max_layers else ""
    header(fig, [(title + more, 9 * z, "bold", "black")])
    key = Board(fig, (0, 0, 1, 1), (0, fig.get_figwidth()), (0, fig.get_figheight()))
    x, items = 0.14 * z, []
    for a in report.mesh_view.axis_names:
        items.append((x, 0.5 * z, f"■ {a}", axis_colour[a], 8 * z))
        x += (0.25 + 0.07 * len(a)) * z
    if timed:
        hw = report.target.hardware
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


def compare_figure(a, b, labels=("A", "B")) -> ShardvizFigure:
    """Two reports side by side: memory per device, collective bytes by kind,
    and problems by severity."""
    fig = new_figure(11, 3.6)
    reports = (a, b)
    ax1 = fig.add_axes((0.06, 0.16, 0.22, 0.62))
    stack_names = list(dict.fromkeys(n for r in reports for n in r.memory_parts))
    bottoms = [0.0, 0.0]
    scale, unit = _unit(max(sum(r.memory_parts.values()) for r in reports))
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
    cscale, cunit = _unit(max(totals + [1]))
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
        fig.text(0.01, 0.97 - 0.06 * j, f"{labels[j]}: {_plan_line(r)}", fontsize=8, va="top")
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


def grid_figure(report, paths=None, columns: int = 5) -> ShardvizFigure:
    """Many variables' tiles in one figure, one cell per variable, with labels
    readable at the size the figure is shown (9 pt names, 7.5 pt details)."""
    paths = report.paths if paths is None else list(paths)
    status = dict(zip(report.variables["path"], report.variables["status"]))
    n = len(paths)
    columns = max(1, min(columns, n))
    grid_rows = math.ceil(n / columns)
    cell_w, cell_h = GRID_CELL
    top = 0.5
    fig = new_figure(cell_w * columns, cell_h * grid_rows + top)
    ax = Board(fig, (0.0, 0.0, 1.0, 1 - top / fig.get_figheight()), (0, columns), (0, grid_rows))
    coords = report.mesh_view.coords
    chars = int((cell_w - 0.15) * 72 / (9 * 0.6))
    titles: list[tuple] = []
    for k, path in enumerate(paths):
        gx, gy = k % columns, k // columns
        g = report.geometry(path)
        layout = tile_layout(g.shape, g.indices())
        titles.append((gx + 0.5, gy + 0.1, _two_lines(path, chars),
                       FIGURE_STATUS_COLOURS["error"] if status.get(path) == "error" else "black", 9))
        titles.append((gx + 0.5, gy + 0.235, f"{g.shape} {format_spec(g.spec)}", "#444444", 7.5))
        panel = layout.panels[0]
        _draw_panel(ax, layout, panel, gx + 0.06, gy + 0.3, 0.88, 0.65, coords, 7.5,
                    labels=len(layout.tiles_in(panel)) <= 16, inches_per_unit=cell_w,
                    inches_per_unit_y=cell_h)
    ax.labels(titles)
    header(fig, [(f"{n} variables — {_plan_line(report)}", 10, "bold", "black")])
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
    scale, unit = _unit(largest)
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
