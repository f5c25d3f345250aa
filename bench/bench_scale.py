"""Where the core used to fall off a cliff: many rules, many variables, many devices.

Run:  .venv/bin/python bench/bench_scale.py

Prints:
* the median time of one rule edit (re-analysis with the frames the widgets
  read) at 1,000 variables, with 10, 100 and 1,000 rules of which half match
  nothing (target <= 20 ms whatever the number of rules), for an edit of a
  rule's axes and of its key;
* the median re-analysis after one rule edit at 1,000, 5,000 and 20,000
  variables (target <= 100 ms at 20,000);
* ``report.devices`` and the memory picture on a 32,768-device mesh.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def dense_stack(layers: int):
    import keras

    def build():  # chains of at most 200 layers, side by side, summed
        x = keras.Input((16,), name="x")
        ends = []
        for start in range(0, layers, 200):
            h = x
            for i in range(start, min(layers, start + 200)):
                h = keras.layers.Dense(16, name=f"dense_{i}")(h)
            ends.append(h)
        y = ends[0] if len(ends) == 1 else keras.layers.Add(name="sum")(ends)
        return keras.Model(x, y, name="stack")

    return build


def median_edit(scan, base, repeats=30, key=False):
    """One edit per run: the axes of the first rule, or (``key``) its key."""
    import shardviz

    _ = shardviz.analyze(scan, base).problems  # warm the per-scan caches
    times = []
    first = base.rules[0]
    for i in range(repeats):
        if key:
            edited = base.with_rule_at(0, key=first.key + ("" if i % 2 else "()"))
        else:
            edited = base.with_rule_at(0, axes=first.axes[::-1] if i % 2 else first.axes)
        t = time.perf_counter()
        report = shardviz.analyze(scan, edited)
        _ = report.variables, report.problems, report.rules
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_rules(scan):
    from shardviz import Plan

    out = {}
    for n in (10, 100, 1000):
        rules = {r"dense_\d*[13579]/kernel": (None, "model")}
        for i in range(n // 2 - 1):
            rules[rf"dense_{i}/(kernel|bias)"] = (None,) if i % 3 else (None, None)
        for i in range(n - len(rules)):
            rules[f"typo_{i}/kernal"] = (None, "model")  # matches nothing
        plan = Plan({"batch": 2, "model": 4}, rules)
        out[n] = median_edit(scan, plan), median_edit(scan, plan, key=True)
    return out


def bench_variables():
    import shardviz
    from shardviz import Plan

    out = {}
    plan = Plan({"batch": 2, "model": 4}, {
        r"dense_\d*[02468]/kernel": (None, "model"), r"dense_\d*[13579]/kernel": ("model", None),
        r"dense_\d*[02468]/bias": ("model",)})
    for n in (1000, 5000, 20000):
        scan = shardviz.scan(dense_stack(n // 2))
        repeats = 10 if n > 5000 else 20
        out[n] = median_edit(scan, plan, repeats), median_edit(scan, plan, repeats, key=True)
    return out


def bench_devices():
    import shardviz
    from shardviz import Plan, examples

    report = shardviz.analyze(examples.mlp, Plan({"batch": 128, "model": 256},
                                                 {".*kernel": (None, "model")}))
    t = time.perf_counter()
    frame = report.devices
    devices = time.perf_counter() - t
    t = time.perf_counter()
    fig = report.show_memory()
    fig._repr_png_()
    picture = time.perf_counter() - t
    return len(frame), devices, picture


def main():
    import shardviz

    shardviz.simulate_devices(8)
    scan = shardviz.scan(dense_stack(500))
    for n, (axes, key) in bench_rules(scan).items():
        print(f"rule edit, 1,000 variables, {n:>5,} rules (half unused): axes {axes * 1e3:6.1f} ms,"
              f" key {key * 1e3:6.1f} ms median (target <= 20 ms)")
    for n, (axes, key) in bench_variables().items():
        print(f"re-analysis after one rule edit, {n:>6,} variables: axes {axes * 1e3:6.1f} ms, "
              f"key {key * 1e3:6.1f} ms median" + (" (target <= 100 ms)" if n == 20000 else ""))
    rows, devices, picture = bench_devices()
    print(f"report.devices on {rows:,} devices: {devices:.2f} s; memory picture: {picture:.2f} s")


if __name__ == "__main__":
    main()
