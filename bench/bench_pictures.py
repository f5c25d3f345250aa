"""Picture figures: one tensor, a 200-variable grid, and JAX's text drawing.

Run:  .venv/bin/python bench/bench_pictures.py

Prints:
* the median time to draw one tensor's picture and render it to PNG, as a
  notebook does (target <= 50 ms);
* the time to draw and render the pictures of 200 variables in one grid
  (target <= 3 s);
* the ratio against ``jax.debug.visualize_array_sharding`` on the same 2-D
  tensors.
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def median_time(fn, repeats=30):
    fn()  # warm up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    import shardviz

    shardviz.simulate_devices(8)
    import jax

    from shardviz import examples

    model = examples.llama(n_blocks=22, d_model=256, ff=512, heads=8, kv_heads=4, vocab=1024)
    report = shardviz.analyze(model, examples.llama_plan(2, 4))
    paths = report.variables["path"].tolist()[:200]
    two_d = [p for p in paths if len(report.variable(p).info.shape) == 2][:20]
    arrays = {p: jax.device_put(jax.numpy.zeros(report.variable(p).info.shape),
                                report.geometry(p).sharding) for p in two_d}

    def one():
        report.show("block_0_gate/kernel")._repr_png_()

    def ours_2d():
        for p in two_d:
            report.show(p)._repr_png_()

    def jax_2d():
        with contextlib.redirect_stdout(io.StringIO()):
            for p in two_d:
                jax.debug.visualize_array_sharding(arrays[p])

    def grid():
        report.show_grid(paths)._repr_png_()

    single = median_time(one)
    print(f"one tensor's picture, drawn and rendered to PNG: {single * 1e3:.1f} ms median "
          f"(target <= 50 ms)")
    t = median_time(grid, repeats=3)
    print(f"{len(paths)} variables in one grid, drawn and rendered to PNG: {t:.2f} s median "
          f"(target <= 3 s)")
    ours, theirs = median_time(ours_2d, 5), median_time(jax_2d, 5)
    print(f"{len(two_d)} 2-D tensors: shardviz pictures {ours / len(two_d) * 1e3:.1f} ms each, "
          f"jax.debug.visualize_array_sharding {theirs / len(two_d) * 1e3:.1f} ms each "
          f"(ratio {ours / theirs:.1f}x)")


if __name__ == "__main__":
    main()
