"""matplotlib pictures of layouts, meshes, memory and communication.

Every function returns a :class:`ShardvizFigure`: a plain matplotlib Figure
drawn with the Agg canvas, never registered with pyplot, that shows itself
in a notebook and saves to PNG or SVG with ``fig.savefig``. Pictures only
read what they are given (a Report, tiles, a mesh); they never compute a
layout themselves.

This module gathers them in one place; they live in

- ``figure``: the figure, the drawing board, headers and tile panels;
- ``layout_figures``: ``tensor_figure``, ``mesh_figure``;
- ``cost_figures``: ``memory_figure``, ``flow_figure``;
- ``overview_figures``: ``compare_figure``, ``grid_figure``, ``sweep_figure``.
"""

from __future__ import annotations

from .cost_figures import flow_figure, memory_figure
from .figure import DPI, Board, ShardvizFigure, header, new_figure
from .layout_figures import mesh_figure, tensor_figure
from .overview_figures import compare_figure, grid_figure, sweep_figure

__all__ = [
    "DPI",
    "Board",
    "ShardvizFigure",
    "compare_figure",
    "flow_figure",
    "grid_figure",
    "header",
    "memory_figure",
    "mesh_figure",
    "new_figure",
    "sweep_figure",
    "tensor_figure",
]
