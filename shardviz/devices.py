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
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ShardvizError(
            f"simulate_devices(n={n!r}): n must be a positive integer.",
            hint="Pass the number of devices the plan's mesh needs, e.g. simulate_devices(8).",
        )
    import jax

    if backend_started():
        count = jax.device_count()
        if count == n:
            return n
        raise ShardvizError(
            f"JAX has already started with {count} device(s), so it cannot "
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


def device_count() -> int:
    """The number of JAX devices (this starts the backend)."""
    import jax

    return jax.device_count()
