"""What the per-operation time model adds to an analysis.

Run:  .venv/bin/python bench/bench_op_times.py

For each program stored from the chip records (tests/data/chip/hlo/, the
optimized HLO of the train step or forward pass shardviz compiled for
v5e:1x1), the seconds to read its operations and time them (the best of 3);
then, for two records, a whole analysis beside the time its ``op_times``
took on the report (what a user pays once per report), first in an empty
compile cache, then again with the compile read back from it, in the same
process (as a notebook cell run twice: the program's operations, read once,
are kept). A new process reading a compile back reads the operations again:
about the time of the first row of the same program in the table above.
"""

from __future__ import annotations

import json
import lzma
import os
import pathlib
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "records" / "chip"))
os.environ["SHARDVIZ_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-op-times-")

from shardviz.target.chips import HARDWARE  # noqa: E402
from shardviz.target.op_time import op_time_model, timed_ops  # noqa: E402
from shardviz.trace.program_ops import program_ops  # noqa: E402


def best_of(fn, n=3):
    """The best of ``n`` runs, each with the reader's caches emptied first
    (as a new process has them)."""
    from shardviz.trace import program_ops as reader

    times = []
    for _ in range(n):
        reader._bytes.cache_clear()
        reader._elements.cache_clear()
        reader._read.cache_clear()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    model, chip = op_time_model("v5e"), HARDWARE["v5e"]
    print(f"{'program':24} {'MB':>6} {'operations':>10} {'read + time s':>13}")
    for path in sorted((ROOT / "tests" / "data" / "chip" / "hlo").glob("*.hlo.xz")):
        text = lzma.open(path, "rt", encoding="utf-8").read()
        ops = program_ops(text)
        seconds = best_of(lambda text=text: timed_ops(program_ops(text), model, chip))
        print(f"{path.name.removesuffix('.hlo.xz'):24} {len(text) / 1e6:6.1f} {len(ops):10,} "
              f"{seconds:13.2f}")
    import compare

    records = {json.loads(x)["case"]: json.loads(x) for x in
               (ROOT / "tests" / "data" / "chip" / "v5e-1x1.jsonl").read_text().splitlines()
               if x.strip()}
    print(f"\n{'analysis':24} {'cache':>6} {'analyse s':>9} {'op_times s':>10} {'share':>6}")
    for case in ("dict_model_fit_b4", "encoder_predict_b64"):
        for cache in ("empty", "filled"):  # a first analysis compiles; a second reads it back
            t = time.perf_counter()
            report = compare.shardviz_answer(records[case])
            analysis = time.perf_counter() - t
            t = time.perf_counter()
            report.op_times  # noqa: B018  (computed once per report, then kept)
            extra = time.perf_counter() - t
            print(f"{case:24} {cache:>6} {analysis:9.1f} {extra:10.2f} "
                  f"{extra / analysis:6.1%}", flush=True)


if __name__ == "__main__":
    main()
