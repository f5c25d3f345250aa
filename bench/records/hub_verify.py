"""Every keras-hub backbone of shardviz.hub, at its reduced
size: shardviz.layout_map_for's map on a batch=2 x model=4 mesh, verified on
2 processes (forward pass and one model.fit step) against one process.

Run:  .venv/bin/python bench/records/hub_verify.py [--classes LlamaBackbone,...] [--out FILE]

A backbone with several outputs (BERT's sequence and pooled outputs, an
encoder-decoder's two) trains on one (the decoder's, else the sequence
output, else the first), and its record says which; the map is still the
one chosen for the whole backbone, and every variable is compared.

It prints a line per backbone (shards compared, the largest difference of
the output and of the train step's loss and updated variables, seconds) and
writes one JSON record per backbone (with the date, the versions and the
shardviz commit it was made at) to --out (by default
tests/data/hub_verify.jsonl, which tests/test_hub_backbones.py reads),
replacing the records of the backbones it ran and keeping the others.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata as md
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

MESH = {"batch": 2, "model": 4}
BATCH, SEQ = 8, 32


SINGLE = """from shardviz import hub
build = hub.builder({name!r})
"""
SEVERAL = """import keras
from shardviz import hub


def build():
    backbone = hub.builder({name!r})()
    return keras.Model(backbone.input, backbone.output[{key!r}], name=backbone.name)
"""


def main() -> None:
    import shardviz

    shardviz.simulate_devices(8)
    from shardviz import hub as hb

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--classes", default=",".join(hb.BACKBONES))
    p.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "hub_verify.jsonl"))
    a = p.parse_args()
    folder = tempfile.mkdtemp()
    sys.path.insert(0, folder)
    versions = {m: md.version(m) for m in ("keras", "keras-hub", "jax", "jaxlib")}
    versions["shardviz"] = f"{shardviz.__version__} ({commit()})"
    records = []
    start = time.perf_counter()
    for name in a.classes.split(","):
        t = time.perf_counter()
        module = f"hub_{name.lower()}"
        scan = hb.scan(name, "reduced", BATCH, SEQ)
        outputs = scan.model.output
        # A backbone with several outputs (a dict) trains on one of them: the decoder's,
        # else the sequence output; every variable's shards are still compared.
        key = None
        if isinstance(outputs, dict):
            key = next((k for k in ("decoder_sequence_output", "sequence_output",
                                    "last_hidden_state") if k in outputs),
                       next(k for k in sorted(outputs) if hasattr(outputs[k], "shape")))
        elif isinstance(outputs, (list, tuple)) and len(outputs) > 1:
            key = 0  # a list of outputs (D-FINE's): the first
        with open(os.path.join(folder, f"{module}.py"), "w") as f:
            f.write(SINGLE.format(name=name) if key is None else
                    SEVERAL.format(name=name, key=key))
        # The map is the one layout_map_for gives the backbone (every variable it builds,
        # the prompt encoders a wrapper does not reach included); the workers build the
        # wrapper, which trains on one output.
        inputs = hb.inputs(name, scan.model, BATCH, SEQ)
        record = {"backbone": name, "mesh": MESH, "batch": BATCH, "seq": SEQ, "trained_on": key,
                  "date": str(datetime.date.today()), **versions}
        try:
            choice = shardviz.choose_map(scan, MESH, inputs=inputs)
            result = shardviz.verify(f"{module}:build", choice.plan, processes=2,
                                     inputs=inputs, train_step=True, timeout=600)
        except Exception as e:  # noqa: BLE001  one backbone's failure is a record
            record.update(agree=False, error=f"{type(e).__name__}: {e}"[:400])
        else:
            record.update(agree=result.agree, label=choice.label, rules=len(choice.plan.rules),
                          shards=result.checked, output_max_abs_diff=result.max_abs_diff,
                          output_tolerance_used=result.tolerance_used,
                          step_max_abs_diff=result.step_max_abs_diff,
                          step_tolerance_used=result.step_tolerance_used,
                          disagreements=result.lines[:3])
        record["seconds"] = round(time.perf_counter() - t, 1)
        records.append(record)
        print(f"{name}: agree={record['agree']} shards={record.get('shards')} "
              f"output diff={record.get('output_max_abs_diff')} "
              f"step diff={record.get('step_max_abs_diff')} "
              f"{record.get('error', '')} {record['seconds']} s", flush=True)
    # Records of backbones not run this time stay as they were.
    kept = {}
    if os.path.exists(a.out):
        with open(a.out) as f:
            kept = {r["backbone"]: r for r in map(json.loads, f.read().splitlines())}
    kept.update({r["backbone"]: r for r in records})
    with open(a.out, "w") as f:
        for name in sorted(kept, key=lambda n: (n not in hb.BACKBONES, hb.BACKBONES.index(n)
                                                if n in hb.BACKBONES else 0)):
            f.write(json.dumps(kept[name]) + "\n")
    print(f"{sum(r['agree'] for r in records)} of {len(records)} agree; "
          f"{time.perf_counter() - start:.0f} s; written to {a.out}")


def commit() -> str:
    """The commit the records were made at, "+ changes" when the work tree
    differs from it; "no git" outside a clone."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                 cwd=ROOT, text=True, capture_output=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "no git"
    return f"commit {head}" + (" + changes" if changed else "")


if __name__ == "__main__":
    main()
