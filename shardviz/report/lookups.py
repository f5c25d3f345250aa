"""A Report's lookups by path: a variable's layout, a traced layer output,
the shards and index ranges of either, and the errors a wrong path gets
(naming the nearest paths).

Each function takes the Report as ``self``; the Report binds it as the method
of the same name (``report.geometry(path)``).
"""

from __future__ import annotations

import difflib
import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..errors import ShardvizError
from ..layout.assign import OutputLayout, VariableLayout
from ..layout.geometry import TensorGeometry, itemsize

if TYPE_CHECKING:
    from ..trace import Activation
    from .report import Report


def variable(self: Report, path: str) -> VariableLayout:
    """The layout of the variable at ``path``; a missing path gives an
    error that suggests the nearest paths."""
    self._check_path(path)
    try:
        return self._by_path[path]
    except KeyError:
        raise self._unknown_path(path) from None


def output(self: Report, path: str) -> OutputLayout | None:
    """The rule lookup of the layer output path ``path`` (an
    ``.../output`` path), or None when the model has no such path."""
    return self._outputs_by_path.get(path)


def activation(self: Report, path: str, index: int = 0, call: int = 0) -> Activation:
    """The traced layer output at ``path`` (an ``.../output`` path):
    output ``index`` of call ``call`` of the layer."""
    self._check_path(path)
    mine = [a for a in (self.trace.activations if self.trace else []) if a.path == path]
    for a in mine:
        if a.index == index and a.call == call:
            return a
    if mine:
        have = sorted({(a.call, a.index) for a in mine})
        raise ShardvizError(
            f"Layer output {path!r} has no output {index!r} in call {call!r}.",
            hint="It has " + ", ".join(f"call={c}, index={i}" for c, i in have) + ".",
            path=path)
    raise self._unknown_path(path)


def check_path(self: Report, path: object) -> None:
    if not isinstance(path, str):
        raise self._unknown_path(path)


def geometry(self: Report, path: str, index: int = 0, call: int = 0) -> TensorGeometry:
    """The shards of the variable at ``path``, or of a traced layer
    output (as XLA laid it out)."""
    self._check_path(path)
    if path in self._by_path:
        return self._by_path[path].geometry
    # Any: a traced output is taken to have XLA's spec and shard shape (not None).
    a: Any = self.activation(path, index, call)
    self._refuse_uneven(a)


    replicated = a.replicated_over
    sizes = dict(self.mesh.mesh)
    replicas = math.prod(getattr(r, "size", None) or sizes.get(r, 1) for r in replicated)
    return TensorGeometry(
        shape=a.shape, dtype=a.dtype, axes=a.actual_spec, spec=a.actual_spec,
        shard_shape=a.shard_shape, bytes=math.prod(a.shape) * itemsize(a.dtype),
        bytes_per_device=a.bytes_per_device, replicated_over=replicated, replicas=replicas,
        mesh=self.mesh, sharded=any(e is not None for e in a.actual_spec), actual=a.actual)


def shards(self: Report, path: str) -> pd.DataFrame:
    """Per device: its mesh coordinates and the index ranges it holds."""
    g = self.geometry(path)
    rows = []
    for device, idx in sorted(g.indices().items()):
        coords = self.mesh.coords[device]
        row = {"device": device, "coords": coords}
        row.update(dict(zip(self.mesh.axis_names, coords)))
        row["index"] = tuple(
            (s.start or 0, g.shape[d] if s.stop is None else s.stop) for d, s in enumerate(idx)
        )
        rows.append(row)
    return pd.DataFrame(rows)


def indices(self: Report, path: str, index: int = 0, call: int = 0) -> dict:
    """Device id to the index ranges it holds, for a variable or a traced
    layer output (from JAX's ``devices_indices_map``)."""
    self._check_path(path)
    if path in self._by_path:
        return self._by_path[path].geometry.indices()
    a = self.activation(path, index, call)
    self._refuse_uneven(a)
    return {d.id: idx for d, idx in a.actual.devices_indices_map(a.shape).items()}


def refuse_uneven(self: Report, a: Activation) -> None:
    """JAX describes no per-device index ranges for an uneven split, which
    XLA may choose for an output whether or not a rule asked for it."""
    if not a.uneven_actual:
        return
    d, n, ax, k = a.uneven_actual[0]
    raise ShardvizError(
        f"The output {a.path!r} {a.shape} is split unevenly: dim {d} of size {n} over axis "
        f"{ax!r} of size {k}. XLA pads its shards to {a.shard_shape}, and JAX gives no "
        "per-device index ranges for an uneven split, so it cannot be drawn.",
        hint="See report.problems for the rule that asks for it, and make the dim divide.",
        path=a.path, layer=a.layer)


def unknown_path(self: Report, path: object) -> ShardvizError:
    if not isinstance(path, str):
        return ShardvizError(
            f"A path must be a string, got {type(path).__name__} {path!r:.60}.",
            hint="Pass a variable path such as 'dense/kernel' or a layer output path such "
            "as 'dense/output'; report.variables and report.activations list them.")
    known = self.paths + [ol.info.path for ol in self.output_layouts]
    if self.trace is not None:
        known += [a.path for a in self.trace.activations]
    known = list(dict.fromkeys(known))
    close = difflib.get_close_matches(path, known, n=3, cutoff=0.4)
    hint = f"Did you mean {close}?" if close else "See report.variables for every path."
    return ShardvizError(f"No variable or output path {path!r} in this report.",
                         hint=hint, path=path)
