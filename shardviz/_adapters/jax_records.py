"""Shardings as plain data and back: what a cached compile keeps of the
layouts XLA chose, so that reading it again gives the same objects.

>>> from shardviz._adapters.jax_records import spec_data
>>> from jax.sharding import PartitionSpec as P
>>> spec_data(P("batch", None, ("model", "seq")))
['batch', None, ['model', 'seq']]
"""

from __future__ import annotations

import base64


class NotRecordable(Exception):
    """A sharding this module cannot write as data (the compile is then not
    cached: never a wrong figure)."""


def spec_data(spec) -> list:
    """A ``PartitionSpec`` as a JSON list: ``None``, a name, or a list of names
    per dimension."""
    if getattr(spec, "unreduced", None) or getattr(spec, "reduced", None):
        raise NotRecordable("a spec with unreduced or reduced axes")
    out: list = []
    for entry in spec:
        if entry is None or isinstance(entry, str):
            out.append(entry)
        elif isinstance(entry, tuple) and all(isinstance(a, str) for a in entry):
            out.append(list(entry))
        else:
            raise NotRecordable(f"a spec entry {entry!r}")
    return out


def spec_from(data: list):
    """The ``PartitionSpec`` :func:`spec_data` wrote."""
    from jax.sharding import PartitionSpec

    return PartitionSpec(*(tuple(e) if isinstance(e, list) else e for e in data))


def hlo_sharding_data(hlo) -> str:
    """XLA's ``HloSharding`` as text: its ``OpSharding`` proto in base64.

    Reason: ``HloSharding`` has no public constructor from data; its proto
    round trip (``to_proto`` / ``xla_client.HloSharding.from_proto``) is in
    ``jax._src.lib``. Waits for a public serialisation of XLA shardings.
    """
    return base64.b64encode(hlo.to_proto().SerializeToString()).decode("ascii")


def hlo_sharding_from(text: str):
    """The ``HloSharding`` :func:`hlo_sharding_data` wrote.

    Reason: as for :func:`hlo_sharding_data`, ``xla_client.HloSharding`` and
    ``OpSharding`` are reached through ``jax._src.lib``. Waits for a public
    serialisation of XLA shardings.
    """
    from jax._src.lib import xla_client

    proto = xla_client.OpSharding()
    proto.ParseFromString(base64.b64decode(text))
    return xla_client.HloSharding.from_proto(proto)


def _device_ids(mesh) -> list[int]:
    return [int(d.id) for d in mesh.devices.flat]


def sharding_data(sharding, ndim: int | None, mesh, hlo=None) -> list:
    """A sharding XLA chose, as data, relative to ``mesh`` (the program's
    mesh): ``["named", spec]`` for a ``NamedSharding`` on that mesh's devices
    and axes, else ``["hlo", proto, device ids]``.

    Reason: a sharding that no PartitionSpec names is JAX's private
    ``GSPMDSharding``, built from the HloSharding and a device order
    (``_to_xla_hlo_sharding``, ``_device_assignment``); ``hlo``, when
    given, is XLA's own description of it. Waits for a public
    way to write and read any ``jax.sharding.Sharding``.
    """
    from jax.sharding import NamedSharding

    if isinstance(sharding, NamedSharding):
        m = sharding.mesh
        if (tuple(m.axis_names) != tuple(mesh.axis_names)
                or tuple(m.devices.shape) != tuple(mesh.devices.shape)
                or _device_ids(m) != _device_ids(mesh)):
            raise NotRecordable("a sharding on another mesh")
        return ["named", spec_data(sharding.spec)]
    try:
        if hlo is None:
            hlo = sharding._to_xla_hlo_sharding(ndim)
        ids = [int(d.id) for d in sharding._device_assignment]
    except Exception as e:  # noqa: BLE001 - any sharding JAX cannot describe is not kept
        raise NotRecordable(f"a {type(sharding).__name__}") from e
    return ["hlo", hlo_sharding_data(hlo), ids]


def sharding_from(data: list, mesh):
    """The sharding :func:`sharding_data` wrote, on ``mesh``.

    Reason: a sharding no PartitionSpec names is rebuilt as JAX's private
    ``GSPMDSharding``. Waits for a public way to read any
    ``jax.sharding.Sharding``.
    """
    from jax.sharding import NamedSharding

    if data[0] == "named":
        return NamedSharding(mesh, spec_from(data[1]))
    from jax._src.sharding_impls import GSPMDSharding

    by_id = {int(d.id): d for d in mesh.devices.flat}
    return GSPMDSharding(tuple(by_id[i] for i in data[2]), hlo_sharding_from(data[1]))
