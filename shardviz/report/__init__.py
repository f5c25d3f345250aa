"""Report: everything shardviz found about one model under one plan.

The report is the one object every picture, widget and command reads. It
holds the plan, the scan, the per-variable layouts and the problems, and
offers them as pandas DataFrames (``report.variables``, ``report.rules``,
... every name in :data:`FRAMES`), each described, row and columns, in
:mod:`shardviz.report.schema` and in its own docstring (``help(Report.variables)``).

It displays itself in a notebook (``_repr_html_``) and a terminal
(``str(report)``, or ``rich.print(report)``).

Modules:

- ``schema``: every frame and column, described once;
- ``frames``: :func:`frame` (a frame built from the schema) and one function per frame;
- ``totals``: :class:`Totals`, a report's totals computed once;
- ``mesh_view``: :class:`MeshView`, the frozen view of a report's mesh;
- ``settings``: :class:`Settings`, what an analysis is asked for, one value every composer passes on;
- ``serialize``: the Report as data (a dict and JSON of every frame) and the frames read back;
- ``report``: the :class:`Report` class, its frames, accessors and display;
- ``lookups``: a Report's lookups by path (variable, activation, geometry, shards);
- ``display``: a Report's pictures (show, text, show_mesh, ...);
- ``explaining``: a Report's ``why`` and ``explain``.
"""

from __future__ import annotations

from . import schema
from .frames import FRAMES, frame
from .mesh_view import MeshView
from .report import Report
from .settings import Settings
from .totals import Totals

__all__ = ["FRAMES", "MeshView", "Report", "Settings", "Totals", "frame", "schema"]
