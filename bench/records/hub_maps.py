"""keras-hub backbones: the layout map each ships (where it ships one)
against shardviz.layout_map_for's, each compiled for a forward pass.

Run:
  .venv/bin/python bench/records/hub_maps.py                     # reduced sizes, 8 simulated CPUs
  .venv/bin/python bench/records/hub_maps.py --size preset --jobs 2  # presets' sizes, v5e:2x4, v5e:4x4
  .venv/bin/python bench/records/hub_maps.py --classes LlamaBackbone,GemmaBackbone

``--size reduced`` builds each backbone at a reduced size that keeps its
structure (shardviz.hub) and compiles on 8 simulated CPU
devices (a batch=2 x model=4 mesh); it also audits the shipped map.
``--size preset`` builds each at its smallest published preset's
configuration (no weights, nothing allocated), checks the parameter count
against keras-hub's published one, and compiles for TPU targets with the
TPU compiler (libtpu; no chip is needed), on batch=2 x model=4 for v5e:2x4
and batch=4 x model=4 for v5e:4x4.

For each backbone and mesh it prints the shipped map's memory per device and
collective bytes per device (or why it does not build), shardviz's chosen
candidate with the same figures, and the audit's findings. The figures come
from compiled programs: the model's own call under each layout, as Keras runs
it under ModelParallel. The table ends with the date and versions it was made
with; docs/KERAS_HUB.md holds its output.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

REDUCED = {"meshes": [(None, {"batch": 2, "model": 4})], "batch": 8, "seq": 32}
PRESET = {"meshes": [("v5e:2x4", {"batch": 2, "model": 4}),
                     ("v5e:4x4", {"batch": 4, "model": 4})], "batch": 16, "seq": 512}


def kib(value) -> str:
    return f"{value / 2**10:,.1f}"


def mib(value) -> str:
    return f"{value / 2**20:,.1f}"


def rows(name: str, size: str, settings: dict, audit: bool):
    import shardviz
    from shardviz import hub as hb
    from shardviz.planner.layout_maps import choose_map

    entry = hb.entry(name)
    overrides = {"dtype": "bfloat16"} if size == "preset" else {}
    scan = hb.scan(name, size, settings["batch"], settings["seq"], **overrides)
    # The published count covers the whole backbone, where the map covers one part.
    counted = shardviz.scan(hb.builder(name, size, whole=True, **overrides)) \
        if entry.part and size == "preset" else scan
    trainable = sum(math.prod(v.shape) for v in counted.variables if v.trainable)
    total = sum(math.prod(v.shape) for v in counted.variables)
    checked = "" if size == "reduced" else entry.count_check(trainable, total)
    if checked and entry.part:
        checked += (f" (the whole backbone; the map is its {entry.part}'s: "
                    f"{sum(math.prod(v.shape) for v in scan.variables):,})")
    unit = kib if size == "reduced" else mib
    for target, mesh in settings["meshes"]:
        given = hb.inputs(name, scan.model, settings["batch"], settings["seq"], size)
        where = f"{target or '8 CPUs'}: {mesh['batch']} × {mesh['model']}"
        try:
            choice = choose_map(scan, mesh, inputs=given, target=target, skip_dominated=True)
        except shardviz.ShardvizError as e:  # a mesh no candidate compiles on is a row
            why = e.message.split("for this model: ")[-1]
            verdict = "no map fits" if e.message.startswith("No strategy of the planner fits") \
                else "no map compiles"
            yield (f"| {name} | {entry.preset or entry.note} | {where} | | | "
                   f"{verdict}: {why[:320]} | | | | {checked} |")
            continue
        shipped, ours = choice.shipped, choice.chosen
        ships = callable(getattr(type(scan.model), "get_layout_map", None))
        if not ships:
            shipped_text = "-", "-"
        elif shipped is None or not shipped.builds:
            shipped_text = "does not build", "-"
        else:
            shipped_text = unit(shipped.bytes_per_device), unit(shipped.collective_bytes)
        findings = "-"
        if ships and audit:
            # At the presets' sizes the audit compiles nothing (no wrong-dimension search).
            compiled = dict(inputs=given) if size == "reduced" else {}
            try:
                a = shardviz.audit(scan, type(scan.model), mesh=mesh, target=target,
                                   **compiled)
            except shardviz.ShardvizError as e:
                findings = f"does not build: {e.message[:100]}"
            else:
                findings = ", ".join(f"{k} {v}" for k, v in
                                     a.findings.kind.value_counts().items()) or "none"
        fits = "" if ours.fits is None else (" (fits)" if ours.fits else " (does not fit)")
        yield (f"| {name} | {entry.preset or entry.note} | {where} | "
               f"{shipped_text[0]} | {shipped_text[1]} | "
               f"{choice.label} | {unit(ours.bytes_per_device)}{fits} | "
               f"{unit(ours.collective_bytes)} | {findings} | {checked} |")


def table_rows(name: str, size: str, settings: dict, audit: bool) -> list[str]:
    t = time.perf_counter()
    try:
        out = list(rows(name, size, settings, audit=audit))
    except Exception as e:  # noqa: BLE001  one backbone's failure is a row
        why = str(e).splitlines()[0].split("for this model: ")[-1]
        out = [f"| {name} | no map compiles: {why[:320]} | | | | | | | | |"]
    print(f"{name}: {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    return out


def in_parallel(names: list[str], a: argparse.Namespace) -> list[str]:
    """The rows of ``names`` from ``a.jobs`` processes, each given every
    ``jobs``-th backbone, in the order of ``names``."""
    import subprocess

    procs = []
    for i in range(a.jobs):
        share = names[i::a.jobs]
        if not share:
            continue
        cmd = [sys.executable, __file__, "--size", a.size, "--classes", ",".join(share),
               "--rows-only"] + (["--no-audit"] if a.no_audit else [])
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
    lines = [line for p in procs for line in p.communicate()[0].splitlines()
             if line.startswith("| ")]
    return sorted(lines, key=lambda line: names.index(line.split(" | ")[0][2:]))


def main() -> None:
    import importlib.metadata as md

    import shardviz

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=["reduced", "preset"], default="reduced")
    p.add_argument("--classes", default="")
    p.add_argument("--no-audit", action="store_true", help="skip the audit of shipped maps")
    p.add_argument("--jobs", type=int, default=1, help="processes to share the backbones")
    p.add_argument("--rows-only", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    from shardviz import hub as hb

    shardviz.simulate_devices(8)
    settings = REDUCED if a.size == "reduced" else PRESET
    unit = "KiB" if a.size == "reduced" else "MiB"
    names = a.classes.split(",") if a.classes else list(hb.BACKBONES)
    if a.rows_only:
        for name in names:
            for line in table_rows(name, a.size, settings, not a.no_audit):
                print(line, flush=True)
        return
    print(f"Forward pass of batch {settings['batch']} x seq {settings['seq']} (Whisper: its "
          "fixed audio frames and decoder length); figures per device; mesh: batch × model.\n")
    print(f"| backbone | preset | mesh | shipped: {unit} | shipped: collective {unit} | "
          f"shardviz's choice | {unit} | collective {unit} | audit of the shipped map | "
          "configuration |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    start = time.perf_counter()
    if a.jobs > 1:
        print("\n".join(in_parallel(names, a)), flush=True)
    else:
        for name in names:
            for line in table_rows(name, a.size, settings, not a.no_audit):
                print(line, flush=True)
    versions = ", ".join(f"{m} {md.version(m)}" for m in ("keras", "keras-hub", "jax", "jaxlib")
                         if _installed(m))
    tpu = md.version("libtpu") if _installed("libtpu") else "absent"
    print(f"\nMade {datetime.date.today()} by `bench/records/hub_maps.py --size {a.size}` in "
          f"{time.perf_counter() - start:.0f} s with Python {platform.python_version()}, "
          f"{versions}, libtpu {tpu}, shardviz {shardviz.__version__}.")


def _installed(name: str) -> bool:
    import importlib.metadata as md

    try:
        md.version(name)
    except md.PackageNotFoundError:
        return False
    return True


if __name__ == "__main__":
    main()
