"""Print the chip's records beside shardviz's answers for the same programs.

    .venv/bin/python bench/records/chip/compare.py [--cases decoder_fit_b4,...]

For each ``fit`` record in ``tests/data/chip/v5e-1x1.jsonl``, shardviz
analyses the same model and data on ``target="v5e:1x1"`` with
``train_step=True`` (the program ``model.fit`` runs), on this machine's TPU
compiler with no chip, and prints: the chip's verdict and shardviz's, the
chip's compiled bytes (or required bytes when refused) and shardviz's, and
the measured step time beside shardviz's time estimate.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
RECORDS = HERE.parent.parent.parent / "tests" / "data" / "chip" / "v5e-1x1.jsonl"


def records(path=RECORDS):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def shardviz_answer(record):
    """shardviz's report for the record's model, data and target."""
    import jax

    import shardviz

    sys.path.insert(0, str(HERE))
    import models

    builder = getattr(models, record["builder"])
    kwargs = record.get("builder_kwargs") or {}
    x, y = models.data_for(record["builder"], record["batch"], kwargs)
    spec = lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype)  # noqa: E731
    inputs = jax.tree_util.tree_map(spec, x)
    labels = None if y is None else jax.tree_util.tree_map(spec, y)
    return shardviz.analyze(lambda: builder(**kwargs), shardviz.Plan({"batch": 1}, {}),
                            inputs=inputs, labels=labels, target="v5e:1x1",
                            train_step=record["kind"] == "fit")


def chip_bytes(record):
    m = record.get("memory")
    if m:
        return m["argument_bytes"] + m["output_bytes"] + m["temp_bytes"] - m["alias_bytes"]
    return record.get("required_bytes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    args = parser.parse_args()
    wanted = set(filter(None, args.cases.split(",")))
    print(f"{'case':24} {'chip':8} {'shardviz':9} {'chip GiB':>9} {'shardviz GiB':>12} "
          f"{'diff':>7} {'chip peak':>9} {'peak':>6} {'step s':>7} {'est s':>7} "
          f"{'est/step':>8} {'bound':>8} {'analyse s':>9}")
    for r in records():
        if wanted and r["case"] not in wanted:
            continue
        t = time.perf_counter()
        report = shardviz_answer(r)
        seconds = time.perf_counter() - t
        mem = report.memory.iloc[0]
        ours = int(mem["total_bytes"]) if mem["total_bytes"] is not None else None
        theirs = chip_bytes(r)
        diff = f"{(ours - theirs) / theirs:+.2%}" if ours and theirs else "-"
        est = report.estimate
        top = est[est.bound] if len(est) else est
        bound = top["seconds"].iloc[0] if len(top) else None
        part = top["part"].iloc[0] if len(top) else "-"
        step = r.get("step_seconds")
        ratio = f"{bound / step:8.2f}" if bound and step else f"{'-':>8}"
        # The compiler checks the peak (what is live at once) against the chip.
        chip_peak = (r.get("memory") or {}).get("peak_memory_bytes")
        peak = mem["peak_bytes"] if mem["peak_bytes"] == mem["peak_bytes"] else None
        print(f"{r['case']:24} {'ran' if r['ran'] else 'refused':8} "
              f"{'fits' if report.fits else 'no fit':9} "
              f"{(theirs or 0) / 2**30:9.2f} {(ours or 0) / 2**30:12.2f} {diff:>7} "
              f"{(chip_peak or 0) / 2**30:9.2f} {(peak or 0) / 2**30:6.2f} "
              f"{step or 0:7.3f} {bound or 0:7.3f} {ratio} {part:>8} {seconds:9.1f}", flush=True)


if __name__ == "__main__":
    main()
