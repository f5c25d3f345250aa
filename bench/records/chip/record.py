"""Record what one accelerator does with Keras ``model.fit`` / ``model.predict``.

Needs only jax, keras, numpy (and bench/records/chip/models.py beside this file).
Writes one JSON object per case to --out, flushed as soon as the case ends.

    KERAS_BACKEND=jax python bench/records/chip/record.py --out records.jsonl
    KERAS_BACKEND=jax python bench/records/chip/record.py --cases decoder_lora --out lora.jsonl
    JAX_PLATFORMS=cpu python bench/records/chip/record.py --small --out /tmp/x.jsonl

See bench/records/chip/README.md for the fields.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib.metadata
import json
import os
import platform
import re
import sys
import time
import traceback

os.environ.setdefault("KERAS_BACKEND", "jax")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402

CACHE_DIR = os.environ.get("RECORD_JAX_CACHE", "/tmp/jaxcache")
jax.config.update("jax_compilation_cache_dir", CACHE_DIR)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)

import keras  # noqa: E402
import models  # noqa: E402
import numpy as np  # noqa: E402

FIRST_STEPS = 2   # first call: compile + warm-up
TIMED_STEPS = 12  # second call: timed, divided by this

# (case, builder, kind, batch); seq and the rest come from builder_kwargs.
CASES = (
    [("dict_model_fit_b32", "dict_model", "fit", 32), ("dict_model_fit_b4", "dict_model", "fit", 4)]
    + [(f"encoder_predict_b{b}", "encoder", "predict", b) for b in (64, 256)]
    + [(f"decoder_fit_b{b}", "decoder", "fit", b) for b in (4, 6, 7, 8, 12)]
    + [(f"decoder_lora_fit_b{b}", "decoder_lora", "fit", b) for b in (4, 8, 9, 10, 12)]
    + [(f"hub_gpt2_fit_b{b}", "hub_gpt2", "fit", b) for b in (8, 30, 32, 33, 34)]
    + [(f"hub_gpt2_default_fit_b{b}", "hub_gpt2_default", "fit", b) for b in (20, 21)]
)
SMALL_BATCH = {"dict_model": (4, 2), "encoder": (2, 4), "decoder": (2, 4, 5, 6, 8),
               "decoder_lora": (2, 4, 6, 8, 10), "hub_gpt2": (2, 4, 6, 8, 10),
               "hub_gpt2_default": (2, 4)}


def case_list(small):
    if not small:
        return [(c, b, k, n, {}) for c, b, k, n in CASES]
    out, seen = [], {}
    for _, builder, kind, _ in CASES:
        i = seen.get(builder, 0)
        seen[builder] = i + 1
        batch = SMALL_BATCH[builder][i]
        name = f"{builder}_{kind}_b{batch}"
        out.append((name, builder, kind, batch, dict(models.TINY[builder])))
    return out


# --------------------------------------------------------------------------
# environment


def _version(*names):
    for n in names:
        try:
            return f"{n}=={importlib.metadata.version(n)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def environment():
    dev = jax.devices()[0]
    try:
        import jaxlib
        jaxlib_version = jaxlib.__version__
    except Exception:  # noqa: BLE001
        jaxlib_version = None
    try:
        platform_version = dev.client.platform_version
    except Exception:  # noqa: BLE001
        platform_version = None
    return {
        "chip": dev.device_kind,
        "platform": dev.platform,
        "device_count": jax.device_count(),
        "platform_version": platform_version,
        "versions": {
            "jax": jax.__version__, "jaxlib": jaxlib_version,
            "keras": keras.__version__, "numpy": np.__version__,
            "libtpu": _version("libtpu", "libtpu-nightly"),
            "python": platform.python_version(),
        },
    }


def memory_stats():
    try:
        s = jax.devices()[0].memory_stats()
    except Exception:  # noqa: BLE001
        return None
    if not s:
        return None
    keep = ("bytes_limit", "bytes_in_use", "peak_bytes_in_use",
            "largest_alloc_size", "bytes_reservable_limit")
    return {k: int(s[k]) for k in keep if k in s}


# --------------------------------------------------------------------------
# jax monitoring: backend compile time and persistent-cache hits


class Events:
    def __init__(self):
        self.compile_s = 0.0
        self.compiles = 0
        self.cache_hits = 0
        self.cache_misses = 0
        jax.monitoring.register_event_listener(self._event)
        jax.monitoring.register_event_duration_secs_listener(self._duration)

    def _event(self, name, **kw):
        if name == "/jax/compilation_cache/cache_hits":
            self.cache_hits += 1
        elif name == "/jax/compilation_cache/cache_misses":
            self.cache_misses += 1

    def _duration(self, name, secs, **kw):
        if name == "/jax/core/compile/backend_compile_duration":
            self.compile_s += secs
            self.compiles += 1

    def snap(self):
        return (self.compile_s, self.compiles, self.cache_hits, self.cache_misses)

    def since(self, snap):
        now = self.snap()
        return {"backend_compile_seconds": round(now[0] - snap[0], 3),
                "backend_compiles": now[1] - snap[1],
                "persistent_cache_hits": now[2] - snap[2],
                "persistent_cache_misses": now[3] - snap[3]}


# --------------------------------------------------------------------------
# the program Keras runs


def find_jitted(fn, depth=0, seen=None):
    """The jitted step (an object with ``.lower``) held in fn's closure."""
    seen = seen if seen is not None else set()
    if id(fn) in seen or depth > 6:
        return None
    seen.add(id(fn))
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            obj = cell.cell_contents
        except ValueError:
            continue
        if callable(obj) and hasattr(obj, "lower") and hasattr(obj, "trace"):
            return obj
        if callable(obj) and getattr(obj, "__closure__", None):
            found = find_jitted(obj, depth + 1, seen)
            if found is not None:
                return found
    return None


def capture_data(model, kind):
    """Wrap model.train_function / predict_function so the batch the jitted
    step receives is kept (the same pytree, dtypes and placement fit uses)."""
    box = {}
    attr = "train_function" if kind == "fit" else "predict_function"
    orig = getattr(model, attr)

    def wrapped(state, iterator):
        data = next(iterator)
        box["data"] = data
        return orig(state, iter([data]))

    setattr(model, attr, wrapped)
    return box, orig


def state_for(model, kind):
    tv = [v.value for v in model.trainable_variables]
    ntv = [v.value for v in model.non_trainable_variables]
    if kind == "predict":
        return (tv, ntv)
    return (tv, ntv, [v.value for v in model.optimizer.variables],
            [v.value for v in model.metrics_variables])


def analyse(jitted, state, data):
    out = {}
    t0 = time.perf_counter()
    lowered = jitted.lower(state, data)
    out["aot_lower_seconds"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    compiled = lowered.compile()
    out["aot_compile_seconds"] = round(time.perf_counter() - t0, 3)
    m = compiled.memory_analysis()
    if m is not None:
        out["memory"] = {
            "argument_bytes": int(m.argument_size_in_bytes),
            "output_bytes": int(m.output_size_in_bytes),
            "temp_bytes": int(m.temp_size_in_bytes),
            "alias_bytes": int(m.alias_size_in_bytes),
            "generated_code_bytes": int(m.generated_code_size_in_bytes),
        }
        for a in ("host_argument_size_in_bytes", "host_output_size_in_bytes",
                  "host_temp_size_in_bytes", "peak_memory_in_bytes"):
            v = getattr(m, a, None)
            if v is not None:
                out["memory"][a.replace("_size_in_bytes", "_bytes")
                              .replace("_in_bytes", "_bytes")] = int(v)
        mem = out["memory"]
        mem["total_bytes"] = (mem["argument_bytes"] + mem["output_bytes"]
                              + mem["temp_bytes"] - mem["alias_bytes"]
                              + mem["generated_code_bytes"])
    try:
        cost = compiled.cost_analysis()
        if isinstance(cost, (list, tuple)):
            cost = cost[0] if cost else None
        if cost:
            out["cost"] = {k: float(cost[k]) for k in
                           ("flops", "bytes accessed", "transcendentals")
                           if k in cost}
    except Exception as e:  # noqa: BLE001
        out["cost_error"] = repr(e)[:200]
    return out


# --------------------------------------------------------------------------
# errors


_UNIT = {"B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _bytes(num, unit):
    return int(round(float(num) * _UNIT[unit.upper()]))


def parse_oom(text):
    """Figures from an XLA:TPU RESOURCE_EXHAUSTED message (1G = 2**30)."""
    out = {}
    m = re.search(r"\(([\d.]+)([KMGT]?)\)\s*exceeds available HBM\s*\(([\d.]+)([KMGT]?)\)",
                  text)
    if m:
        out["required_bytes"] = _bytes(m.group(1), m.group(2) or "B")
        out["available_bytes"] = _bytes(m.group(3), m.group(4) or "B")
    m = re.search(r"Used ([\d.]+)([KMGT]?) of ([\d.]+)([KMGT]?) hbm", text)
    if m:
        out.setdefault("required_bytes", _bytes(m.group(1), m.group(2) or "B"))
        out.setdefault("available_bytes", _bytes(m.group(3), m.group(4) or "B"))
    m = re.search(r"Exceeded hbm capacity by ([\d.]+)([KMGT]?)", text)
    if m:
        out["exceeded_by_bytes"] = _bytes(m.group(1), m.group(2) or "B")
    m = re.search(r"Total hbm usage >= ([\d.]+)([KMGT]?):(.*?)(\n\s*\n|$)", text, re.S)
    if m:
        out["hbm_usage_total_bytes"] = _bytes(m.group(1), m.group(2) or "B")
        parts = {}
        for line in m.group(3).splitlines():
            p = re.match(r"\s*([a-z ]+?)\s+([\d.]+)([KMGT]?)B?\s*$", line)
            if p:
                parts[p.group(1).strip().replace(" ", "_")] = _bytes(
                    p.group(2), p.group(3) or "B")
        if parts:
            out["hbm_usage"] = parts
    return out


# --------------------------------------------------------------------------
# one case


def live_arrays():
    """Count and bytes of the jax arrays still alive in this process."""
    arrs = [a for a in jax.live_arrays() if not a.is_deleted()]
    return {"count": len(arrs), "bytes": int(sum(a.nbytes for a in arrs))}


def run_case(name, builder, kind, batch, kwargs, env, events):
    rec = {"case": name, "builder": builder, "builder_kwargs": kwargs,
           "kind": kind, "batch": batch}
    rec["date"] = datetime.datetime.now(datetime.UTC).isoformat(
        timespec="seconds")
    rec.update(env)
    rec["memory_stats_before"] = memory_stats()
    t_case = time.perf_counter()
    _measure(rec, builder, kind, batch, kwargs, events)
    # Everything the case made (model, jitted step, state, data, a traceback)
    # was local to _measure, so it can be freed now.
    keras.backend.clear_session()
    gc.collect()
    rec["case_seconds"] = round(time.perf_counter() - t_case, 3)
    rec["memory_stats"] = memory_stats()
    rec["live_arrays_after"] = live_arrays()
    return rec


def _measure(rec, builder, kind, batch, kwargs, events):
    model = None
    try:
        t0 = time.perf_counter()
        model = models.BUILDERS[builder](**kwargs)
        rec["build_seconds"] = round(time.perf_counter() - t0, 3)
        rec["seq"] = int(model.inputs[0].shape[1] or kwargs.get("seq", 1024))
        rec["params"] = int(model.count_params())
        rec["trainable_params"] = int(sum(int(np.prod(v.shape))
                                          for v in model.trainable_variables))
        rec["dtype_policy"] = model.dtype_policy.name
        x1, y1 = models.data_for(builder, FIRST_STEPS * batch, kwargs, seed=1)
        x2, y2 = models.data_for(builder, TIMED_STEPS * batch, kwargs, seed=2)
        if kind == "fit":
            model.make_train_function()
        else:
            model.make_predict_function()
        jitted = find_jitted(model.train_function if kind == "fit"
                             else model.predict_function)
        box, orig = capture_data(model, kind)

        def call(x, y):
            if kind == "fit":
                h = model.fit(x, y, batch_size=batch, epochs=1, verbose=0,
                              shuffle=False)
                return float(h.history["loss"][-1])
            out = model.predict(x, batch_size=batch, verbose=0)
            return float(np.asarray(out, dtype=np.float32).ravel()[0])

        snap = events.snap()
        t0 = time.perf_counter()
        try:
            call(x1, y1)
        finally:
            rec["first_call_seconds"] = round(time.perf_counter() - t0, 3)
            rec["first_call_events"] = events.since(snap)
        t0 = time.perf_counter()
        val = call(x2, y2)
        dt = time.perf_counter() - t0
        rec["ran"] = True
        rec["step_seconds"] = round(dt / TIMED_STEPS, 5)
        rec["timing"] = (f"wall clock of a second {kind}() call of {TIMED_STEPS} steps "
                         f"(batch_size={batch}, verbose=0) divided by {TIMED_STEPS}; "
                         f"a first call of {FIRST_STEPS} steps compiled and warmed up")
        rec["last_value"] = val
        rec["memory_stats_after_run"] = memory_stats()
        if jitted is None:
            rec["memory_error"] = "no jitted step found in the closure"
        else:
            state = state_for(model, kind)
            snap = events.snap()
            try:
                rec.update(analyse(jitted, state, box["data"]))
            except Exception as e:  # noqa: BLE001
                rec["memory_error"] = str(e)[:600]
            rec["aot_events"] = events.since(snap)
            rec["aot_same_executable"] = rec["aot_events"]["backend_compiles"] == 0
    except Exception as e:  # noqa: BLE001
        text = f"{type(e).__name__}: {e}"
        rec["ran"] = False
        rec["error"] = text[:600]
        rec.update(parse_oom(text))
        if "RESOURCE_EXHAUSTED" not in text:
            rec["traceback"] = traceback.format_exc()[-1500:]
        del e


def summary(rec):
    mem = rec.get("memory") or {}
    gib = lambda b: f"{b / 2**30:.2f}G" if b is not None else "-"  # noqa: E731
    if rec.get("ran"):
        return (f"{rec['case']:<24} ran  step {rec['step_seconds']:.4f}s "
                f"arg {gib(mem.get('argument_bytes'))} out {gib(mem.get('output_bytes'))} "
                f"temp {gib(mem.get('temp_bytes'))} alias {gib(mem.get('alias_bytes'))} "
                f"first {rec.get('first_call_seconds')}s case {rec['case_seconds']}s")
    return (f"{rec['case']:<24} REFUSED required {gib(rec.get('required_bytes'))} "
            f"case {rec['case_seconds']}s :: {rec.get('error', '')[:160]!r}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--cases", default="",
                   help="comma list of case names or builder names (default: all)")
    p.add_argument("--small", action="store_true", help="tiny configs (CPU smoke test)")
    a = p.parse_args(argv)
    cases = case_list(a.small)
    if a.cases:
        want = [w.strip() for w in a.cases.split(",") if w.strip()]
        cases = [c for c in cases if c[0] in want or c[1] in want]
    env = environment()
    events = Events()
    print(f"# {env['chip']} x{env['device_count']} {env['versions']} "
          f"{len(cases)} cases", flush=True)
    t_all = time.perf_counter()
    with open(a.out, "a") as f:
        for name, builder, kind, batch, kwargs in cases:
            rec = run_case(name, builder, kind, batch, kwargs, env, events)
            f.write(json.dumps(rec, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
            print(summary(rec), f"[{time.perf_counter() - t_all:.0f}s]", flush=True)


if __name__ == "__main__":
    main()
