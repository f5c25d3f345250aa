"""A Report's pictures: the tiles of one tensor (``show``), JAX's own text
drawing of it (``text``), the mesh, memory, flow and grid figures.

Each function takes the Report as ``self``; the Report binds it as the method
of the same name. The renderers are imported inside each function, the one
upward import a Report may make (so that it draws itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import ShardvizError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .report import Report


def show(self: Report, path: str, *, rows: int | None = None, cols: int | None = None,
         index: int = 0, call: int = 0) -> Figure:
    """A picture of how the tensor at ``path`` (a variable, or a traced
    ``.../output``) lands on the devices. Any rank: pick the tensor dims
    drawn as ``rows`` and ``cols``; other split dims become panels.
    Returns a matplotlib Figure."""
    from ..render.mpl import tensor_figure

    self._check_path(path)
    spec: tuple | None
    if path in self._by_path:
        vl = self._by_path[path]
        shape, dtype, spec = vl.info.shape, vl.info.dtype, vl.geometry.spec
        title = path + ("  (Keras would refuse this layout; shown replicated)"
                        if vl.error is not None else "")
    else:
        a = self.activation(path, index, call)
        shape, dtype, spec = a.shape, a.dtype, a.actual_spec
        title = path + (f" (call {call})" if call else "")
    return tensor_figure(shape, dtype, self.indices(path, index, call), coords=self.mesh.coords,
                         title=title, spec=spec, rows=rows, cols=cols)


def text(self: Report, path: str, index: int = 0, call: int = 0) -> str:
    """What ``jax.debug.visualize_sharding`` prints for the tensor at
    ``path``: JAX's own drawing, for 1-D and 2-D tensors."""
    from ..render.text import jax_text

    self._check_path(path)
    if path in self._by_path:
        g = self._by_path[path].geometry
        shape, sharding = g.shape, g.sharding
    else:
        a = self.activation(path, index, call)
        self._refuse_uneven(a)
        shape, sharding = a.shape, a.actual
    if len(shape) not in (1, 2):
        raise ShardvizError(
            f"JAX draws only 1-D and 2-D tensors as text; {path!r} has rank {len(shape)} "
            f"{shape}.", hint=f"Use report.show({path!r}) for a picture of any rank.",
            path=path)
    if self.mesh.abstract:
        raise ShardvizError(
            f"JAX needs real devices to draw a sharding, and the mesh {self.plan.mesh_dict} "
            f"is larger than the {self.device_count} devices here.",
            hint=f"Use report.show({path!r}), which works on abstract meshes.", path=path)
    return jax_text(shape, sharding)


def show_mesh(self: Report) -> Figure:
    """The device grid of the plan's mesh; with several hosts
    (``processes=``, or a TPU target's topology) each device says its
    host, and lines separate the hosts."""
    from ..render.mpl import mesh_figure

    host_of = dict(zip((int(i) for i in self.mesh.device_ids.flat),
                       self.process_of_position))
    return mesh_figure(self.mesh, host_of)


def pictures(self: Report, max_per_grid: int = 40) -> list[tuple[str, Figure]]:
    """``(title, Figure)`` for every picture of the report: the mesh, memory
    per device, the variables (``max_per_grid`` to a figure) and, after a
    pass, the layer outputs and collectives."""
    out = [("Mesh", show_mesh(self)), ("Memory per device", show_memory(self))]
    paths = self.variables["path"].tolist()
    for start in range(0, len(paths), max_per_grid):
        chunk = paths[start:start + max_per_grid]
        title = "Variables" if len(paths) <= max_per_grid else \
            f"Variables {start + 1}–{start + len(chunk)}"
        out.append((title, show_grid(self, chunk)))
    if self.pass_mode is not None:
        out.append(("Layer outputs and collectives", show_flow(self, max_layers=200)))
    if len(self.peak):
        out.append(("Memory over the program and at its peak", show_peak(self)))
    if len(self.op_times):
        out.append(("Where the step's time goes", show_times(self)))
    return out


def show_times(self: Report) -> Figure:
    """The compiled program's operations along the step, by kind, and the
    layers that take the most time (``report.op_times``: estimates)."""
    from ..render.time_figures import time_figure

    if self.op_times.empty:
        raise ShardvizError(
            "No picture of the step's time: no compiled program was timed on the target.",
            hint="Analyse with inputs and a TPU target (such as target='v5e:2x4'): the "
                 "operations are timed with efficiencies fitted to a TPU chip's profiles.")
    timed = self._timed_program
    return time_figure(self.op_times, timed.seconds if timed is not None else None,
                       picture_title(self))


def show_peak(self: Report) -> Figure:
    """Live bytes by role over the compiled program's schedule (the peak and
    the chip's capacity marked), and the largest layers at the peak, from
    the compiler's own buffer assignment (``report.peak``)."""
    from ..render.peak_figures import peak_figure

    if self.peak.empty:
        raise ShardvizError(f"No picture of the peak: {self.peak_note}",
                            hint="Analyse with inputs, so that a pass is compiled.")
    row = self.memory.iloc[0]
    capacity = row["capacity_bytes"]
    source = self.peak_source
    return peak_figure(self.timeline, self.peak,
                       capacity if capacity is not None and capacity == capacity else None,
                       source.buffer_peak.position if source is not None else None,
                       picture_title(self))


def picture_title(self: Report) -> str:
    """``model on mesh: the pass``, the line under each picture's title."""
    from ..render.figure import plan_line

    return plan_line(self.model_name, self.plan.mesh_dict, self.pass_name)


def show_memory(self: Report) -> Figure:
    """Bytes per device, stacked by what holds them."""
    from ..render.mpl import memory_figure

    return memory_figure(self.memory_parts, self.memory, self.devices, self.mesh_view,
                         self.target.hardware.name, picture_title(self))


def show_flow(self: Report, max_layers: int = 60, explain: bool = False) -> Figure:
    """Layers in call order, their output layouts, and the collectives,
    numbered as in :attr:`collectives`. Collectives whose explanation
    found a fix are marked "fix" (green); ``explain=True`` explains every
    collective first (see :meth:`why`)."""
    from ..render.mpl import flow_figure

    if self.pass_name is None:
        raise ShardvizError(
            "The flow picture needs a forward pass, and this report has none.",
            hint="Analyse with inputs, e.g. shardviz.analyze(model, plan, inputs=(8, 128)).",
        )
    if explain and self.trace is not None:
        self.explanations()
    fixable = {i for i, why in self.explained.items() if why.fix is not None}
    return flow_figure(self.activations, self.collectives, fixable, self.mesh_view,
                       self.target.hardware, self.target.timed, picture_title(self), max_layers)


def show_grid(self: Report, paths: Sequence[str] | None = None, columns: int = 5) -> Figure:
    """Every variable's (or the given paths') tiles in one figure,
    ``columns`` to a row."""
    from ..render.mpl import grid_figure

    paths = self.paths if paths is None else list(paths)
    status = dict(zip(self.variables["path"], self.variables["status"]))
    cells = [(path, self.geometry(path), status.get(path, "")) for path in paths]
    return grid_figure(cells, self.mesh_view.coords, picture_title(self), columns)
