"""Record how long each operation of the step ``model.fit`` (or
``model.predict``) runs takes on the chip, from the chip's own profile.

For each case (built by ``models.py``, data as ``record.py`` makes it), the
step is compiled and warmed up by a first call, timed by a second (wall clock
over ``TIMED_STEPS`` steps, as ``record.py`` times it), then run once more for
``PROFILED_STEPS`` steps under ``jax.profiler.trace``. The trace's "XLA Ops"
thread of the device has one event per operation executed; they are grouped
by the program ("XLA Modules") they ran in, and the step's program (the one
that took the longest in all) is kept: for every operation its name (the HLO
instruction of the optimized program), the profile's category, its mean
microseconds per step, how often it ran per step, and the profile's own flops
and bytes. Needs only jax, keras and numpy (keras-hub for the hub cases).

    KERAS_BACKEND=jax python3 bench/records/chip/profile_record.py \\
        --cases dict_model_fit_b4,decoder_fit_b7 --out ops.jsonl

One JSON object per case, appended to ``--out`` as soon as the case ends:
the case's fields as ``record.py`` writes them (``step_seconds``,
``memory``, ``cost``, versions, ...) plus ``profile``: ``module`` (the
step's program), ``steps`` (how many ran under the profiler),
``device_step_us`` (the program's mean duration on the device per step),
``ops_us`` (the sum of its operations' mean durations), ``gap_us``
(between programs on the device, per step: the host's share) and ``ops``:
``[name, category, us_per_step, count_per_step, flops, bytes]``, longest
first. The stored records are ``tests/data/chip/v5e-1x1-ops.jsonl.gz``
(``gzip -9`` of the output).
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import record  # noqa: E402  (sets the jax cache and imports keras)

PROFILED_STEPS = 4

# (case, builder, kind, batch): the chip-record cases, and models kept out of
# the calibration to validate it (the ``validation`` flag is set by the reader).
CASES = (
    ("dict_model_fit_b32", "dict_model", "fit", 32),
    ("dict_model_fit_b4", "dict_model", "fit", 4),
    ("encoder_predict_b64", "encoder", "predict", 64),
    ("encoder_predict_b256", "encoder", "predict", 256),
    ("decoder_fit_b4", "decoder", "fit", 4),
    ("decoder_fit_b7", "decoder", "fit", 7),
    ("decoder_lora_fit_b4", "decoder_lora", "fit", 4),
    ("decoder_lora_fit_b9", "decoder_lora", "fit", 9),
    ("hub_gpt2_fit_b8", "hub_gpt2", "fit", 8),
    ("hub_gpt2_fit_b33", "hub_gpt2", "fit", 33),
    ("decoder_remat_fit_b8", "decoder_remat", "fit", 8),
    ("hub_llama_lora_fit_b4", "hub_llama_lora", "fit", 4),
    ("hub_qwen_fit_b4", "hub_qwen", "fit", 4),
)


def _events(path: str) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f).get("traceEvents", [])


def read_trace(path: str) -> dict:
    """The step's program and its operations from a Chrome trace the
    profiler wrote (``*.trace.json.gz``)."""
    events = _events(path)
    names: dict[tuple, str] = {}
    procs: dict[int, str] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
        if e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
    device = [p for p, n in procs.items() if "/device:" in n and "TPU" in n.upper()] or \
        [p for p, n in procs.items() if "/device:" in n]
    if not device:
        return {"error": f"no device process in the trace: {sorted(procs.values())}"}
    pid = device[0]
    kinds = {tid: n for (p, tid), n in names.items() if p == pid}
    ops_tid = [t for t, n in kinds.items() if n == "XLA Ops"]
    mod_tid = [t for t, n in kinds.items() if n == "XLA Modules"]
    mods = sorted((e for e in events if e.get("ph") == "X" and e.get("pid") == pid
                   and e.get("tid") in mod_tid), key=lambda e: e["ts"])
    ops = sorted((e for e in events if e.get("ph") == "X" and e.get("pid") == pid
                  and e.get("tid") in ops_tid), key=lambda e: e["ts"])
    if not mods or not ops:
        return {"error": f"no XLA Modules/XLA Ops events (threads {sorted(kinds.values())})"}
    total: dict[str, float] = {}
    for m in mods:
        key = m["name"].split("(")[0]
        total[key] = total.get(key, 0.0) + m["dur"]
    step = max(total, key=total.get)
    runs = [m for m in mods if m["name"].split("(")[0] == step]
    table: dict[str, list] = {}
    i = 0
    for m in runs:
        start, end = m["ts"], m["ts"] + m["dur"]
        while i < len(ops) and ops[i]["ts"] < start:
            i += 1
        j = i
        while j < len(ops) and ops[j]["ts"] < end:
            o = ops[j]
            a = o.get("args", {})
            row = table.setdefault(o["name"], [o["name"], a.get("hlo_category"), 0.0, 0,
                                               _num(a.get("model_flops")),
                                               _num(a.get("bytes_accessed"))])
            row[2] += float(a.get("device_duration_ps", o["dur"] * 1e6)) / 1e6
            row[3] += 1
            j += 1
        i = j
    n = len(runs)
    rows = []
    for row in table.values():
        row[2] = round(row[2] / n, 3)
        row[3] = round(row[3] / n, 3)
        rows.append(row)
    rows.sort(key=lambda r: -r[2])
    device_us = sum(m["dur"] for m in runs) / n
    span = (runs[-1]["ts"] + runs[-1]["dur"] - runs[0]["ts"]) / n if n > 1 else device_us
    return {"module": step, "steps": n, "device_step_us": round(device_us, 3),
            "ops_us": round(sum(r[2] * 1 for r in rows), 3),
            "span_per_step_us": round(span, 3), "gap_us": round(span - device_us, 3),
            "other_modules": {k: round(v, 1) for k, v in total.items() if k != step},
            "ops": rows}


def _num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def profile_case(name, builder, kind, batch, kwargs, env, events, keep=None) -> dict:
    rec = record.run_case(name, builder, kind, batch, kwargs, env, events)
    if not rec.get("ran"):
        return rec
    # A fresh model and one more call, under the profiler: run_case freed its own.
    import keras

    model = record.models.BUILDERS[builder](**kwargs)
    x, y = record.models.data_for(builder, PROFILED_STEPS * batch, kwargs, seed=3)

    def call():
        if kind == "fit":
            model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False)
        else:
            model.predict(x, batch_size=batch, verbose=0)

    call()  # compile (the persistent cache holds the program) and warm up
    where = tempfile.mkdtemp(prefix=f"profile-{name}-")
    try:
        t0 = time.perf_counter()
        import jax

        with jax.profiler.trace(where):
            call()
        rec["profiled_seconds"] = round(time.perf_counter() - t0, 3)
        found = glob.glob(os.path.join(where, "**", "*.trace.json.gz"), recursive=True)
        rec["profile"] = read_trace(found[0]) if found else {"error": "no trace was written"}
        if keep and found and os.path.getsize(found[0]) < 16 * 2**20:
            shutil.copy(found[0], os.path.join(keep, f"{name}.trace.json.gz"))
    except Exception as e:  # noqa: BLE001
        rec["profile"] = {"error": f"{type(e).__name__}: {e}"[:600]}
    finally:
        shutil.rmtree(where, ignore_errors=True)
        keras.backend.clear_session()
    return rec


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="", help="case or builder names, comma separated")
    parser.add_argument("--small", action="store_true", help="tiny configs (a CPU smoke test)")
    parser.add_argument("--out", required=True, help="JSON lines, appended to")
    parser.add_argument("--keep", default="", help="a folder to copy each trace (under 16 MiB) to")
    args = parser.parse_args(argv)
    cases = [(c, b, k, n, dict(record.models.TINY[b]) if args.small else {})
             for c, b, k, n in CASES]
    if args.small:
        cases = [(c, b, k, min(n, 4), kw) for c, b, k, n, kw in cases]
    if args.cases:
        want = {w.strip() for w in args.cases.split(",") if w.strip()}
        cases = [c for c in cases if c[0] in want or c[1] in want]
    env = record.environment()
    events = record.Events()
    t_all = time.perf_counter()
    with open(args.out, "a", encoding="utf-8") as f:
        for name, builder, kind, batch, kwargs in cases:
            rec = profile_case(name, builder, kind, batch, kwargs, env, events, args.keep)
            f.write(json.dumps(rec, sort_keys=True) + "\n")
            f.flush()
            prof = rec.get("profile") or {}
            print(record.summary(rec), f"device {prof.get('device_step_us')}us "
                  f"ops {len(prof.get('ops', []))} {prof.get('error', '')}"
                  f"[{time.perf_counter() - t_all:.0f}s]", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
