"""Geometry: how a tensor of a given shape lands on the devices of a mesh.

All answers come from JAX's own sharding objects. A spec becomes a
``jax.sharding.NamedSharding`` on the plan's mesh, exactly as Keras turns a
``TensorLayout`` into one; its ``shard_shape`` gives the per-device shape and
its ``devices_indices_map`` the index ranges each device holds.

When the machine has enough devices the mesh is the one Keras would build
(``DeviceMesh(...).backend_mesh`` over the first devices). When it does not,
say a 16x16 pod planned on a laptop, the mesh is a
``jax.sharding.AbstractMesh``: shard shapes and bytes are the same, and index
ranges come from the same HLO sharding JAX itself derives them from, with
devices numbered by their flat position in the mesh. Reading a spec back
from a sharding (XLA's sub-axes included) lives in :mod:`.specs`.

>>> mesh = MeshModel((("batch", 2), ("model", 4)), abstract=True)
>>> g = tensor_geometry((16, 32), "float32", (None, "model"), mesh)
>>> g.spec, g.shard_shape, g.bytes_per_device, g.replicated_over
((None, 'model'), (16, 8), 512, ('batch',))
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np

from ..errors import ShardvizError
from ..target import parse_target

# Re-exported: shardviz imports these from here.
from .specs import SubAxis as SubAxis
from .specs import entry_size as entry_size
from .specs import spec_from_hlo as spec_from_hlo
from .specs import spec_from_sharding as spec_from_sharding
from .specs import uneven_dims


class GeometryError(ShardvizError):
    """A layout that cannot be applied to a tensor; ``kind`` is a problem kind
    (``"indivisible"``, ``"unknown-axis"``, ...)."""

    def __init__(self, kind: str, message: str, hint: str = "", **details):
        super().__init__(message, hint=hint)
        self.kind, self.details = kind, details


@functools.lru_cache(maxsize=256)
def mesh_model(mesh, abstract: bool | None = None, target=None,
               dcn_axes: tuple[str, ...] = ()) -> MeshModel:
    """The (cached) :class:`MeshModel` of ``((name, size), ...)``, on the
    simulated devices, or on the chips of a TPU ``target``.

    >>> mesh_model((("batch", 2),), abstract=True) is mesh_model((("batch", 2),), abstract=True)
    True
    """
    return MeshModel(mesh, abstract, target, dcn_axes)


def itemsize(dtype) -> int:
    import jax.numpy as jnp

    return jnp.dtype(dtype).itemsize


class MeshModel:
    """A plan's mesh as JAX sees it, concrete when the devices exist.

    Args:
        mesh: ``((name, size), ...)`` in order.
        abstract: force an ``AbstractMesh`` even if devices exist. By default
            the mesh is concrete when there are at least as many devices as
            the mesh needs.
        target: a :class:`~shardviz.target.Target` (default: the simulated
            CPU), which gives the mesh its devices (a TPU slice's chips, or
            None for the simulated devices), its capacity and its slices.
        dcn_axes: the mesh axis that spans the target's slices (or nodes).
    """

    def __init__(self, mesh, abstract: bool | None = None, target=None,
                 dcn_axes: tuple[str, ...] = ()):
        self.mesh = tuple((str(n), int(s)) for n, s in mesh)
        self.axis_names = tuple(n for n, _ in self.mesh)
        self.shape = tuple(s for _, s in self.mesh)
        self.size = math.prod(self.shape)
        if target is None:

            target = parse_target("cpu")
        self.target = target
        self.dcn_axes = tuple(dcn_axes)
        self.devices = self.target.mesh_devices(self.axis_names, self.shape, self.dcn_axes)
        """The target's chips in the mesh's shape (a TPU target), or None."""
        if self.devices is not None:
            abstract = False
        if abstract is None:
            import jax

            abstract = jax.device_count() < self.size
        self.abstract = bool(abstract)
        self._jax_mesh = None

    @functools.cached_property
    def capacity_bytes(self) -> int | None:
        """The memory one device's program may use on the target (see
        :meth:`~shardviz.target.base.Target.capacity_bytes`)."""
        return self.target.capacity_bytes()

    @property
    def jax_mesh(self):
        """A ``jax.sharding.Mesh`` (as Keras builds it) or ``AbstractMesh``."""
        if self._jax_mesh is None:
            if self.abstract:
                from jax.sharding import AbstractMesh, AxisType

                self._jax_mesh = AbstractMesh(
                    self.shape, self.axis_names, axis_types=(AxisType.Auto,) * len(self.shape)
                )
            else:
                from .._adapters import keras as keras_adapter

                devices = None if self.devices is None else list(self.devices.flat)
                self._jax_mesh = keras_adapter.device_mesh(self.shape, self.axis_names,
                                                           devices).backend_mesh
        return self._jax_mesh

    @property
    def device_list(self) -> list | None:
        """The target's chips in mesh order, for a Keras ``DeviceMesh``; None
        for the simulated devices (Keras takes the first of its own)."""
        return None if self.devices is None else list(self.devices.flat)

    @functools.cached_property
    def slice_of_position(self) -> tuple[int, ...]:
        """Per mesh position (flat), the slice (TPU) or node (GPU) it is in."""
        return self.target.slice_of_positions(self.axis_names, self.shape, self.dcn_axes,
                                              self.devices)

    @functools.cached_property
    def device_ids(self) -> np.ndarray:
        """Device ids laid out in the mesh's shape (flat positions if abstract)."""
        if self.abstract:
            return np.arange(self.size).reshape(self.shape)
        return np.vectorize(lambda d: d.id, otypes=[int])(self.jax_mesh.devices)

    @functools.cached_property
    def coords(self) -> dict[int, tuple[int, ...]]:
        """Device id to its coordinates in the mesh."""
        ids = self.device_ids
        return {int(ids[idx]): tuple(int(i) for i in idx) for idx in np.ndindex(ids.shape)}

    def axis_size(self, name: str) -> int:
        return dict(self.mesh)[name]

    def sharding(self, spec):
        from jax.sharding import NamedSharding, PartitionSpec

        return NamedSharding(self.jax_mesh, PartitionSpec(*spec))

    def __repr__(self):
        kind = "abstract" if self.abstract else "concrete"
        return f"<MeshModel {dict(self.mesh)} ({kind})>"


@dataclasses.dataclass(frozen=True)
class TensorGeometry:
    """Where the pieces of one tensor live.

    Attributes:
        shape, dtype: the tensor's.
        axes: the layout as given (may be shorter than the rank; Keras pads).
        spec: the layout padded with None to the tensor's rank.
        shard_shape: the shape each device holds (``NamedSharding.shard_shape``).
        bytes: the whole tensor's size in bytes.
        bytes_per_device: the size of one shard.
        replicated_over: mesh axes the tensor is not split over.
        replicas: how many devices hold each shard.
    """

    shape: tuple[int, ...]
    dtype: str
    axes: tuple
    spec: tuple
    shard_shape: tuple[int, ...]
    bytes: int
    bytes_per_device: int
    replicated_over: tuple[str, ...]
    replicas: int
    mesh: MeshModel = dataclasses.field(repr=False, compare=False)
    sharded: bool = dataclasses.field(default=False, repr=False)
    """Whether any dimension is split."""
    actual: Any = dataclasses.field(default=None, repr=False, compare=False)
    """The sharding XLA chose, for a traced value (it may split part of an
    axis, which no PartitionSpec names)."""

    @property
    def sharding(self):
        """The ``jax.sharding.Sharding`` of this layout (a ``NamedSharding``
        unless XLA chose one that no PartitionSpec names)."""
        return self.actual if self.actual is not None else self.mesh.sharding(self.spec)

    def indices(self) -> dict[int, tuple[slice, ...]]:
        """Device id to the index ranges it holds (``devices_indices_map``)."""
        if self.actual is not None:
            return {d.id: idx for d, idx in self.actual.devices_indices_map(self.shape).items()}
        return _indices(self.mesh, self.shape, self.spec)


def _names(entry) -> tuple:
    """The mesh axes of one spec entry: None, a name, or a tuple of names."""
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


def _validate(shape, axes, mesh: MeshModel):
    names = set(mesh.axis_names)
    flat = [a for entry in axes for a in _names(entry)]
    unknown = [a for a in flat if a not in names]
    if unknown:
        raise GeometryError(
            "unknown-axis",
            f"axis {unknown[0]!r} is not a mesh axis; valid axis names: {list(mesh.axis_names)}",
            f"use one of {list(mesh.axis_names)} or None",
        )
    used = flat
    dupes = sorted({a for a in used if used.count(a) > 1})
    if dupes:
        raise GeometryError(
            "duplicate-axis",
            f"axis {dupes[0]!r} shards two dimensions of layout {tuple(axes)!r}",
            f"keep {dupes[0]!r} on one dimension",
        )
    if len(axes) > len(shape):
        raise GeometryError(
            "rank-mismatch",
            f"layout {tuple(axes)!r} has {len(axes)} entries but the tensor {shape} has rank "
            f"{len(shape)}; Keras fails when it places such a tensor",
            f"give exactly {len(shape)} entries, e.g. {tuple(axes[: len(shape)])!r}",
            given=len(axes), rank=len(shape),
        )
    bad = uneven_dims(shape, axes, dict(mesh.mesh))
    if bad:
        d, n, a, k = bad[0]
        raise GeometryError(
            "indivisible",
            f"dim {d} has size {n}, which axis {a!r} of size {k} does not divide",
            f"shard dim {d} over an axis whose size divides {n}, leave it None, "
            f"or resize axis {a!r}",
            dim=d, dim_size=n, axis=a, axis_size=k,
        )


@functools.lru_cache(maxsize=65536)
def _geometry(mesh: MeshModel, shape, dtype, axes) -> TensorGeometry:
    _validate(shape, axes, mesh)
    spec = tuple(axes) + (None,) * (len(shape) - len(axes))
    sharding = mesh.sharding(axes)
    shard_shape = tuple(int(d) for d in sharding.shard_shape(shape))
    size = itemsize(dtype)
    used = {a for entry in spec for a in _names(entry)}
    replicated_over = tuple(a for a in mesh.axis_names if a not in used)
    replicas = math.prod(mesh.axis_size(a) for a in replicated_over)
    return TensorGeometry(
        shape=shape,
        dtype=str(dtype),
        axes=tuple(axes),
        spec=spec,
        shard_shape=shard_shape,
        bytes=math.prod(shape) * size,
        bytes_per_device=math.prod(shard_shape) * size,
        replicated_over=replicated_over,
        replicas=replicas,
        mesh=mesh,
        sharded=bool(used),
    )


def tensor_geometry(shape, dtype, axes, mesh: MeshModel) -> TensorGeometry:
    """The geometry of a tensor under a layout; raises :class:`GeometryError`
    for a layout Keras or JAX would refuse."""
    return _geometry(mesh, tuple(int(d) for d in shape), str(dtype), tuple(axes))


geometry_of = _geometry
"""``geometry_of(mesh, shape, dtype, axes)``: :func:`tensor_geometry` for a
shape that is already a tuple of ints, a dtype string and an axes tuple."""


def replicated_geometry(shape, dtype, mesh: MeshModel) -> TensorGeometry:
    return tensor_geometry(shape, dtype, (), mesh)


@functools.lru_cache(maxsize=4096)
def _indices(mesh: MeshModel, shape, spec):
    sharding = mesh.sharding(spec)
    if not mesh.abstract:
        return {d.id: idx for d, idx in sharding.devices_indices_map(shape).items()}
    from .._adapters.jax import indices_on_positions

    return dict(enumerate(indices_on_positions(sharding, shape, mesh.size)))
