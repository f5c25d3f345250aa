"""How JAX's start-up and shut-down grow with the number of simulated devices.

Run:  .venv/bin/python bench/bench_devices.py

For each count, a fresh process makes JAX simulate that many CPU devices and
runs one operation. Prints the seconds to the first result and the seconds
until the process has ended. ``shardviz.simulate_devices`` refuses counts
past the last one that ends within a few seconds (2,048).
"""

from __future__ import annotations

import subprocess
import sys
import time

CHILD = """
import sys, time
start = time.perf_counter()
import jax
jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_num_cpu_devices", int(sys.argv[1]))
import jax.numpy as jnp
jnp.zeros(3).block_until_ready()
assert jax.device_count() == int(sys.argv[1])
print(f"{time.perf_counter() - start:.2f}")
"""


def main():
    for n in (8, 256, 1024, 2048, 4096, 8192):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", CHILD, str(n)], capture_output=True,
                             text=True, timeout=600, check=True)
        ended = time.perf_counter() - start
        print(f"{n:>6,} devices: first result after {float(out.stdout):5.2f} s, "
              f"process ended after {ended:5.1f} s")


if __name__ == "__main__":
    main()
