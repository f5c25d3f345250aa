"""Forward-pass figures: abstract analysis of an 8B model, concrete overhead.

Run:  .venv/bin/python bench/bench_trace.py

Prints:
* time and peak RSS of the abstract analysis (scan, variable layouts, jitted
  forward pass lowered and compiled, activations, collectives, memory) of an
  8B-parameter Llama-shaped builder, 32 blocks, on 8 simulated devices, in a
  fresh process (targets <= 60 s and <= 4 GB);
* concrete mode against a plain jitted ``stateless_call`` of the same model
  with the same sharded variables and inputs (target <= 1.5x its time).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def child_8b():
    import resource

    import shardviz

    shardviz.simulate_devices(8)
    import keras  # noqa: F401

    from shardviz import examples

    t = time.perf_counter()
    report = shardviz.analyze(examples.llama_8b, examples.llama_plan(2, 4), inputs=(8, 1024))
    _ = report.activations, report.collectives, report.problems
    elapsed = time.perf_counter() - t
    assert report.trace_error is None, report.trace_error
    print(json.dumps({
        "seconds": elapsed, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "params": report.scan.param_count, "activations": len(report.trace.activations),
        "collectives": len(report.trace.collectives), "trace": report.trace.seconds,
        "temp": report.trace.memory["temp_bytes"], "args": report.trace.memory["argument_bytes"],
    }))


def concrete_overhead(repeats: int = 5):
    import jax
    import numpy as np

    import shardviz
    from shardviz import examples

    def build():
        return examples.llama(n_blocks=4, d_model=512, ff=1024, heads=8, kv_heads=4, vocab=4096)

    plan = examples.llama_plan(2, 4)
    model = build()
    scan = shardviz.scan(model)
    x = np.zeros((8, 128), "int32")
    base = shardviz.analyze(scan, plan)
    shardings = [vl.geometry.sharding for vl in base.variable_layouts]
    by_id = {id(v): s for v, s in zip(model.variables, shardings)}
    data = jax.sharding.NamedSharding(base.mesh.jax_mesh, jax.sharding.PartitionSpec("batch", None))

    plain, ours = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        tv = [jax.device_put(v.value, by_id[id(v)]) for v in model.trainable_variables]
        ntv = [jax.device_put(v.value, by_id[id(v)]) for v in model.non_trainable_variables]
        xs = jax.device_put(x, data)
        fn = jax.jit(lambda tv, ntv, x: model.stateless_call(tv, ntv, x)[0])
        jax.block_until_ready(fn(tv, ntv, xs))
        plain.append(time.perf_counter() - t)

        t = time.perf_counter()
        report = shardviz.analyze(scan, plan, inputs=x, mode="concrete")
        _ = report.activations, report.collectives
        ours.append(time.perf_counter() - t)
        assert report.trace_error is None, report.trace_error
    return statistics.median(plain), statistics.median(ours)


def main():
    if "--child-8b" in sys.argv:
        return child_8b()
    import shardviz

    shardviz.simulate_devices(8)
    out = subprocess.run([sys.executable, __file__, "--child-8b"], capture_output=True,
                         text=True, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    steps = ", ".join(f"{k} {v:.1f} s" for k, v in r["trace"].items())
    print(f"8B Llama-shaped builder ({r['params'] / 1e9:.2f}B params, 32 blocks), abstract "
          f"forward pass on 2x4 devices, inputs (8, 1024): {r['seconds']:.1f} s (target <= 60 s), "
          f"peak RSS {r['peak_rss'] / 2**30:.2f} GiB (target <= 4 GB); {r['activations']} "
          f"activations, {r['collectives']} collectives; {steps}")
    plain, ours = concrete_overhead()
    print(f"concrete mode, 4-block Llama-shaped model: {ours * 1e3:.0f} ms median against "
          f"{plain * 1e3:.0f} ms for a plain jitted stateless_call: {ours / plain:.2f}x "
          f"(target <= 1.5x)")


if __name__ == "__main__":
    main()
