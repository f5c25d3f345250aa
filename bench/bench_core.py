"""Core engine figures: re-analysis after a rule edit, and planning a 70B model.

Run:  .venv/bin/python bench/bench_core.py

Prints:
* the median time to re-analyse a 1,000-variable model after one rule edit,
  with its scan cached (target <= 20 ms), and the ratio against rebuilding
  the Keras model under the edited distribution;
* the time and peak RSS of scanning and analysing a 70B-parameter
  Llama-shaped builder, 80 blocks, in a fresh process (targets <= 5 s and
  <= 1.5 GB).
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


def dense_stack(layers: int = 500, width: int = 128):
    import keras

    x = keras.Input((width,), name="x")
    h = x
    for i in range(layers):
        h = keras.layers.Dense(width, name=f"dense_{i}")(h)
    return keras.Model(x, h, name="stack")


def bench_reanalysis(repeats: int = 50):
    import shardviz
    from shardviz import Plan

    scan = shardviz.scan(dense_stack)
    assert len(scan.variables) == 1000, len(scan.variables)
    base = Plan({"batch": 2, "model": 4}, {
        r"dense_\d*[02468]/kernel": (None, "model"),
        r"dense_\d*[13579]/kernel": ("model", None),
        r"dense_\d*[02468]/bias": ("model",),
        r"dense_\d+/output": ("batch", None),
    })
    _ = shardviz.analyze(scan, base).variables  # warm caches for the unedited rules
    times = []
    for i in range(repeats):
        edited = base.with_rule(r"dense_\d*[13579]/kernel", ("model", None) if i % 2 else (None, "model"))
        edited = edited.with_rule_at(2, key=rf"dense_\d*[02468]/bias{'' if i % 2 else '()'}")
        t = time.perf_counter()
        report = shardviz.analyze(scan, edited)
        _ = report.variables, report.problems  # the frames the widgets read
        times.append(time.perf_counter() - t)
    median = statistics.median(times)

    rebuild = []
    for i in range(3):
        plan = base if i % 2 else base.with_rule(r"dense_\d*[13579]/kernel", (None, "model"))
        t = time.perf_counter()
        with plan.to_keras().scope():
            model = dense_stack()
        for v in model.variables:
            v.value.block_until_ready()
        rebuild.append(time.perf_counter() - t)
    rebuild_median = statistics.median(rebuild)
    return median, rebuild_median


def bench_70b_child():
    import resource

    t = time.perf_counter()
    import shardviz

    shardviz.simulate_devices(8)
    import keras  # noqa: F401  (a builder's module imports keras anyway)

    from shardviz import examples

    imported = time.perf_counter() - t
    t = time.perf_counter()
    report = shardviz.analyze(examples.llama_70b, examples.llama_plan(2, 4))
    _ = report.variables, report.problems
    elapsed = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({
        "seconds": elapsed, "import_seconds": imported, "peak_rss": rss,
        "params": report.scan.param_count, "variables": len(report.scan.variables),
        "per_device": report.variable_bytes_per_device,
    }))


def main():
    if "--child-70b" in sys.argv:
        return bench_70b_child()
    import shardviz

    shardviz.simulate_devices(8)
    median, rebuild = bench_reanalysis()
    print(f"re-analysis, 1,000 variables, one rule edit, scan cached: "
          f"{median * 1e3:.1f} ms median (target <= 20 ms)")
    print(f"rebuilding the Keras model under the edited distribution: {rebuild * 1e3:.0f} ms "
          f"median; re-analysis is {rebuild / median:.0f}x faster")
    out = subprocess.run([sys.executable, __file__, "--child-70b"], capture_output=True,
                         text=True, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"70B Llama-shaped builder ({r['params'] / 1e9:.1f}B params, {r['variables']} "
          f"variables, 80 blocks): scan + analyse {r['seconds']:.2f} s (target <= 5 s), "
          f"peak RSS {r['peak_rss'] / 2**30:.2f} GiB (target <= 1.5 GB); "
          f"(importing keras first: {r['import_seconds']:.1f} s); "
          f"{r['per_device'] / 2**30:.1f} GiB of variables per device on 2x4")


if __name__ == "__main__":
    main()
