"""``shardviz verify``: prove a plan on JAX's real multi-process runtime.

:func:`verify` starts N local processes on 127.0.0.1, each owning its share
of the simulated devices, as N hosts would. Each runs the plan's exported
multi-host code (:meth:`~shardviz.Plan.to_python` with ``processes=N``)
unchanged, builds the model and runs a jitted forward pass on its rows of
the batch (:mod:`shardviz.multihost.worker`). Then every shard each host holds,
of every variable and output, is compared with shardviz's prediction for
that host, and the gathered output with a single-process run of the same
model and weights. With ``train_step=True`` each also runs one ``model.fit``
step on its rows, and the loss and every updated variable are compared with
the same step in one process (:mod:`.train_check`). Every process started is stopped: on success, on
failure, on a time-out and on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import numbers
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ShardvizError
from ..model.builders import builder_ref, load_builder
from ..plan import as_plan, check_processes
from .train_check import (
    SEED,
    label_spec_of,
    output_lines,
    reference_output,
    reference_step,
    step_lines,
)

DEFAULT_TIMEOUT = 180.0
"""Seconds verification may take, the model built in this process and the
workers' run included, before it is stopped."""
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


@dataclasses.dataclass
class Verification:
    """What ``verify`` found: agreement, and one line per disagreement."""

    processes: int
    agree: bool
    disagreements: list[str]
    """One line per shard (or output) that differs from the prediction."""
    failures: list[str]
    """One line per worker that crashed, hung or failed, with its last lines."""
    hosts: pd.DataFrame
    """shardviz's per-host view (``report.hosts``) of the plan verified."""
    checked: int
    """How many (variable or output, device) shards were compared."""
    max_abs_diff: float | None
    """The largest difference between the gathered output and the
    single-process output."""
    seconds: float
    report: Any = dataclasses.field(default=None, repr=False)
    step_max_abs_diff: float | None = None
    """With ``train_step=True``: the largest difference between the train
    step's loss and updated variables on the processes and in one process."""
    tolerance_used: float | None = None
    """The largest share of the tolerance an output's difference used (at
    most 1 where they agree): within ``1e-4`` of the output's largest
    magnitude, plus ``1e-5`` (:func:`.train_check.agrees`)."""
    step_tolerance_used: float | None = None
    """The same for the train step's loss and updated variables."""

    @property
    def lines(self) -> list[str]:
        """Every disagreement and failure, one line each."""
        return self.disagreements + self.failures

    def __str__(self) -> str:
        n = len(self.disagreements)
        procs = f"{self.processes} process{'es' if self.processes != 1 else ''}"
        head = (f"verified on {procs}: {self.checked} shards agree with "
                f"shardviz's prediction" if self.agree else
                f"verification on {procs} failed: {n} disagreement"
                f"{'s' if n != 1 else ''}, {len(self.failures)} worker failure"
                f"{'s' if len(self.failures) != 1 else ''}")
        tail = (f"; gathered output matches the single-process run (max |diff| "
                f"{self.max_abs_diff:.2e}{_used(self.tolerance_used)})"
                if self.agree and self.max_abs_diff is not None else "")
        if self.agree and self.step_max_abs_diff is not None:
            tail += ("; the train step's loss and every updated variable match the single-"
                     f"process step (max |diff| {self.step_max_abs_diff:.2e}"
                     f"{_used(self.step_tolerance_used)})")
        return "\n".join([head + tail + f" ({self.seconds:.1f} s)"] + self.lines)


def _used(share: float | None) -> str:
    return "" if share is None else f", {share:.0%} of the tolerance"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the coordinator binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_timeout(timeout: object, name: str = "timeout=") -> float:
    """``timeout`` as seconds: a finite number above 0.

    >>> check_timeout(30)
    30.0
    """
    if (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
            or not math.isfinite(float(timeout)) or float(timeout) <= 0):
        raise ShardvizError(f"{name}{timeout!r}: the time limit must be a finite number of "
                            "seconds above 0.",
                            hint=f"Give e.g. {name}{DEFAULT_TIMEOUT:g} (the default).")
    return float(timeout)


def _inputs(inputs: object):
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


def _predicted(report) -> tuple[dict, list]:
    """Per variable path and per model output: mesh position → index ranges."""
    ids = [int(i) for i in report.mesh.device_ids.flat]
    position = {d: p for p, d in enumerate(ids)}

    def ranges(index, shape):
        return [[int(s.start or 0), int(s.stop if s.stop is not None else n)]
                for s, n in zip(index, shape)]

    variables = {}
    for path in report.paths:
        shape = report.variable(path).info.shape
        variables[path] = {position[d]: ranges(i, shape)
                           for d, i in report.indices(path).items()}
    outputs = []
    activations = report.trace.activations if report.trace is not None else []
    for a in sorted((a for a in activations if a.output_index is not None),
                    key=lambda a: a.output_index):
        sharding = a.returned if a.returned is not None else a.actual
        outputs.append({position[d.id]: ranges(i, a.shape)
                        for d, i in sharding.devices_indices_map(a.shape).items()})
    return variables, outputs


def _describe(ranges) -> str:
    return "[" + ", ".join(f"{a}:{b}" for a, b in ranges) + "]"


def _compare(report, results: list[dict], processes: int) -> tuple[list[str], int]:
    variables, outputs = _predicted(report)
    owner = report.process_of_position
    lines, checked = [], 0
    for r in results:
        host = r["process"]
        mine = [p for p in range(report.mesh.size) if owner[p] == host]
        if sorted(r.get("local_devices", [])) != mine:
            lines.append(f"host {host}: owns mesh positions {r.get('local_devices')}, "
                         f"shardviz expected {mine}")
        for path, shards in r["variables"].items():
            expected = variables.get(path)
            if expected is None:
                lines.append(f"host {host}: variable {path!r} exists in the run but not in "
                             "shardviz's scan")
                continue
            for position, got in shards:
                checked += 1
                want = expected.get(position)
                if want != got:
                    lines.append(f"host {host}, mesh position {position}: {path} holds "
                                 f"{_describe(got)}, shardviz predicted {_describe(want or [])}")
        for i, shards in enumerate(r["outputs"]):
            if i >= len(outputs):
                lines.append(f"host {host}: output {i} was not predicted")
                continue
            for position, got in shards:
                checked += 1
                want = outputs[i].get(position)
                if want != got:
                    lines.append(f"host {host}, mesh position {position}: output {i} holds "
                                 f"{_describe(got)}, shardviz predicted {_describe(want or [])}")
    return lines, checked


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(workers: Sequence[subprocess.Popen]) -> None:
    """Stop every worker and every process it started (each worker leads a
    process group of its own, kept while any member lives, even after the
    worker itself has ended); wait so that none is left."""
    for w in workers:
        _signal_group(w.pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    for w in workers:
        try:
            w.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for w in workers:
        _signal_group(w.pid, signal.SIGKILL)
        w.wait()


def _last_lines(path: str, n: int = 8) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.rstrip() for line in f if line.strip() and "[Gloo]" not in line]
    except OSError:
        return "    (no output yet)"
    return "\n".join("    " + line for line in lines[-n:]) or "    (no output yet)"


def _stage(directory: str, i: int) -> str:
    """What worker ``i`` last said it was doing."""
    try:
        with open(os.path.join(directory, f"worker{i}.stage"), encoding="utf-8") as f:
            return f.read().strip() or "starting up"
    except OSError:
        return "starting up"


class _Alarm(BaseException):
    """The time limit rang (a BaseException, so that no ``except Exception``
    in a builder swallows it)."""


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`_Alarm` in this thread after ``seconds``.

    Only in the main thread, where signals arrive, and only when no other
    real-time interval timer runs; elsewhere nothing is limited.
    """
    if (not hasattr(signal, "setitimer")
            or threading.current_thread() is not threading.main_thread()
            or signal.getitimer(signal.ITIMER_REAL)[0] > 0):
        yield
        return

    def ring(signum, frame):
        raise _Alarm()

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, min(seconds, 1e8))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _worker_env() -> dict[str, str]:
    """This process's environment, with this copy of shardviz first on the path."""
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("XLA_FLAGS", None)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in env.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    return env


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
    builder_fn = load_builder(ref)
    if not backend_started():
        from ..devices import simulate_devices

        simulate_devices(plan.mesh_size)
    elif jax.device_count() < plan.mesh_size:
        raise ShardvizError(
            f"This process has {jax.device_count()} devices, and predicting the plan's "
            f"layouts needs {plan.mesh_size}.",
            hint=f"Call shardviz.simulate_devices({plan.mesh_size}) first thing, or use the "
            "shardviz verify command.")
    tree, names, specs = _inputs(inputs)
    shown = progress or (lambda what: None)
    stage = ["building the model"]
    expected_output: list[np.ndarray] = []
    label_spec: list | None = None
    expected_step: tuple[float, dict[str, np.ndarray]] | None = None

    def at(what: str) -> None:
        stage[0] = what
        shown(what)

    try:
        with _time_limit(timeout):
            at("building the model and predicting each process's shards")
            report = analyze(builder_fn, plan, tree, processes=n, progress=at)
            if not report.errors:
                at("building the model for the single-process run")
                expected_output = reference_output(builder_fn, names, specs)
                if train_step:
                    at("running the single-process train step")
                    label_spec = label_spec_of(
                        None if labels is None else _inputs(labels)[2], expected_output)
                    expected_step = reference_step(builder_fn, names, specs, label_spec)
    except _Alarm:
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
    env = _worker_env()
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
                doing = "; ".join(f"worker {i} was {_stage(directory, i)}" for i in hung)
                said = [f"  worker {i}:\n{_last_lines(logs[i], 4)}" for i in hung
                        if "(no output yet)" not in _last_lines(logs[i], 4)]
                failures.append(f"timed out after {timeout:g} s: {doing}; the workers were "
                                "stopped" + ("; their last lines:\n" + "\n".join(said)
                                             if said else "."))
                break
            time.sleep(0.2)
    finally:
        _stop(workers)
    results = []
    if not failures:
        for i in range(n):
            path = os.path.join(directory, f"worker{i}.json")
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    results.append(json.load(f))
            elif i not in stopped:
                failures.append(f"worker {i} crashed (exit {workers[i].returncode}) while "
                                f"{_stage(directory, i)}, before reporting; its last lines:\n"
                                f"{_last_lines(logs[i])}")
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
        lines, checked = _compare(report, results, n)
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
