"""One process of ``shardviz verify``: a host of a local multi-process JAX cluster.

Run by :mod:`shardviz.multihost` as ``python -m shardviz.multihost_worker SPEC.json ID``,
never by hand. It simulates its share of the devices on the CPU, joins the
cluster on 127.0.0.1 with gloo collectives, executes the plan's exported
multi-host code exactly as ``Plan.to_python(processes=N)`` wrote it, builds
the model, runs a jitted forward pass on its share of the batch, and writes
what its devices hold (every variable's and output's addressable shards, by
mesh position) as JSON. Process 0 also writes the gathered global output.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def _ranges(index, shape) -> list[list[int]]:
    """A shard's index (a tuple of slices) as ``[[start, stop], ...]``."""
    out = []
    for s, n in zip(index, shape):
        out.append([int(s.start or 0), int(s.stop if s.stop is not None else n)])
    return out


def main(spec_path: str, process_id: int) -> int:
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    os.environ["KERAS_BACKEND"] = "jax"
    os.environ["KERAS_DISTRIBUTION_JOB_ADDRESSES"] = f"127.0.0.1:{spec['port']}"
    os.environ["KERAS_DISTRIBUTION_NUM_PROCESSES"] = str(spec["processes"])
    os.environ["KERAS_DISTRIBUTION_PROCESS_ID"] = str(process_id)
    for entry in reversed(spec.get("sys_path", [])):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    out_path = os.path.join(spec["dir"], f"worker{process_id}.json")
    result: dict = {"process": process_id}
    try:
        import jax

        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", int(spec["devices_per_process"]))
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        import numpy as np

        # The same seed as the single-process reference: the same weights.
        from shardviz._adapters.keras import set_random_seed

        set_random_seed(int(spec["seed"]))
        namespace: dict = {}
        stage = "the exported plan code"
        exec(compile(spec["code"], "<shardviz exported plan>", "exec"), namespace)  # noqa: S102
        distribution = namespace["distribution"]
        stage = "the builder"
        from shardviz.cli import load_builder

        builder = load_builder(spec["builder"])
        with distribution.scope():
            model = builder()
        stage = "the forward pass"
        rng = np.random.default_rng(int(spec["seed"]))
        inputs = []
        for shape, dtype in spec["inputs"]:
            if np.issubdtype(np.dtype(dtype), np.integer):
                inputs.append(np.zeros(shape, dtype))
            else:
                inputs.append(rng.standard_normal(shape).astype(dtype))
        placed = [namespace["global_batch"](namespace["local_batch"](x), x.shape[0])
                  for x in inputs]
        positions = {d.id: p for p, d in enumerate(namespace["mesh"].backend_mesh.devices.flat)}
        tv = [v.value for v in model.trainable_variables]
        ntv = [v.value for v in model.non_trainable_variables]

        from shardviz.inputs import call_args

        batch = placed[0] if len(placed) == 1 else placed

        def forward(tv, ntv, x):
            return model.stateless_call(tv, ntv, *call_args(model, x))[0]

        outputs = jax.jit(forward)(tv, ntv, batch)
        leaves = jax.tree_util.tree_leaves(outputs)
        result["variables"] = {
            v.path: [[positions[s.device.id], _ranges(s.index, v.shape)]
                     for s in v.value.addressable_shards]
            for v in model.variables}
        result["outputs"] = [
            [[positions[s.device.id], _ranges(s.index, leaf.shape)]
             for s in leaf.addressable_shards] for leaf in leaves]
        result["local_devices"] = sorted(positions[d.id] for d in jax.local_devices())
        stage = "gathering the output"
        gathered = [np.asarray(g) for g in jax.tree_util.tree_leaves(namespace["gather"](outputs))]
        if process_id == 0:
            np.savez(os.path.join(spec["dir"], "output.npz"), *gathered)
        result["ok"] = True
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent as data
        result["ok"] = False
        result["stage"] = locals().get("stage", "start-up")
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc()[-4000:]
    with open(out_path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(out_path + ".tmp", out_path)
    sys.stdout.flush()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
