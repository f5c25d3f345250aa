"""Target hardware figures: compiling Llama-shaped models for TPU topologies
with the real TPU compiler (libtpu), on a machine with no TPU.

Run:  .venv/bin/python bench/bench_targets.py

Prints, each measured in a fresh child process (wall time of ``analyze``,
peak RSS of the process):
* an 8B forward pass on v5e:4x4, batch 16 x 2048 (target <= 60 s, <= 4 GB);
* a 70B forward pass on v5e:16x16, 256 chips (target <= 120 s, <= 6 GB);
* an 8B train step on v5p:2x2x4 (target <= 120 s), and its time over the
  trace, lower and compile of that one program (target <= 1.15x);
* shardviz's time over a bare ``jax.jit(...).lower(...).compile()`` of the
  same forward pass on the same devices (target <= 1.2x).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

CASES = {
    "8b-v5e": dict(builder="llama_8b", data=2, model=8, target="v5e:4x4", inputs=(16, 2048)),
    "70b-v5e": dict(builder="llama_70b", data=32, model=8, target="v5e:16x16",
                    inputs=(32, 2048)),
    "8b-train-v5p": dict(builder="llama_8b", data=2, model=8, target="v5p:2x2x4",
                         inputs=(16, 2048), train_step=True),
}


def child(name: str) -> None:
    import shardviz
    from shardviz import examples

    case = CASES[name]
    plan = examples.llama_plan(case["data"], case["model"])
    t = time.perf_counter()
    report = shardviz.analyze(getattr(examples, case["builder"]), plan, inputs=case["inputs"],
                              target=case["target"], train_step=case.get("train_step", False))
    seconds = time.perf_counter() - t
    fit = report.problems_of("does-not-fit")
    memory = report.memory.iloc[0]
    print(json.dumps({
        "seconds": seconds, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "stages": report.trace.seconds if report.trace else {},
        "fits": not fit, "verdict": fit[0].message[:160] if fit else "",
        "total": None if memory["total_bytes"] is None else int(memory["total_bytes"]),
        "collectives": len(report.collectives),
    }))


def overhead_child() -> None:
    """The 8B forward pass: shardviz's analyze against a bare compile of the
    same model's stateless_call on the same topology."""
    import jax
    from jax.experimental import mesh_utils, topologies
    from jax.sharding import NamedSharding, PartitionSpec

    import shardviz
    from shardviz import examples

    plan = examples.llama_plan(2, 8)
    scan = shardviz.scan(examples.llama_8b)
    t = time.perf_counter()
    shardviz.analyze(scan, plan, inputs=(16, 2048), target="v5e:4x4")
    ours = time.perf_counter() - t

    t = time.perf_counter()
    devices = topologies.get_topology_desc(platform="tpu", topology_name="v5e:4x4").devices
    mesh_devices = mesh_utils.create_device_mesh((2, 8), devices, allow_split_physical_axes=True)
    dist = plan.to_keras(devices=list(mesh_devices.flat))
    model = scan.model

    def placed(variables):
        return [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype,
                                     sharding=dist.get_variable_layout(v).backend_layout)
                for v in variables]

    x = jax.ShapeDtypeStruct((16, 2048), "int32", sharding=NamedSharding(
        dist.device_mesh.backend_mesh, PartitionSpec("batch", None)))
    with dist.scope():
        jax.jit(lambda tv, ntv, x: model.stateless_call(tv, ntv, x)[0]).lower(
            placed(model.trainable_variables), placed(model.non_trainable_variables),
            x).compile()
    bare = time.perf_counter() - t
    print(json.dumps({"ours": ours, "bare": bare}))


def run(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    if "--child" in sys.argv:
        return child(sys.argv[sys.argv.index("--child") + 1])
    if "--overhead" in sys.argv:
        return overhead_child()
    targets = {"8b-v5e": (60, 4), "70b-v5e": (120, 6), "8b-train-v5p": (120, None)}
    for name, (limit, gb) in targets.items():
        if "--overhead-only" in sys.argv:
            break
        r = run(["--child", name])
        case = CASES[name]
        what = "train step" if case.get("train_step") else "forward pass"
        verdict = "fits" if r["fits"] else f"does not fit ({r['verdict']})"
        rss_target = f", target <= {gb} GB" if gb else ""
        print(f"{case['builder']} {what} on {case['target']} (mesh {case['data']}x"
              f"{case['model']}, inputs {case['inputs']}): {r['seconds']:.1f} s (target <= "
              f"{limit} s), peak RSS {r['rss'] / 2**30:.2f} GiB{rss_target}; {verdict}; "
              f"{r['collectives']} collectives; stages "
              + ", ".join(f"{k} {v:.1f} s" for k, v in r["stages"].items()))
        if case.get("train_step"):
            program = sum(v for k, v in r["stages"].items() if k.startswith("train_step"))
            print(f"  one compile of the train step: analyze {r['seconds']:.1f} s over its own "
                  f"trace, lower and compile {program:.1f} s = {r['seconds'] / program:.2f}x "
                  "(target <= 1.15x; no forward pass is compiled apart)")
    r = run(["--overhead"])
    print(f"overhead over a bare lower().compile() of the 8B forward pass on v5e:4x4: "
          f"shardviz {r['ours']:.1f} s, bare {r['bare']:.1f} s, {r['ours'] / r['bare']:.2f}x "
          "(target <= 1.2x)")


if __name__ == "__main__":
    main()
