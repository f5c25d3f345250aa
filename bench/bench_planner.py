"""The planner's speed: ``suggest`` and ``sweep`` on the example models.

Run:  .venv/bin/python bench/bench_planner.py

Prints the time of ``suggest`` on the MLP and the transformer block with
inputs (the best candidates compiled), on the 8B Llama-shaped model for a
64-chip v5e pod (geometry only), and of ``sweep`` over every mesh of 256
devices for the 8B model.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def timed(label, fn):
    t = time.perf_counter()
    result = fn()
    print(f"{label}: {time.perf_counter() - t:.2f} s")
    return result


def main() -> None:
    import shardviz

    shardviz.simulate_devices(8)
    from shardviz import examples

    shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=(8, 16))  # warm up JAX
    found = timed("suggest, MLP, 8 devices, compiled", lambda: shardviz.suggest(
        examples.mlp, devices=8, inputs=(8, 16)))
    print(f"  {len(found)} candidates, {sum(c.compiled for c in found)} compiled; "
          f"best: {found[0].name} on {found[0].row()['mesh']}")
    found = timed("suggest, transformer block, 8 devices, compiled", lambda: shardviz.suggest(
        examples.transformer_block, devices=8, inputs=(8, 16, 64)))
    print(f"  {len(found)} candidates; best: {found[0].name} on {found[0].row()['mesh']}")
    scan = timed("scan, 8B", lambda: shardviz.scan(examples.llama_8b))
    found = timed("suggest, 8B, v5e:8x8, geometry only", lambda: shardviz.suggest(
        scan, target="v5e:8x8"))
    print(f"  best: {found[0].name} on {found[0].row()['mesh']}, "
          f"{found[0].bytes_per_device / 2**30:.1f} GiB of variables per chip")
    frame = timed("sweep, 8B Llama rules, every mesh of 256 devices", lambda: shardviz.sweep(
        scan, examples.llama_plan(2, 4), devices=256))
    print(f"  {len(frame)} meshes, {int((frame['errors'] == 0).sum())} without errors")


if __name__ == "__main__":
    main()
