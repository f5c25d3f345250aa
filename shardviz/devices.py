"""Simulated CPU devices.

JAX fixes its device count when its backend starts, which happens at the
first JAX operation. :func:`simulate_devices` must therefore run first, right
after the imports; a notebook that calls it late has to restart its kernel.

>>> import shardviz
>>> shardviz.simulate_devices(8)   # doctest: +SKIP
8
"""

from __future__ import annotations

from ._adapters.jax import backend_started
from .errors import ShardvizError
from .format import plural

MAX_SIMULATED_DEVICES = 2048
"""The most CPU devices shardviz simulates. JAX starts 2,048 devices in about
2.5 s and ends the process in about 6 s; at 4,096 ending takes 14 s, at 8,192
over 30 s (``bench/bench_devices.py``). Larger meshes are planned without
devices: layouts, shards and bytes are exact on an abstract mesh."""


def simulate_devices(n: int = 8, *, cpu_only: bool = True) -> int:
    """Make JAX expose ``n`` CPU devices, and return ``n``.

    Call it before any JAX operation. It is a no-op when ``n`` devices are
    already in force, and raises :class:`ShardvizError` when the backend has
    already started with another count.

    Args:
        n: the number of CPU devices to simulate.
        cpu_only: also make CPU the only JAX platform, so that Keras's
            ``list_devices()`` returns the simulated devices even on a
            machine with an accelerator. Only applied before the backend
            starts.
    """
    import numbers

    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ShardvizError(
            f"simulate_devices(n={n!r:.40}): n must be a positive integer.",
            hint="Pass the number of devices the plan's mesh needs, e.g. simulate_devices(8).",
        )
    n = int(n)
    if n > MAX_SIMULATED_DEVICES:
        raise ShardvizError(
            f"simulate_devices({n}): shardviz simulates at most {MAX_SIMULATED_DEVICES:,} "
            f"devices. JAX's start-up and shut-down grow with the count (about 14 s to end a "
            "process with 4,096 devices, over 30 s with 8,192), and a notebook would stall.",
            hint="Analyse larger meshes without simulating them: layouts, shard shapes and "
            "bytes per device are exact on an abstract mesh (analyze without inputs).",
        )
    import jax

    if backend_started():
        count = jax.device_count()
        if count == n:
            return n
        raise ShardvizError(
            f"JAX has already started with {plural(count, 'device')}, so it cannot "
            f"simulate {n}: the device count is fixed when JAX runs its first operation.",
            hint=(
                "Restart the kernel (or the Python process) and call "
                f"shardviz.simulate_devices({n}) right after the imports, "
                "before anything touches JAX."
            ),
        )
    if cpu_only and not jax.config.jax_platforms:
        jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", n)
    return n

