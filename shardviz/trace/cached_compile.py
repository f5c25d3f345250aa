"""A compile as data: what shardviz reads from a ``jax.stages.Compiled``,
written as an entry of :mod:`.compile_cache`, and read back as an object
that answers the same questions (:class:`CachedCompile`)."""

from __future__ import annotations

import types

from .._adapters.jax_records import (
    NotRecordable,
    hlo_sharding_data,
    hlo_sharding_from,
    sharding_data,
    sharding_from,
)


def program_mesh(args):
    """The mesh a program's arguments are laid out on, or None (a program
    with no abstract, named arguments is not cached: it runs, or it has no
    mesh to read its layouts against)."""
    import jax
    from jax.sharding import NamedSharding

    mesh = None
    for leaf in jax.tree_util.tree_leaves(args):
        if not isinstance(leaf, jax.ShapeDtypeStruct):
            return None  # an array: the program runs here, and is not cached
        sharding = getattr(leaf, "sharding", None)
        if mesh is None and isinstance(sharding, NamedSharding):
            mesh = sharding.mesh
    return mesh


def _memory(compiled) -> dict:
    stats = compiled.memory_analysis()
    out = {}
    for name in dir(stats):
        if name.endswith("_in_bytes"):
            value = getattr(stats, name, None)
            if isinstance(value, int):
                out[name] = value
    return out


def _cost(compiled):
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    if cost is None:
        return None
    return {str(k): float(v) for k, v in dict(cost).items()}


def entry_of_compile(compiled, lowered, mesh, watches: list, delivered: list,
                     log: list[str], module_text: str) -> dict:
    """The entry for a compile that succeeded. Raises
    :class:`~shardviz._adapters.jax_records.NotRecordable` for one whose
    layouts cannot be written as data."""
    import jax

    def none(x):
        return x is None

    kept = [s is not None for s in jax.tree_util.tree_leaves(compiled.input_shardings,
                                                              is_leaf=none)]
    infos = jax.tree_util.tree_leaves(lowered.out_info)
    outs = jax.tree_util.tree_leaves(compiled.output_shardings)
    if len(infos) != len(outs):
        raise NotRecordable("outputs and their layouts differ in number")
    seen = []
    for number, sharding, hlo in delivered:
        if number is None:
            raise NotRecordable("a layout watch made outside the numbered trace")
        data = sharding_data(sharding, None, mesh, hlo=hlo)
        seen.append([number, data, hlo_sharding_data(hlo) if hlo is not None else None])
    return {
        "kind": "compiled",
        "hlo_text": compiled.as_text(),
        "module_text": module_text,
        "memory": _memory(compiled),
        "cost": _cost(compiled),
        "inputs_read": kept,
        "outputs": [sharding_data(s, len(i.shape), mesh) for s, i in zip(outs, infos)],
        "watches": len(watches),
        "delivered": seen,
        "log": list(log),
    }


def entry_of_refusal(message: str, flops: float | None, watches: list) -> dict:
    """The entry for a program the compiler refused for memory."""
    return {"kind": "refused", "error": message, "flops": flops, "watches": len(watches)}


class CachedCompile:
    """The parts of a ``jax.stages.Compiled`` shardviz reads, from a cache
    entry. It cannot run: programs that run are never cached."""

    from_cache = True

    def __init__(self, entry: dict, lowered, mesh) -> None:
        self._entry, self._lowered, self._mesh = entry, lowered, mesh

    def as_text(self) -> str:
        return self._entry["hlo_text"]

    def cached_module_text(self) -> str:
        return self._entry["module_text"]

    def memory_analysis(self):
        return types.SimpleNamespace(**self._entry["memory"])

    def cost_analysis(self):
        cost = self._entry["cost"]
        return None if cost is None else dict(cost)

    @property
    def input_shardings(self):
        return ([object() if read else None for read in self._entry["inputs_read"]], {})

    @property
    def output_shardings(self):
        import jax

        leaves = [sharding_from(d, self._mesh) for d in self._entry["outputs"]]
        return jax.tree_util.tree_unflatten(self._lowered.out_tree, leaves)

    @property
    def out_info(self):
        return self._lowered.out_info

    def __call__(self, *args, **kwargs):
        raise RuntimeError("a compile read from shardviz's cache cannot run")


def read(entry: dict, lowered, mesh) -> tuple[list, CachedCompile | None] | None:
    """What an entry holds, decoded before anything is handed on: the
    ``(number, sharding, hlo_sharding)`` each watch is to be handed, and the
    compile (None for a refusal). None for an entry that cannot be read
    whole (it is compiled again, and rewritten): a cache is never half read."""
    try:
        if entry["kind"] == "refused":
            str(entry["error"])
            return [], None
        deliveries = [(int(number), sharding_from(data, mesh),
                       hlo_sharding_from(hlo) if hlo is not None else None)
                      for number, data, hlo in entry["delivered"]]
        compiled = CachedCompile(entry, lowered, mesh)
        compiled.output_shardings  # noqa: B018 - decoded now, so that a bad entry is a miss
        compiled.memory_analysis()
        for key in ("hlo_text", "module_text", "inputs_read", "log"):
            entry[key]  # noqa: B018
    except Exception:  # noqa: BLE001 - an entry that does not decode is a miss, never a crash
        return None
    return deliveries, compiled
