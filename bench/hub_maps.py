"""keras-hub backbones at a reduced size with their structure kept (heads to
kv heads, experts): the layout map each ships (where it ships one) against
shardviz.layout_map_for's, each compiled for a forward pass on 8 simulated
CPU devices (a batch=2 x model=4 mesh), and the audit's findings on the
shipped map.

Run:  .venv/bin/python bench/hub_maps.py [--classes LlamaBackbone,...]

For each backbone it prints whether the shipped map builds, the memory per
device and the collective bytes per device of the compiled forward pass of
each map (the same program Keras runs: the model's own call under
ModelParallel), and the audit's findings by kind. These are figures at the
reduced size on CPUs, not at the presets' sizes on TPUs.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MESH = {"batch": 2, "model": 4}
BATCH, SEQ = 8, 32

CLASSES = ["LlamaBackbone", "Llama3Backbone", "GemmaBackbone", "QwenBackbone",
           "Qwen2Backbone", "QwenMoeBackbone", "Qwen3MoeBackbone", "MistralBackbone",
           "MixtralBackbone", "Phi3Backbone", "Qwen3Backbone", "GPT2Backbone", "BertBackbone"]

SIZES = dict(vocabulary_size=256, num_layers=2, num_query_heads=8, num_heads=8,
             num_key_value_heads=2, hidden_dim=128, intermediate_dim=256, head_dim=16,
             moe_intermediate_dim=64, shared_expert_intermediate_dim=128, num_experts=4,
             max_sequence_length=64, sliding_window=16)
"""Reduced sizes: 8 query heads to 2 kv heads, 4 experts."""


def builder(name: str):
    import keras_hub

    cls = getattr(keras_hub.models, name)
    params = inspect.signature(cls.__init__).parameters
    kwargs = {k: v for k, v in SIZES.items() if k in params}

    def build():
        import keras

        keras.utils.set_random_seed(0)
        return cls(**kwargs)

    return cls, build


def figures(scan, plan) -> tuple[int, int] | None:
    import shardviz

    report = shardviz.analyze(scan, plan, batch=BATCH, seq=SEQ)
    if report.errors:
        return None
    return report.totals.bytes_per_device, report.totals.collective_bytes or 0


def row(name: str) -> dict:
    import shardviz

    cls, build = builder(name)
    scan = shardviz.scan(build)
    out: dict = {"backbone": name, "ships_map": hasattr(cls, "get_layout_map")}
    ours = shardviz.Plan.from_keras(shardviz.layout_map_for(scan, MESH, batch=BATCH, seq=SEQ))
    out["shardviz"] = figures(scan, ours)
    if out["ships_map"]:
        audit = shardviz.audit(scan, cls, mesh=MESH, batch=BATCH, seq=SEQ)
        t = audit.report.totals
        out["shipped"] = (None if audit.report.errors
                          else (t.bytes_per_device, t.collective_bytes or 0))
        out["findings"] = audit.findings.kind.value_counts().to_dict()
    return out


def kib(pair: tuple[int, int] | None, i: int) -> str:
    return "fails" if pair is None else f"{pair[i] / 1024:,.1f}"


def main() -> None:
    import shardviz

    shardviz.simulate_devices(8)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--classes", default=",".join(CLASSES))
    a = p.parse_args()
    print("| backbone | ships a map | shipped: KiB per device | shipped: collective KiB | "
          "shardviz: KiB per device | shardviz: collective KiB | audit of the shipped map |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    t = time.perf_counter()
    for name in a.classes.split(","):
        try:
            r = row(name)
        except Exception as e:  # noqa: BLE001  one backbone's failure is a row
            print(f"| {name} | | error: {type(e).__name__}: {str(e)[:120]} | | | | |")
            continue
        shipped = r.get("shipped")
        findings = ", ".join(f"{k} {v}" for k, v in r.get("findings", {}).items()) or \
            ("none" if r["ships_map"] else "-")
        print(f"| {name} | {'yes' if r['ships_map'] else 'no'} | "
              f"{kib(shipped, 0) if r['ships_map'] else '-'} | "
              f"{kib(shipped, 1) if r['ships_map'] else '-'} | {kib(r['shardviz'], 0)} | "
              f"{kib(r['shardviz'], 1)} | {findings} |", flush=True)
    print(f"\n{time.perf_counter() - t:.0f} s")


if __name__ == "__main__":
    main()
