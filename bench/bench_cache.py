"""The compile cache: a second analysis of the same program, in a new
process, costs its tracing only.

An 8B Llama-shaped model's forward pass (shardviz.examples.llama_8b, inputs
16 x 2048) under tensor-parallel rules on a 2 x 8 mesh of v5e:4x4, compiled
by the TPU compiler: once in a process with an empty cache, then again in a
new process that finds the entry. Each process imports jax and keras and
opens the TPU topology first, as a notebook has by its second cell, and
times ``analyze`` alone.

Run:  .venv/bin/python bench/bench_cache.py

Prints both times and their ratio (target: the second at most 10% of the
first), and the size of the entry on disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap

ONE = textwrap.dedent("""
    import json, sys, time
    import shardviz
    import jax, keras
    from shardviz import examples
    from shardviz.target.tpu import tpu_topology_devices
    tpu_topology_devices("v5e", "4x4")
    plan = examples.llama_plan(data=2, model=8)
    t = time.perf_counter()
    r = shardviz.analyze(examples.llama_8b, plan, inputs=(16, 2048), target="v5e:4x4")
    seconds = time.perf_counter() - t
    print(json.dumps({"seconds": seconds, "from_cache": r.from_cache,
                      "timings": r.timings, "fits": r.totals.fits,
                      "bytes_per_device": r.totals.bytes_per_device,
                      "collectives": len(r.collectives)}))
""")


def run(cache: str) -> dict:
    env = {**os.environ, "SHARDVIZ_CACHE_DIR": cache, "SHARDVIZ_CACHE": "on"}
    out = subprocess.run([sys.executable, "-c", ONE], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="shardviz-bench-cache-") as cache:
        first, second = run(cache), run(cache)
        size = sum(f.stat().st_size for f in os.scandir(os.path.join(cache, "compiles")))
    assert not first["from_cache"] and second["from_cache"]
    assert {k: first[k] for k in ("fits", "bytes_per_device", "collectives")} == \
        {k: second[k] for k in ("fits", "bytes_per_device", "collectives")}
    ratio = second["seconds"] / first["seconds"]
    print(f"8B forward pass on v5e:4x4 (2 x 8 mesh), analyze in a new process: first "
          f"{first['seconds']:.1f} s (compile {first['timings'].get('forward_compile', 0):.1f} s), "
          f"second {second['seconds']:.2f} s from the cache (reading it "
          f"{second['timings'].get('forward_cache', 0):.2f} s): {ratio:.1%} of the first "
          f"(target <= 10%); the entry takes {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
