"""Pictures of where values live: one tensor's tiles, and a mesh's device grid.

``tensor_figure`` draws the shards of a tensor of any rank over the devices
that hold them; ``mesh_figure`` draws the devices of a mesh, their
coordinates and, across hosts, which host each belongs to.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from matplotlib.collections import PatchCollection
from matplotlib.patches import Rectangle

from ..format import format_mesh, format_spec
from .figure import (
    MAX_PANELS,
    Board,
    ShardvizFigure,
    device_label,
    dims_text,
    draw_panel,
    header,
    new_figure,
    panel_title,
)
from .palette import device_style, text_colour
from .tiles import tile_layout


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
            ax.labels([(gx + 0.5, gy + 0.06, panel_title(layout, panel), "black", 8)])
        ok = draw_panel(ax, layout, panel, gx + pad, gy + pad + top, 1 - 2 * pad,
                         1 - 2 * pad - top, coords, fontsize,
                         inches_per_unit=fig.get_figwidth() * 0.96 / grid_cols,
                         inches_per_unit_y=(fig.get_figheight() * 0.96 - 0.75) / grid_rows)
        unlabelled |= not ok
    head = f"{title}  {tuple(shape)} {dtype}" + (f"  {format_spec(spec)}" if spec is not None else "")
    note = dims_text(layout)
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
                    texts.append((ox + c + 0.5, oy + r + 0.5, device_label(device, coords[device]),
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
