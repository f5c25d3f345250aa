"""Memory: per-device bytes and flops of a compiled program.

:func:`memory` reads ``compiled.memory_analysis()`` and
``compiled.cost_analysis()``, and adds back the arguments ``jit`` dropped
because the program never reads them (:func:`unread_bytes`).
"""

from __future__ import annotations

import math


def unread_bytes(compiled, args) -> int:
    """Per-device bytes of the arguments ``jit`` dropped from ``compiled``
    because the program never reads them (an untied output embedding in a
    forward pass, say). They are not in XLA's argument bytes, yet the arrays
    live on the device all the same. ``compiled.input_shardings`` has None
    for each dropped argument."""

    import jax
    import numpy as np

    def none(x):
        return x is None

    kept = jax.tree_util.tree_leaves(compiled.input_shardings, is_leaf=none)
    given = jax.tree_util.tree_leaves((tuple(args), {}), is_leaf=none)
    if len(kept) != len(given):
        raise ValueError(f"{len(given)} arguments but {len(kept)} compiled input shardings")
    total = 0
    for sharding, arg in zip(kept, given):
        if sharding is None and arg is not None:
            shard = arg.sharding.shard_shape(tuple(arg.shape))
            total += math.prod(shard) * np.dtype(arg.dtype).itemsize
    return total


def memory(compiled, args=()) -> dict:
    """Per-device bytes from ``compiled.memory_analysis()``, the bytes of
    the arguments ``args`` it does not read (:func:`unread_bytes`), and flops
    from ``compiled.cost_analysis()`` when XLA reports them."""
    stats = compiled.memory_analysis()
    out: dict[str, float | None] = {
        "argument_bytes": int(getattr(stats, "argument_size_in_bytes", 0)),
        "output_bytes": int(getattr(stats, "output_size_in_bytes", 0)),
        "temp_bytes": int(getattr(stats, "temp_size_in_bytes", 0)),
        "alias_bytes": int(getattr(stats, "alias_size_in_bytes", 0)),
        "code_bytes": int(getattr(stats, "generated_code_size_in_bytes", 0)),
        "unread_bytes": unread_bytes(compiled, args) if args else 0,
    }
    # The most bytes live at once, which the TPU compiler checks against the chip: under
    # the sum above wherever temporaries are not all live together. 0 where none is given.
    peak = int(getattr(stats, "peak_memory_in_bytes", 0) or 0)
    out["peak_bytes"] = peak or None
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    cost = cost or {}
    out["flops"] = float(cost["flops"]) if "flops" in cost else None
    out["bytes_accessed"] = float(cost["bytes accessed"]) if "bytes accessed" in cost else None
    optimal = cost.get("optimal_seconds")
    # The TPU compiler's own estimate; it can be negative, which means none.
    out["optimal_seconds"] = float(optimal) if optimal is not None and optimal > 0 else None
    return out
