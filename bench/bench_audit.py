"""shardviz.audit of a keras-hub backbone's shipped layout map at its
smallest preset's size, on 8 simulated CPU devices (batch=2 x model=4),
compiled for a forward pass of 8 x 128 tokens with every alternative split
compiled too. Target: at most 60 s per backbone.

Run:  .venv/bin/python bench/bench_audit.py [--classes QwenBackbone,Llama3Backbone]
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
    p.add_argument("--classes", default="QwenBackbone,Llama3Backbone")
    a = p.parse_args()
    for name in a.classes.split(","):
        start = time.perf_counter()
        scan = shardviz.scan(hb.builder(name, "preset", dtype="bfloat16"))
        built = time.perf_counter() - start
        audit = shardviz.audit(scan, name, mesh={"batch": 2, "model": 4}, batch=8, seq=128)
        total = time.perf_counter() - start
        kinds = audit.findings.kind.value_counts().to_dict()
        print(f"{name} ({hb.entry(name).preset}): audit in {total:.1f} s "
              f"(model built without allocating in {built:.1f} s); findings {kinds}")


if __name__ == "__main__":
    main()
