"""One process of ``shardviz verify``: a host of a local multi-process JAX cluster.

Run by :mod:`shardviz.multihost` as ``python -m shardviz.multihost.worker SPEC.json ID``,
never by hand. It simulates its share of the devices on the CPU, joins the
cluster on 127.0.0.1 with gloo collectives, executes the plan's exported
multi-host code exactly as ``Plan.to_python(processes=N)`` wrote it, builds
the model, runs a jitted forward pass on its share of the batch, and writes
what its devices hold (every variable's and output's addressable shards, by
mesh position) as JSON. Process 0 also writes the gathered global output.
It notes each stage it enters in ``workerID.stage``, so that a time-out can
say what it was doing, and it ends, with every process it started, when its
parent is gone.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback

DIFFERENT_VALUES = "is not the same on each process"
"""JAX's words when a value put on the global mesh differs between processes."""


def _ranges(index, shape) -> list[list[int]]:
    """A shard's index (a tuple of slices) as ``[[start, stop], ...]``."""
    out = []
    for s, n in zip(index, shape):
        out.append([int(s.start or 0), int(s.stop if s.stop is not None else n)])
    return out


def _end() -> None:
    """End this worker and every process it started (its process group,
    which it leads: the parent starts it in a session of its own)."""
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def die_with_parent(parent: int) -> None:
    """End this worker, and what it started, when ``parent`` is gone.

    Two guards: the kernel sends SIGTERM when the parent dies (Linux; it
    fires when the parent's thread that started us exits), and a thread
    checks every 0.2 s that the parent is still ours.
    """
    signal.signal(signal.SIGTERM, lambda *_: _end())
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            pr_set_pdeathsig = 1
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        _end()

    threading.Thread(target=watch, name="shardviz-parent-watch", daemon=True).start()


def main(spec_path: str, process_id: int) -> int:
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    die_with_parent(int(spec["parent"]))
    os.environ["KERAS_BACKEND"] = "jax"
    os.environ["KERAS_DISTRIBUTION_JOB_ADDRESSES"] = f"127.0.0.1:{spec['port']}"
    os.environ["KERAS_DISTRIBUTION_NUM_PROCESSES"] = str(spec["processes"])
    os.environ["KERAS_DISTRIBUTION_PROCESS_ID"] = str(process_id)
    for entry in reversed(spec.get("sys_path", [])):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    out_path = os.path.join(spec["dir"], f"worker{process_id}.json")
    stage_path = os.path.join(spec["dir"], f"worker{process_id}.stage")
    result: dict = {"process": process_id}
    stage = "starting up"

    def enter(what: str) -> None:
        nonlocal stage
        stage = what
        with open(stage_path, "w", encoding="utf-8") as f:
            f.write(what)

    try:
        enter("starting up")
        import jax

        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", int(spec["devices_per_process"]))
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        import numpy as np

        # The same seed as the single-process reference: the same weights.
        from shardviz._adapters.keras import set_random_seed

        set_random_seed(int(spec["seed"]))
        namespace: dict = {}
        enter("running the exported plan code")
        exec(compile(spec["code"], "<shardviz exported plan>", "exec"), namespace)  # noqa: S102
        distribution = namespace["distribution"]
        enter("importing the builder")
        from shardviz.hub.presets import model_of

        builder = model_of(spec["builder"])
        enter("building the model")
        from shardviz._adapters.keras import fresh_names

        with distribution.scope(), fresh_names():
            model = builder()
        enter("running the forward pass")
        from shardviz.multihost.train_check import arrays

        inputs = arrays(spec["inputs"], int(spec["seed"]))
        placed = [namespace["global_batch"](namespace["local_batch"](x), x.shape[0])
                  for x in inputs]
        positions = {d.id: p for p, d in enumerate(namespace["mesh"].backend_mesh.devices.flat)}
        tv = [v.value for v in model.trainable_variables]
        ntv = [v.value for v in model.non_trainable_variables]

        from shardviz.model.inputs import call_args

        names = spec.get("input_names")
        batch = (dict(zip(names, placed)) if names else
                 placed[0] if len(placed) == 1 else placed)

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
        enter("gathering the output")
        gathered = [np.asarray(g) for g in jax.tree_util.tree_leaves(namespace["gather"](outputs))]
        if process_id == 0:
            np.savez(os.path.join(spec["dir"], "output.npz"), *gathered)
        if spec.get("labels"):
            enter("running a train step")
            _train_step(model, namespace, inputs, names, spec, process_id, result)
        result["ok"] = True
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent as data
        result["ok"] = False
        result["stage"] = stage
        message = str(e)
        if isinstance(e, AssertionError) and DIFFERENT_VALUES in message:
            result["different_values"] = True
            message = message.split(". Expected:")[0]
        result["error"] = f"{type(e).__name__}: {message[:2000]}"
        result["traceback"] = traceback.format_exc()[-4000:]
        print(result["traceback"], flush=True)
    with open(out_path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(out_path + ".tmp", out_path)
    sys.stdout.flush()
    return 0 if result["ok"] else 1


def _train_step(model, namespace: dict, inputs: list, names: list | None, spec: dict,
                process_id: int, result: dict) -> None:
    """One ``model.fit`` step on this host's rows; process 0 keeps the loss
    and the gathered trainable variables."""
    import numpy as np

    from shardviz.multihost.train_check import arrays, one_step, ready_to_train

    (labels,) = arrays([spec["labels"]], int(spec["seed"]) + 1)
    ready_to_train(model)
    local = [namespace["local_batch"](x) for x in inputs]
    x = dict(zip(names, local)) if names else local[0] if len(local) == 1 else local
    y = namespace["local_batch"](labels)
    loss = one_step(model, x, y, len(y))
    values = namespace["gather"]([v.value for v in model.trainable_variables])
    if process_id == 0:
        np.savez(os.path.join(spec["dir"], "train.npz"), *[np.asarray(v) for v in values])
        result["loss"] = loss
        result["trainable_paths"] = [v.path for v in model.trainable_variables]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
