"""Record the chip compiler's own buffer assignment of what ``model.fit`` runs:
for each case, ``record.py`` runs in a child process whose compiles dump
their buffer assignment (``XLA_FLAGS=--xla_dump_to=...``), and the train
step's live-range file is read: every buffer live at its peak, with bytes,
and the stated total. Only the standard library is used here (the chip's
machine has no shardviz); ``tests/test_peak.py`` compares shardviz's
``report.peak`` on this machine with the records, buffer by buffer.

    KERAS_BACKEND=jax python3 bench/records/chip/peak_record.py \
        --cases dict_model_fit_b4,decoder_fit_b7 --out peaks.jsonl

One JSON object per case: ``case``, ``ran`` (and ``error``) from record.py,
``module`` (the dumped module's file), ``total``, ``position``, ``length``,
``live`` (``[buffer, bytes]`` pairs, largest first), and the versions.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PEAK = re.compile(r"^\s*Live ranges at (\d+) \(peak\):\s*$")
LIVE = re.compile(r"^\s*(\S+): (\d+) bytes \(cumulative: \d+ bytes\)\s*$")
TOTAL = re.compile(r"^\s*Stack trace breakdown for peak usage: ([\d ]+) bytes")
MAX = re.compile(r"^HloLiveRange \(max (\d+)\):")


def read_live_ranges(path: str) -> dict:
    out: dict = {"module": os.path.basename(path), "live": []}
    in_peak = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = MAX.match(line)
            if m:
                out["length"] = int(m.group(1)) + 1
            m = PEAK.match(line)
            if m:
                out["position"], in_peak = int(m.group(1)), True
                continue
            m = TOTAL.match(line)
            if m:
                out["total"] = int(m.group(1).replace(" ", ""))
                break
            if in_peak:
                v = LIVE.match(line)
                if v:
                    out["live"].append([v.group(1), int(v.group(2))])
    return out


def train_step_module(directory: str) -> dict | None:
    """The dumped train step: the live-range file with the largest peak among
    the modules named after a train step, else among all."""
    found = []
    for root, _, names in os.walk(directory):
        for name in names:
            if name.endswith("-live-range.txt"):
                found.append(read_live_ranges(os.path.join(root, name)))
    found = [f for f in found if "total" in f]
    named = [f for f in found if "train" in f["module"]]
    pool = named or found
    return max(pool, key=lambda f: f["total"]) if pool else None


def record(case: str, out_dir: str) -> dict:
    dump = tempfile.mkdtemp(prefix=f"dump-{case}-")
    cache = tempfile.mkdtemp(prefix="jaxcache-")  # a fresh cache: the step is compiled here
    result = os.path.join(out_dir, f"{case}.record.jsonl")
    env = {**os.environ, "RECORD_JAX_CACHE": cache,
           "XLA_FLAGS": f"--xla_dump_to={dump} --xla_dump_hlo_as_text"}
    try:
        subprocess.run([sys.executable, os.path.join(HERE, "record.py"), "--cases", case,
                        "--out", result], env=env, check=False, timeout=900)
        ran = {}
        if os.path.exists(result):
            with open(result, encoding="utf-8") as f:
                lines = [json.loads(x) for x in f if x.strip()]
            if lines:
                ran = {k: lines[-1].get(k) for k in ("ran", "error", "versions", "batch",
                                                     "builder", "date")}
        peak = train_step_module(dump) or {"error": "no live-range file was dumped"}
        return {"case": case, **ran, **peak}
    finally:
        shutil.rmtree(dump, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", required=True, help="record.py case names, comma separated")
    parser.add_argument("--out", required=True, help="JSON lines, appended to")
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="peak-records-")
    for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
        rec = record(case, work)
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
        print(case, rec.get("ran"), rec.get("total"), len(rec.get("live", [])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
