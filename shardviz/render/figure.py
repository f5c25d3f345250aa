"""The canvas every shardviz picture is drawn on, and the tile panels they share.

:class:`ShardvizFigure` is a plain matplotlib Figure drawn with the Agg
canvas, never registered with pyplot, that shows itself in a notebook and
saves to PNG or SVG with ``fig.savefig``. :class:`Board` draws on it in its
own units, with labels as glyph outlines; ``header`` and ``new_figure`` start
a picture; ``draw_panel`` draws one panel of a tensor's tiles. The figures
themselves live in ``layout_figures`` (tensor, mesh), ``cost_figures``
(memory, flow) and ``overview_figures`` (compare, grid, sweep).
"""

from __future__ import annotations

import functools
import io

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PatchCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..format import format_mesh
from .palette import device_style, text_colour
from .tiles import TileLayout

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


def device_label(device, coords) -> str:
    if coords is None:
        return str(device)
    return f"{device}\n({','.join(map(str, coords))})"


def draw_panel(ax, layout: TileLayout, panel, x0, y0, w, h, coords, fontsize, labels=True,
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
                label = device_label(device, coord) if wide else str(device)
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


def dims_text(layout: TileLayout) -> str:
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


def panel_title(layout: TileLayout, panel) -> str:
    return ", ".join(f"dim {d} [{a}:{b}]" for d, (a, b) in zip(layout.panel_dims, panel))


def byte_unit(largest: float) -> tuple[float, str]:
    """A binary unit for an axis whose largest value is ``largest`` bytes."""
    for power, name in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
        if largest >= 1024 ** power:
            return 1024 ** power, name
    return 1, "B"


def plan_line(model_name: str, mesh: dict[str, int], pass_name: str | None) -> str:
    """``model on mesh: the pass``, the line under a picture's title.

    >>> plan_line("mlp", {"batch": 2, "model": 4}, None)
    'mlp on batch=2 × model=4: variables only (no forward pass)'
    """
    what = pass_name or "variables only (no forward pass)"
    return f"{model_name} on {format_mesh(mesh)}: {what}"
