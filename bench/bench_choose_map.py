"""choose_map at a keras-hub preset's size for a TPU target, with and without
``skip_dominated``: the compiles each made, the seconds, and whether the choice
is the same.

Run:  .venv/bin/python bench/bench_choose_map.py [--classes Llama3Backbone,...]

Each backbone is built at its smallest preset's configuration (bfloat16,
nothing allocated) and its candidates compiled with the TPU compiler for
v5e:2x4 (batch=2 x model=4) at 16 x 512 tokens, as bench/records/hub_maps.py does.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    import shardviz

    shardviz.simulate_devices(8)
    from shardviz import hub as hb

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--classes", default="Llama3Backbone,Phi3Backbone")
    a = p.parse_args()
    mesh, target = {"batch": 2, "model": 4}, "v5e:2x4"
    for name in a.classes.split(","):
        scan = hb.scan(name, "preset", 16, 512, dtype="bfloat16")
        given = hb.inputs(name, scan.model, 16, 512, "preset")
        found = {}
        for skip in (False, True):
            start = time.perf_counter()
            choice = shardviz.choose_map(scan, mesh, inputs=given, target=target,
                                         skip_dominated=skip)
            c = choice.candidates
            found[skip] = choice
            print(f"{name} skip_dominated={skip}: {int(c.skipped.isna().sum())} of {len(c)} "
                  f"candidates compiled, {time.perf_counter() - start:.0f} s; chose "
                  f"{choice.label} ({choice.chosen.bytes_per_device / 2**20:,.1f} MiB per chip)",
                  flush=True)
        same = found[False].plan == found[True].plan
        print(f"{name}: the same choice: {same}", flush=True)


if __name__ == "__main__":
    main()
