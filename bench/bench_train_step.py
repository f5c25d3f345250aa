"""A train-step analysis against a bare compile of Keras's own train step.

Run:  .venv/bin/python bench/bench_train_step.py [--case decoder|small]

For the chip records' decoder (335M parameters, mixed_bfloat16, Adam,
sequence 1024, batch 4) on ``v5e:1x1`` (the real TPU compiler, no chip), each
in a fresh child process:

* ``bare``: the model built for real on the host CPU, compiled and its
  optimizer and metrics built; then ``model.train_step`` jitted as Keras's
  trainer jits it (state donated, ``out_shardings`` the state's layouts) and
  ``.lower(state, data).compile()`` on the target's devices, timed from the
  jit to the compiled program;
* ``shardviz``: ``shardviz.analyze(scan, plan, inputs=, labels=,
  target="v5e:1x1", train_step=True)`` on a scan made beforehand (the
  model built once, as the bare compile's model is), timed whole.

Prints both, their ratio (target <= 1.15x) and shardviz's stages.
``--case small`` runs the same on the records' tiny decoder (seconds).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "chip"))

BATCH = 4


def _setup(case: str):
    import models

    kwargs = models.TINY["decoder"] if case == "small" else {}
    x, y = models.data_for("decoder", BATCH, kwargs)
    return models, kwargs, x, y


def bare_child(case: str) -> None:
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    from shardviz._adapters import keras as keras_adapter
    from shardviz.target.tpu import tpu_topology_devices

    models, kwargs, x, y = _setup(case)
    model = models.decoder(**kwargs)
    model.optimizer.build(model.trainable_variables)
    model._symbolic_build(data_batch=(x, y))
    devices = tpu_topology_devices("v5e", "1x1")  # libtpu's own description of the chip
    mesh = jax.sharding.Mesh(np.array(devices), ("batch",))
    whole = NamedSharding(mesh, PartitionSpec())
    split = NamedSharding(mesh, PartitionSpec("batch"))

    def specs(variables):
        return [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype, sharding=whole) for v in variables]

    state = (specs(model.trainable_variables), specs(model.non_trainable_variables),
             specs(model.optimizer.variables), specs(model.metrics_variables))
    data = (jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=split),
            jax.ShapeDtypeStruct(y.shape, y.dtype, sharding=split))
    shardings = jax.tree_util.tree_map(lambda s: s.sharding, state)
    t = time.perf_counter()
    keras_adapter.keras_train_step(model, shardings).lower(state, data).compile()
    print(json.dumps({"bare": time.perf_counter() - t}))


def shardviz_child(case: str) -> None:
    import jax

    import shardviz

    models, kwargs, x, y = _setup(case)
    scan = shardviz.scan(lambda: models.decoder(**kwargs))
    spec = lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype)  # noqa: E731
    t = time.perf_counter()
    report = shardviz.analyze(scan, shardviz.Plan({"batch": 1}, {}), inputs=spec(x),
                              labels=spec(y), target="v5e:1x1", train_step=True)
    seconds = time.perf_counter() - t
    assert report.trace_error is None, report.trace_error
    print(json.dumps({"shardviz": seconds, "stages": report.trace.seconds}))


def run(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    case = sys.argv[sys.argv.index("--case") + 1] if "--case" in sys.argv else "decoder"
    if "--bare" in sys.argv:
        return bare_child(case)
    if "--shardviz" in sys.argv:
        return shardviz_child(case)
    bare = run(["--bare", "--case", case])["bare"]
    ours = run(["--shardviz", "--case", case])
    stages = ", ".join(f"{k} {v:.1f} s" for k, v in ours["stages"].items())
    what = "tiny decoder" if case == "small" else "records' decoder (335M parameters)"
    print(f"train step of the {what}, batch {BATCH}, on v5e:1x1: shardviz "
          f"{ours['shardviz']:.1f} s, bare lower().compile() of Keras's train step "
          f"{bare:.1f} s, {ours['shardviz'] / bare:.2f}x (target <= 1.15x); "
          f"shardviz's stages: {stages}")


if __name__ == "__main__":
    main()
