"""verify(): a plan run on N local processes, each host's shards compared with
shardviz's prediction, and the output (and one train step) with one process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

from ..errors import ShardvizError
from ..hub.presets import model_of
from ..model.builders import builder_ref
from ..plan import as_plan, check_processes
from .comparison import Verification, compare_shards
from .processes import (
    DEFAULT_TIMEOUT,
    Alarm,
    check_timeout,
    check_workdir,
    free_port,
    last_lines,
    stage_of,
    stop_workers,
    time_limit,
    worker_env,
)
from .train_check import (
    SEED,
    label_spec_of,
    output_lines,
    reference_output,
    reference_step,
    step_lines,
)

SEED_HINT = ("Seed the builder so that every process builds the same weights: call "
             "keras.utils.set_random_seed(0) at its start, and give any other random source "
             "it uses (NumPy generators, initializer seeds) a fixed seed.")


class PlanRefused(ShardvizError):
    """Keras (or shardviz, on Keras's behalf) refuses the plan: nothing ran."""


class TimedOut(ShardvizError):
    """Verification ran past its time limit in this process, before any
    worker started (the builder or the analysis did not return)."""


class DifferentWeights(ShardvizError):
    """The builder gives different weights in each process."""


def batch_specs(inputs: object):
    """``(tree, names, leaves)`` for the global batch: the tree of
    ShapeDtypeStructs as given, the names of a dict's inputs (None for one
    input or a list) and ``[shape, dtype]`` per input, in the names' order."""
    from ..model.inputs import normalize_inputs

    tree, _ = normalize_inputs(inputs, None)
    if isinstance(tree, dict):
        names: list[str] | None = [str(k) for k in tree]
        specs = list(tree.values())
    else:
        names = None
        specs = tree if isinstance(tree, list) else [tree]
    return tree, names, [([int(d) for d in s.shape], str(s.dtype)) for s in specs]


def verify(builder: object, plan: object, processes: int = 2, inputs: object = None,
           timeout: float = DEFAULT_TIMEOUT, workdir: str | None = None,
           train_step: bool = False, labels: object = None,
           progress: Callable[[str], None] | None = None) -> Verification:
    """Run ``plan`` on ``processes`` local processes and compare what each
    host holds with shardviz's prediction.

    Args:
        builder: ``"module:function"``, ``"path/to/file.py:function"`` (or a
            function importable as such) that builds the model; every worker
            loads it, in this process's working directory and ``sys.path``.
        plan: a Plan, or anything :func:`~shardviz.plan.as_plan` takes.
        processes: how many processes (hosts); they split the mesh's devices
            evenly, in JAX's order.
        inputs: the global batch's shapes, e.g. ``(8, 64)``; a list for
            several inputs, or a dict of name to ``jax.ShapeDtypeStruct`` (or
            shape) for a model that takes a dict.
        train_step: also run one ``model.fit`` step (the model's own train
            step; SGD and mean squared error if the builder did not compile
            it) on every process, and compare its loss and every updated
            trainable variable with the same step in one process.
        labels: the labels' shape for the train step (one array); by
            default the model's output's, float32.
        timeout: seconds, a finite number above 0, for the whole verification:
            the model built in this process and the workers' run. The workers
            are then stopped, with every process they started.
        progress: called with each stage's name as it begins (the command
            line shows them).

    Raises:
        ShardvizError: for a usage error (a process count that does not
            divide the mesh, no inputs, a builder the workers cannot import,
            a time limit that is not a positive number).
        PlanRefused: when Keras refuses the plan; the message is Keras's.
        DifferentWeights: when the builder builds different weights in each
            process (it is not seeded).
        TimedOut: when the builder or the analysis in this process does not
            return in time (in the main thread only).
    """
    import jax

    from .._adapters.jax import backend_started
    from ..analysis import analyze

    timeout = check_timeout(timeout)
    workdir = check_workdir(workdir)
    start = time.perf_counter()
    deadline = time.monotonic() + timeout
    plan = as_plan(plan)
    n = check_processes(processes, plan.mesh_size)
    if n is None:
        raise ShardvizError("verify() needs processes=N.", hint="For example processes=2.")
    if inputs is None:
        raise ShardvizError("verify() needs inputs, the global batch: e.g. inputs=(8, 64).",
                            hint="The workers run a forward pass on it.")
    ref = builder_ref(builder)
    builder_fn = model_of(ref)
    if not backend_started():
        from ..devices import simulate_devices

        simulate_devices(plan.mesh_size)
    elif jax.device_count() < plan.mesh_size:
        raise ShardvizError(
            f"This process has {jax.device_count()} devices, and predicting the plan's "
            f"layouts needs {plan.mesh_size}.",
            hint=f"Call shardviz.simulate_devices({plan.mesh_size}) first thing, or use the "
            "shardviz verify command.")
    tree, names, specs = batch_specs(inputs)
    shown = progress or (lambda what: None)
    stage = ["building the model"]
    expected_output: list[np.ndarray] = []
    label_spec: list | None = None
    expected_step: tuple[float, dict[str, np.ndarray]] | None = None

    def at(what: str) -> None:
        stage[0] = what
        shown(what)

    try:
        with time_limit(timeout):
            at("building the model and predicting each process's shards")
            report = analyze(builder_fn, plan, tree, processes=n, progress=at)
            if not report.errors:
                at("building the model for the single-process run")
                expected_output = reference_output(builder_fn, names, specs)
                if train_step:
                    at("running the single-process train step")
                    label_spec = label_spec_of(
                        None if labels is None else batch_specs(labels)[2], expected_output)
                    expected_step = reference_step(builder_fn, names, specs, label_spec)
    except Alarm:
        raise TimedOut(
            f"verify timed out after {timeout:g} s in this process while {stage[0]}; no worker "
            "had started.",
            hint="Make the builder return (it may wait on something that never comes), or "
            "give more time with --timeout / timeout=.") from None
    if report.errors:
        first = report.errors[0]
        if first.kind == "trace-failed":  # the inputs or the model, not the plan
            raise ShardvizError(f"The forward pass cannot run: {first.message}", hint=first.hint)
        raise PlanRefused(f"Keras refuses this plan: {first.message}", hint=first.hint)
    try:
        code = plan.to_python(processes=n)
    except ShardvizError as e:
        raise PlanRefused(e.message, hint=e.hint) from None

    own_dir = workdir is None
    directory = os.path.abspath(workdir or tempfile.mkdtemp(prefix="shardviz-verify-"))
    spec = {"builder": ref, "code": code, "processes": n, "port": free_port(),
            "devices_per_process": plan.mesh_size // n, "inputs": specs, "input_names": names,
            "labels": label_spec,
            "seed": SEED, "dir": directory, "parent": os.getpid(),
            "sys_path": [os.path.abspath(p) if p else os.getcwd() for p in sys.path]}
    spec_path = os.path.join(directory, "spec.json")
    with open(spec_path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    env = worker_env()
    workers: list[subprocess.Popen] = []
    logs = []
    failures: list[str] = []
    stopped: set[int] = set()
    shown(f"running the plan on {n} local processes")
    try:
        for i in range(n):
            log = os.path.join(directory, f"worker{i}.log")
            logs.append(log)
            with open(log, "wb") as out:
                workers.append(subprocess.Popen(
                    [sys.executable, "-m", "shardviz.multihost.worker", spec_path, str(i)],
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                    cwd=os.getcwd(), start_new_session=True))
        while any(w.poll() is None for w in workers):
            if any(w.poll() not in (None, 0) for w in workers):
                stopped = {i for i, w in enumerate(workers) if w.poll() is None}
                break  # one failed: the others would wait for it
            if time.monotonic() > deadline:
                hung = [i for i, w in enumerate(workers) if w.poll() is None]
                doing = "; ".join(f"worker {i} was {stage_of(directory, i)}" for i in hung)
                said = [f"  worker {i}:\n{last_lines(logs[i], 4)}" for i in hung
                        if "(no output yet)" not in last_lines(logs[i], 4)]
                failures.append(f"timed out after {timeout:g} s: {doing}; the workers were "
                                "stopped" + ("; their last lines:\n" + "\n".join(said)
                                             if said else "."))
                break
            time.sleep(0.2)
    finally:
        stop_workers(workers)
    results = []
    if not failures:
        for i in range(n):
            path = os.path.join(directory, f"worker{i}.json")
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    results.append(json.load(f))
            elif i not in stopped:
                failures.append(f"worker {i} crashed (exit {workers[i].returncode}) while "
                                f"{stage_of(directory, i)}, before reporting; its last lines:\n"
                                f"{last_lines(logs[i])}")
        for r in results:
            if r.get("different_values"):
                raise DifferentWeights(
                    f"The builder gives different weights in each process: worker "
                    f"{r['process']}, while {r.get('stage')}, found a value that differs "
                    f"between processes ({r.get('error', '')[:200]}).",
                    hint=SEED_HINT + f" The worker's log is {logs[r['process']]}.")
        for r in results:
            if not r.get("ok"):
                failures.append(f"worker {r['process']} failed while {r.get('stage')}: "
                                f"{r.get('error', '')}")
    checked, max_diff, step_diff = 0, None, None
    used: float | None = None
    step_used: float | None = None
    lines: list[str] = []
    if not failures:
        lines, checked = compare_shards(report, results, n)
        found, max_diff, used = output_lines(directory, expected_output)
        lines += found
        if expected_step is not None:
            found, step_diff, step_used = step_lines(directory, results, expected_step)
            lines += found
    agree = not lines and not failures
    if own_dir and agree:

        shutil.rmtree(directory, ignore_errors=True)
    elif not agree:
        failures.append(f"the workers' logs are in {directory}")
    return Verification(processes=n, agree=agree, disagreements=lines, failures=failures,
                        hosts=report.hosts,
                        checked=checked, max_abs_diff=max_diff,
                        seconds=time.perf_counter() - start, report=report,
                        step_max_abs_diff=step_diff if expected_step is not None else None,
                        tolerance_used=used,
                        step_tolerance_used=step_used if expected_step is not None else None)
