"""Fit the per-operation time model to the chip's profiles, and print how
far its expected step is from the chip's on every record.

    .venv/bin/python bench/records/chip/fit_op_times.py            # print the table
    .venv/bin/python bench/records/chip/fit_op_times.py --write    # and write the fit
    .venv/bin/python bench/records/chip/fit_op_times.py --compile  # compile missing programs

For each case of ``tests/data/chip/v5e-1x1-ops.jsonl.gz`` (the chip's own
profile: every operation's microseconds per step), shardviz's program for
the same model and data, compiled on this machine for ``v5e:1x1``, is read
from ``tests/data/chip/hlo/<case>.hlo.xz`` (``--compile`` makes the missing
ones: the optimized HLO of ``report.hlo_text``). Operations are matched by
their instruction names (the same compiler writes the same program). The
efficiencies of :mod:`shardviz.target.op_time` are fitted, by least squares
on every matched operation's time and every fitted case's step, to the
cases of the models in ``FITTED``; the models in ``HELD_OUT`` are never
used, and each fitted model is also left out in turn and fitted again.
``--write`` stores the fit in ``shardviz/target/data/op_time_v5e.json``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import math
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent
sys.path.insert(0, str(ROOT))
PROFILES = ROOT / "tests" / "data" / "chip" / "v5e-1x1-ops.jsonl.gz"
HLO = ROOT / "tests" / "data" / "chip" / "hlo"
OUT = ROOT / "shardviz" / "target" / "data" / "op_time_v5e.json"

FITTED = ("dict_model", "encoder", "decoder", "decoder_lora", "hub_gpt2", "decoder_remat")
HELD_OUT = ("hub_llama_lora", "hub_qwen")
START = {"matmul_efficiency": 0.6, "matmul_seconds_per_cycle": 5e-10,
         "windowed_matmul_seconds_per_cycle": 5e-10, "matmul_fixed": 1e-6,
         "hbm_share": 0.8, "on_chip_bandwidth": 3e12, "vector_flops": 2e12,
         "transcendental_rate": 5e11, "vector_fixed": 1e-6, "copy_fixed": 1e-6,
         "vector_seconds_per_cycle": 5e-10, "prefetch_exposed": 0.1, "prefetch_fixed": 1e-6,
         "attention_kernel_efficiency": 0.1, "control_fixed": 1e-7}
BOUNDS = {"matmul_efficiency": (0.05, 1.0), "hbm_share": (0.3, 1.0),
          "vector_flops": (2e11, 2e13), "transcendental_rate": (5e10, 5e12)}
"""Physical limits: rates no faster than the chip's units, none absurdly slow."""


def profiles() -> dict[str, dict]:
    with gzip.open(PROFILES, "rt", encoding="utf-8") as f:
        return {r["case"]: r for r in map(json.loads, f) if r.get("profile", {}).get("ops")}


def program(case: str) -> str | None:
    path = HLO / f"{case}.hlo.xz"
    return lzma.open(path, "rt", encoding="utf-8").read() if path.exists() else None


def compile_program(record: dict) -> str:
    sys.path.insert(0, str(HERE))
    import compare

    text = compare.shardviz_answer(record).hlo_text
    HLO.mkdir(parents=True, exist_ok=True)
    with lzma.open(HLO / f"{record['case']}.hlo.xz", "wt", encoding="utf-8",
                   preset=9) as f:
        f.write(text)
    return text


def matched(record: dict, text: str) -> list[tuple]:
    """``(op, measured seconds per step or None)`` for every operation of
    shardviz's program, matched to the profile by name."""
    from shardviz.trace.program_ops import program_ops

    measured = {o[0]: o[2] * 1e-6 for o in record["profile"]["ops"]}
    return [(op, measured.get(op.name)) for op in program_ops(text)]


def expected(ops, parameters, model, hardware) -> float:
    from shardviz.target.op_time import step_seconds, timed_ops

    return step_seconds(timed_ops([o for o, _ in ops], model, hardware,
                                  parameters=parameters), model)[0]


class Arrays:
    """One case's operations as arrays, for a fast fit: the same formulas as
    :func:`shardviz.target.op_time.op_seconds` (``check`` holds them equal)."""

    def __init__(self, ops, hardware):
        import numpy as np

        def col(f, kinds):
            return np.array([f(o) for o, _ in ops if o.kind in kinds], dtype=float)

        self.groups = {}
        for kinds in (("matmul",), ("vector",), ("copy",), ("prefetch",), ("kernel",),
                      ("control",)):
            sel = [(o, s) for o, s in ops if o.kind in kinds]
            self.groups[kinds[0]] = {
                "mxu": col(lambda o: o.mxu_flops, kinds), "flops": col(lambda o: o.flops, kinds),
                "trans": col(lambda o: o.transcendentals, kinds),
                "hbm": col(lambda o: o.hbm_bytes, kinds),
                "chip": col(lambda o: o.bytes - o.hbm_bytes, kinds),
                "cycles": col(lambda o: o.cycles, kinds), "count": col(lambda o: o.count, kinds),
                "windowed": col(lambda o: float(o.windowed), kinds),
                "done": col(lambda o: float(o.opcode.endswith("done")), kinds),
                "plain": col(lambda o: float(o.detail in ("", "AssumeGatherIndicesInBound",
                                                          "ConcatBitcast")), kinds),
                "measured": np.array([s if s is not None else np.nan for _, s in sel]),
            }
        self.peak, self.bw = hardware.peak_flops, hardware.hbm_bandwidth

    def predict(self, p):
        import numpy as np

        out = {}
        for kind, g in self.groups.items():
            memory = g["hbm"] / (self.bw * p["hbm_share"]) + g["chip"] / p["on_chip_bandwidth"]
            cycled = g["cycles"] > 0
            if kind == "matmul":
                per_cycle = np.where(g["windowed"] > 0, p["windowed_matmul_seconds_per_cycle"],
                                     p["matmul_seconds_per_cycle"])
                work = np.where(cycled, g["cycles"] * per_cycle,
                                g["mxu"] / (self.peak * p["matmul_efficiency"]))
                t = np.maximum(work, memory) + p["matmul_fixed"]
            elif kind in ("vector", "copy"):
                work = np.where(cycled, g["cycles"] * p["vector_seconds_per_cycle"],
                                np.maximum(g["flops"] / p["vector_flops"],
                                           g["trans"] / p["transcendental_rate"]))
                t = np.maximum(work, memory) + p[
                    "vector_fixed" if kind == "vector" else "copy_fixed"]
            elif kind == "prefetch":
                t = g["done"] * (p["prefetch_exposed"] * g["hbm"] / self.bw + p["prefetch_fixed"])
            elif kind == "kernel":
                t = np.where(g["flops"] > 0,
                             g["flops"] / (self.peak * p["attention_kernel_efficiency"])
                             + p["matmul_fixed"],
                             np.where(g["plain"] > 0, p["control_fixed"],
                                      np.maximum(g["flops"] / self.peak, (g["hbm"] + g["chip"])
                                                 / self.bw)))
            else:
                t = np.full(len(g["count"]), p["control_fixed"])
            out[kind] = t * g["count"]
        return out


def fit(arrays: dict, names: list[str], records) -> dict[str, float]:
    import numpy as np
    from scipy.optimize import least_squares

    keys = list(START)
    low = [math.log(BOUNDS.get(k, (START[k] / 1e3, START[k] * 1e3))[0]) for k in keys]
    high = [math.log(BOUNDS.get(k, (START[k] / 1e3, START[k] * 1e3))[1]) for k in keys]
    x0 = [min(max(math.log(START[k]), lo + 1e-9), hi - 1e-9)
          for k, lo, hi in zip(keys, low, high)]

    def residuals(x):
        p = dict(zip(keys, np.exp(x)))
        out = []
        for name in names:
            pred = arrays[name].predict(p)
            step = 0.0
            for kind, t in pred.items():
                measured = arrays[name].groups[kind]["measured"]
                have = ~np.isnan(measured)
                out.append((t[have] - measured[have]) * 1e6
                           / np.sqrt(measured[have] * 1e6 + 20.0))
                step += float(t.sum())
            device = records[name]["profile"]["device_step_us"] * 1e-6
            n = sum(len(g["count"]) for g in arrays[name].groups.values())
            out.append(np.array([10.0 * math.sqrt(n) * (step - device) / device]))
        return np.concatenate(out)

    result = least_squares(residuals, x0, bounds=(low, high), x_scale="jac", max_nfev=400)
    return dict(zip(keys, (float(v) for v in np.exp(result.x))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile", action="store_true",
                        help="compile the programs that tests/data/chip/hlo lacks")
    parser.add_argument("--write", action="store_true", help="write the fit")
    args = parser.parse_args()

    import dataclasses

    from shardviz.target.chips import HARDWARE
    from shardviz.target.op_time import op_time_model

    records = profiles()
    cases = {}
    for case, record in records.items():
        text = program(case)
        if text is None and args.compile:
            t = time.perf_counter()
            text = compile_program(record)
            print(f"compiled {case} in {time.perf_counter() - t:.0f} s", flush=True)
        if text is None:
            print(f"{case}: no program (run with --compile)")
            continue
        cases[case] = matched(record, text)
    hardware = HARDWARE["v5e"]
    slow = [r for r in records.values()
            if r["profile"]["device_step_us"] * 1e-6 < 0.5 * r["step_seconds"]]
    host = sorted(r["step_seconds"] for r in slow)[len(slow) // 2] if slow else 0.0
    base = dataclasses.replace(op_time_model("v5e"), host_step_seconds=host)

    def of(models):
        return [c for c in cases if records[c]["builder"] in models]

    fitted = of(FITTED)
    arrays = {c: Arrays(ops, hardware) for c, ops in cases.items()}
    t = time.perf_counter()
    parameters = fit(arrays, fitted, records)
    print(f"fitted to {len(fitted)} cases in {time.perf_counter() - t:.0f} s: "
          + ", ".join(f"{k} {v:.3g}" for k, v in parameters.items()))
    lomo: dict[str, float] = {}
    lomo_ratio: dict[str, float] = {}
    for left in FITTED:
        rest = [c for c in fitted if records[c]["builder"] != left]
        if not of((left,)) or not rest:
            continue
        p = fit(arrays, rest, records)
        for c in of((left,)):
            lomo_ratio[c] = expected(cases[c], p, base, hardware) / records[c]["step_seconds"]
        lomo[left] = max(lomo_ratio[c] for c in of((left,)) if c in lomo_ratio) \
            if abs(max(lomo_ratio[c] for c in of((left,))) - 1) >= abs(
                min(lomo_ratio[c] for c in of((left,))) - 1) else min(
                lomo_ratio[c] for c in of((left,)))
    held = {}
    print(f"\n{'case':24} {'model':16} {'role':9} {'chip s':>8} {'device s':>9} "
          f"{'expected':>9} {'ratio':>6} {'left out':>8} {'matched':>8}")
    for c in cases:
        r = records[c]
        e = expected(cases[c], parameters, base, hardware)
        fast = max(sum(float(t.sum()) for t in arrays[c].predict(parameters).values()), host)
        assert abs(fast - e) <= 1e-6 * e, (c, fast, e)  # the fit's formulas are shardviz's
        ratio = e / r["step_seconds"]
        role = "fitted" if r["builder"] in FITTED else "held out"
        if role == "held out":
            held[c] = ratio
        share = sum(s for _, s in cases[c] if s) / (r["profile"]["device_step_us"] * 1e-6)
        loo = f"{lomo_ratio[c]:8.3f}" if c in lomo_ratio else f"{'':8}"
        print(f"{c:24} {r['builder']:16} {role:9} {r['step_seconds']:8.4f} "
              f"{r['profile']['device_step_us'] * 1e-6:9.4f} {e:9.4f} {ratio:6.3f} {loo} "
              f"{share:8.1%}")
    print(f"\nKeras's host work per step: {host * 1e3:.2f} ms (the median wall-clock step of "
          f"{len(slow)} cases whose device step was under half of it)")
    if args.write:
        some = next(iter(records.values()))
        data = {"hardware": "v5e", "parameters": parameters, "fitted_on": fitted,
                "held_out": {c: round(v, 4) for c, v in held.items()},
                "leave_one_model_out": {m: round(v, 4) for m, v in lomo.items()},
                "host_step_seconds": host, "date": some["date"][:10],
                "versions": {k: some["versions"].get(k) for k in ("jax", "libtpu", "keras")},
                "made_by": "bench/records/chip/fit_op_times.py --write"}
        OUT.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
