"""Activations: every layer output, as XLA lays it out inside the jitted pass.

A :class:`Recorder` is handed to Keras's per-layer output lookup (see
:func:`shardviz._adapters.keras.observing_outputs`). For every call of every
layer it applies the ``/output`` rule Keras would apply, and watches each
output with ``jax.debug.inspect_array_sharding``, which reports the sharding
XLA gives it after propagation: that is how a constraint XLA silently
dropped becomes visible.

>>> uneven_dims((6, 8), ("model", None), {"model": 4})
[(0, 6, 'model', 4)]
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from .._adapters.jax import watch_sharding
from ..errors import ShardvizError
from ..layout.geometry import (
    MeshModel,
    SubAxis,
    entry_size,
    itemsize,
    spec_from_hlo,
    spec_from_sharding,
    uneven_dims,
)
from ..model.scan import layer_path


@dataclasses.dataclass
class Activation:
    """One layer output, in one call of the layer, as XLA lays it out inside
    the jitted pass."""

    path: str
    layer: str
    layer_class: str
    index: int
    """Which output of the layer (0 for single-output layers)."""
    shape: tuple
    dtype: str
    requested: tuple | None
    """The layout an ``/output`` rule asks for, or None."""
    rule: str | None = None
    actual: Any = None
    """The sharding XLA gave it: a ``NamedSharding``, or, when XLA split it
    over part of a mesh axis, a sharding over the mesh's devices that no
    PartitionSpec can name (it still answers ``devices_indices_map``)."""
    call: int = 0
    """Which call of the layer this is (a layer reused in a model, such as a
    tied embedding, is called several times under one output path)."""
    output_index: int | None = None
    """Its position among the model's outputs, if the model returns it."""
    returned: object = None
    """For a model output: the sharding the jitted pass returns it with."""
    hlo_sharding: object = dataclasses.field(default=None, repr=False)
    """XLA's own description of ``actual`` (an HloSharding), when known."""
    mesh: MeshModel | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def layer_path(self) -> str:
        """The path of the layer, without ``/output``."""
        return layer_path(self.path)

    @property
    def label(self) -> str:
        """The path, with the call and the output index when they matter:
        ``token_embedding/output (call 1)``, ``mha/output[1]``."""
        return (self.path + (f"[{self.index}]" if self.index else "")
                + (f" (call {self.call})" if self.call else ""))

    @property
    def _mesh_sizes(self) -> dict:
        if self.mesh is not None:
            return dict(self.mesh.mesh)
        return dict(zip(self.actual.mesh.axis_names, self.actual.mesh.axis_sizes))

    @functools.cached_property
    def _decoded(self):
        """``(spec, replicated_over)`` of ``actual``, sub-axes included."""
        if self.actual is None:
            return None
        from jax.sharding import NamedSharding

        if isinstance(self.actual, NamedSharding):
            spec = spec_from_sharding(self.actual, len(self.shape))
            used = {a for e in spec for a in (e if isinstance(e, tuple) else (e,)) if a}
            return spec, tuple(a for a in self._mesh_sizes if a not in used)
        if self.hlo_sharding is None or self.mesh is None:
            return None
        mesh = self.mesh
        return spec_from_hlo(self.hlo_sharding, mesh.axis_names, mesh.shape, mesh.device_ids,
                             len(self.shape))

    @property
    def hlo(self) -> str | None:
        """XLA's HloSharding of the output, as text."""
        return None if self.hlo_sharding is None else str(self.hlo_sharding)

    @property
    def partial(self) -> bool:
        """Whether XLA split this output over part of a mesh axis, a layout
        that no PartitionSpec can name."""
        spec = self.actual_spec
        return spec is not None and any(
            isinstance(e, SubAxis) or (isinstance(e, tuple) and any(isinstance(x, SubAxis)
                                                                   for x in e))
            for e in spec)

    @property
    def actual_note(self) -> str:
        """The actual layout in words, when it splits part of an axis."""
        if self.actual is None or not self.partial:
            return ""
        spec, replicated = self._decoded
        parts = []
        for d, entry in enumerate(spec):
            for e in (entry if isinstance(entry, tuple) else (entry,)):
                if isinstance(e, SubAxis):
                    parts.append(f"dim {d} is split over {e.describe()}")
        rest = [e.describe() if isinstance(e, SubAxis) else repr(e) for e in replicated
                if isinstance(e, SubAxis)]
        text = "; ".join(parts)
        if rest:
            text += f", and replicated over the other {', '.join(r.split(' of ')[0] for r in rest)}"
        return text

    @property
    def replicated_over(self) -> tuple:
        decoded = self._decoded
        return decoded[1] if decoded else ()

    @property
    def uneven(self) -> list[tuple[int, int, object, int]]:
        """``(dim, size, axis, axis size)`` for each *requested* split that does
        not divide: eager Keras raises there, jit pads or replicates."""
        if self.requested is None or self.actual is None:
            return []
        return uneven_dims(self.shape, self.requested_spec, self._mesh_sizes)

    @property
    def uneven_actual(self) -> list[tuple[int, int, object, int]]:
        """The same for XLA's *actual* layout, whether or not a rule asked."""
        spec = self.actual_spec
        if spec is None:
            return []
        return uneven_dims(self.shape, spec, self._mesh_sizes)

    @property
    def padded(self) -> bool:
        """Whether XLA's actual layout splits some dim unevenly (padding the
        shards), whether or not a rule asked for it."""
        return bool(self.uneven_actual)

    @property
    def returned_spec(self) -> tuple | None:
        if self.returned is None:
            return None
        return spec_from_sharding(self.returned, len(self.shape))

    @property
    def actual_spec(self) -> tuple | None:
        """The actual layout as a spec; a dim split over part of an axis
        shows a :class:`~shardviz.layout.geometry.SubAxis` such as ``'model:(1)2'``.
        None if XLA's layout is not a product of mesh (sub-)axes."""
        decoded = self._decoded
        return decoded[0] if decoded else None

    @property
    def requested_spec(self) -> tuple | None:
        if self.requested is None:
            return None
        return tuple(self.requested) + (None,) * (len(self.shape) - len(self.requested))

    @property
    def shard_shape(self) -> tuple | None:
        if self.actual is None:
            return None
        if not self.padded:
            return tuple(int(d) for d in self.actual.shard_shape(self.shape))
        # JAX refuses the shard shape of an uneven split; XLA pads each split
        # dim up to the next multiple of its axes' size.
        sizes = self._mesh_sizes
        spec = self.actual_spec
        assert spec is not None  # padded: XLA's layout has a spec
        return tuple(-(-n // entry_size(a, sizes)) for n, a in zip(self.shape, spec))

    @property
    def bytes_per_device(self) -> int | None:
        shard = self.shard_shape
        if shard is None:
            return None
        return math.prod(shard) * itemsize(self.dtype)

    def _equivalent(self, sharding) -> bool:
        from jax.sharding import NamedSharding, PartitionSpec

        mesh = self.mesh.jax_mesh if self.mesh is not None else self.actual.mesh
        requested = self.requested_spec
        assert requested is not None  # only asked when a rule requested a layout
        want = NamedSharding(mesh, PartitionSpec(*requested))
        return bool(want.is_equivalent_to(sharding, len(self.shape)))

    @property
    def honored_inside(self) -> bool | None:
        """Whether XLA gave the output the requested layout inside the pass."""
        if self.requested is None or self.actual is None:
            return None
        return self._equivalent(self.actual)

    @property
    def honored(self) -> bool | None:
        """Whether XLA gave the output the requested layout, inside the pass
        and, for a model output, as returned (None: nothing was requested)."""
        inside = self.honored_inside
        if inside is None:
            return None
        return inside and (self.returned is None or self._equivalent(self.returned))


class Recorder:
    """Watches layer outputs inside the trace: one record per output of
    every call of every layer, in call order."""

    def __init__(self, key_of=None, inspect: bool = True, mesh: MeshModel | None = None,
                 model=None):
        self.model = model
        self.inspect = inspect
        """False to only apply the layouts (the activations come from the
        forward pass; the train step need not watch them again)."""
        self.key_of = key_of or {}
        """id of a LayoutMap layout to its key: which rule Keras applied."""
        self.mesh = mesh
        self.records: dict[tuple[str, int, int], Activation] = {}
        self.order: list[tuple[str, int, int]] = []
        self.calls: dict[str, int] = {}
        self.last_layer = None
        self.by_tracer: dict[int, tuple[str, int, int]] = {}

    def on_output(self, path, layer, outputs, layout, apply, error):
        import jax

        name = getattr(layer, "name", path)
        if error is not None:
            raise ShardvizError(
                f"Layer {name!r}: its output path {path!r} matches several rules, so Keras "
                f"raises: {error}",
                hint=f"Make the /output keys more specific, or add the exact key {path!r}.",
                path=path, layer=name,
            )
        out = apply(outputs) if apply is not None else outputs
        self.last_layer = name
        if not self.inspect:
            return out
        call = self.calls.get(path, 0)
        self.calls[path] = call + 1
        leaves = jax.tree_util.tree_leaves(out)
        for i, leaf in enumerate(leaves):
            if not isinstance(leaf, jax.Array):
                # A layer may return its own variables (SAM 3's rotary tables): their
                # layouts are the variables' own, and JAX cannot inspect the objects.
                continue
            key = (path, call, i)
            rec = Activation(
                path=path, layer=name, layer_class=type(layer).__name__, index=i, call=call,
                shape=tuple(int(d) for d in leaf.shape), dtype=str(leaf.dtype),
                requested=tuple(layout.axes) if layout is not None else None,
                rule=self.key_of.get(id(layout)) if layout is not None else None,
                mesh=self.mesh,
            )
            self.records[key] = rec
            self.order.append(key)
            self.by_tracer[id(leaf)] = key
            watch_sharding(leaf, functools.partial(self._seen, key))
        return out

    def _seen(self, key, sharding, hlo_sharding):
        record = self.records[key]
        record.actual, record.hlo_sharding = sharding, hlo_sharding

    def mark_outputs(self, outputs):
        """Remember which records the model returns, by tracer identity."""
        import jax

        for i, leaf in enumerate(jax.tree_util.tree_leaves(outputs)):
            key = self.by_tracer.get(id(leaf))
            if key is not None and self.records[key].output_index is None:
                self.records[key].output_index = i

    def set_returned(self, output_shardings):
        import jax

        shardings = jax.tree_util.tree_leaves(output_shardings)
        for rec in self.records.values():
            if rec.output_index is not None and rec.output_index < len(shardings):
                rec.returned = shardings[rec.output_index]

    def activations(self) -> list[Activation]:
        return [self.records[k] for k in self.order]
