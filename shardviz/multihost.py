"""``shardviz verify``: prove a plan on JAX's real multi-process runtime.

:func:`verify` starts N local processes on 127.0.0.1, each owning its share
of the simulated devices, as N hosts would. Each runs the plan's exported
multi-host code (:meth:`~shardviz.Plan.to_python` with ``processes=N``)
unchanged, builds the model and runs a jitted forward pass on its rows of
the batch (:mod:`shardviz.multihost_worker`). Then every shard each host holds,
of every variable and output, is compared with shardviz's prediction for
that host, and the gathered output with a single-process run of the same
model and weights. Every process started is stopped: on success, on
failure, on a time-out and on Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from .errors import ShardvizError
from .plan import as_plan, check_processes

DEFAULT_TIMEOUT = 180.0
"""Seconds the workers may take, start-up included, before they are stopped."""
SEED = 0


class PlanRefused(ShardvizError):
    """Keras (or shardviz, on Keras's behalf) refuses the plan: nothing ran."""


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
                f"{self.max_abs_diff:.2e})" if self.agree and self.max_abs_diff is not None
                else "")
        return "\n".join([head + tail + f" ({self.seconds:.1f} s)"] + self.lines)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the coordinator binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _builder_ref(builder: object) -> str:
    if isinstance(builder, str):
        return builder
    module = getattr(builder, "__module__", None)
    name = getattr(builder, "__qualname__", "")
    if not module or module == "__main__" or "<" in name:
        raise ShardvizError(
            f"verify() needs a builder the worker processes can import, and {name or builder!r}"
            " cannot be imported from a module: it is defined in a notebook, a script or "
            "inside a function.",
            hint="Put the builder in a module and pass 'module:function' (or the function "
            "imported from it).")
    return f"{module}:{name}"


def _inputs(inputs: object) -> list[tuple[list[int], str]]:
    from .inputs import normalize_inputs

    specs, _ = normalize_inputs(inputs, None)
    import jax

    return [([int(d) for d in s.shape], str(s.dtype)) for s in jax.tree_util.tree_leaves(specs)]


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


def _reference(builder_ref: str, inputs: list) -> list[np.ndarray]:
    """The model's output in this process, with no distribution, from the
    same seed (so the same weights) and the same inputs as the workers."""
    from ._adapters.keras import set_random_seed
    from .cli import load_builder

    set_random_seed(SEED)
    model = load_builder(builder_ref)()
    rng = np.random.default_rng(SEED)
    xs = [np.zeros(shape, dtype) if np.issubdtype(np.dtype(dtype), np.integer)
          else rng.standard_normal(shape).astype(dtype) for shape, dtype in inputs]
    import jax

    from .inputs import call_args

    out = model(*call_args(model, xs[0] if len(xs) == 1 else xs))
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(out)]


def _stop(workers: Sequence[subprocess.Popen]) -> None:
    """Stop every worker and its children; wait so that none is left."""
    for w in workers:
        if w.poll() is None:
            try:
                os.killpg(w.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + 5
    for w in workers:
        try:
            w.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(w.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            w.wait()


def _last_lines(path: str, n: int = 8) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.rstrip() for line in f if line.strip() and "[Gloo]" not in line]
    except OSError:
        return "    (no output yet)"
    return "\n".join("    " + line for line in lines[-n:]) or "    (no output yet)"


def verify(builder: object, plan: object, processes: int = 2, inputs: object = None,
           timeout: float = DEFAULT_TIMEOUT, workdir: str | None = None) -> Verification:
    """Run ``plan`` on ``processes`` local processes and compare what each
    host holds with shardviz's prediction.

    Args:
        builder: ``"module:function"`` (or a function importable as such) that
            builds the model; every worker imports it.
        plan: a Plan, or anything :func:`~shardviz.plan.as_plan` takes.
        processes: how many processes (hosts); they split the mesh's devices
            evenly, in JAX's order.
        inputs: the global batch's shapes, e.g. ``(8, 64)``.
        timeout: seconds before the workers are stopped and verification
            fails.

    Raises:
        ShardvizError: for a usage error (a process count that does not
            divide the mesh, no inputs, a builder the workers cannot import).
        PlanRefused: when Keras refuses the plan; the message is Keras's.
    """
    import jax

    from ._adapters.jax import backend_started
    from .analysis import analyze

    start = time.perf_counter()
    plan = as_plan(plan)
    n = check_processes(processes, plan.mesh_size)
    if n is None:
        raise ShardvizError("verify() needs processes=N.", hint="For example processes=2.")
    if inputs is None:
        raise ShardvizError("verify() needs inputs, the global batch: e.g. inputs=(8, 64).",
                            hint="The workers run a forward pass on it.")
    ref = _builder_ref(builder)
    from .cli import load_builder

    builder_fn = load_builder(ref)
    if not backend_started():
        from .devices import simulate_devices

        simulate_devices(plan.mesh_size)
    elif jax.device_count() < plan.mesh_size:
        raise ShardvizError(
            f"This process has {jax.device_count()} devices, and predicting the plan's "
            f"layouts needs {plan.mesh_size}.",
            hint=f"Call shardviz.simulate_devices({plan.mesh_size}) first thing, or use the "
            "shardviz verify command.")
    specs = _inputs(inputs)
    shapes = [tuple(s) for s, _ in specs]
    report = analyze(builder_fn, plan, shapes[0] if len(shapes) == 1 else shapes, processes=n)
    if report.errors:
        first = report.errors[0]
        if first.kind == "trace-failed":  # the inputs or the model, not the plan
            raise ShardvizError(f"The forward pass cannot run: {first.message}", hint=first.hint)
        raise PlanRefused(f"Keras refuses this plan: {first.message}", hint=first.hint)
    try:
        code = plan.to_python(processes=n)
    except ShardvizError as e:
        raise PlanRefused(e.message, hint=e.hint) from None
    expected_output = _reference(ref, specs)

    own_dir = workdir is None
    directory = workdir or tempfile.mkdtemp(prefix="shardviz-verify-")
    spec = {"builder": ref, "code": code, "processes": n, "port": free_port(),
            "devices_per_process": plan.mesh_size // n, "inputs": specs, "seed": SEED,
            "dir": directory, "sys_path": [p for p in sys.path if p]}
    spec_path = os.path.join(directory, "spec.json")
    with open(spec_path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("XLA_FLAGS", None)
    workers: list[subprocess.Popen] = []
    logs = []
    try:
        for i in range(n):
            log = os.path.join(directory, f"worker{i}.log")
            logs.append(log)
            with open(log, "wb") as out:
                workers.append(subprocess.Popen(
                    [sys.executable, "-m", "shardviz.multihost_worker", spec_path, str(i)],
                    stdout=out, stderr=subprocess.STDOUT, env=env, cwd=directory,
                    start_new_session=True))
        deadline = time.monotonic() + timeout
        failures: list[str] = []

        def crashed(i: int) -> bool:
            return workers[i].poll() not in (None, 0) and not os.path.exists(
                os.path.join(directory, f"worker{i}.json"))

        while any(w.poll() is None for w in workers):
            if any(crashed(i) for i in range(n)):
                break
            if time.monotonic() > deadline:
                hung = [i for i, w in enumerate(workers) if w.poll() is None]
                failures.append(
                    f"worker{'s' if len(hung) > 1 else ''} {', '.join(map(str, hung))} did not "
                    f"finish within {timeout:.0f} s and {'were' if len(hung) > 1 else 'was'} "
                    "stopped; last lines:\n" + "\n".join(_last_lines(logs[i], 4) for i in hung))
                break
            time.sleep(0.2)
    finally:
        _stop(workers)
    results = []
    if not failures:
        for i in range(n):
            path = os.path.join(directory, f"worker{i}.json")
            if not os.path.exists(path):
                failures.append(f"worker {i} crashed (exit {workers[i].returncode}) before "
                                f"reporting; its last lines:\n{_last_lines(logs[i])}")
                continue
            with open(path, encoding="utf-8") as f:
                results.append(json.load(f))
        for r in results:
            if not r.get("ok"):
                message = r.get("error", "")
                if r.get("stage") in ("the exported plan code", "the builder"):
                    raise PlanRefused(f"Keras refused the plan on host {r['process']} while "
                                      f"running {r['stage']}: {message}",
                                      hint="Fix the plan; the worker's traceback is in "
                                      f"{logs[r['process']]}.")
                failures.append(f"host {r['process']} failed in {r.get('stage')}: {message}")
    checked, max_diff = 0, None
    lines: list[str] = []
    if not failures:
        lines, checked = _compare(report, results, n)
        gathered_path = os.path.join(directory, "output.npz")
        if os.path.exists(gathered_path):
            with np.load(gathered_path) as data:
                gathered = [data[k] for k in sorted(data.files, key=lambda k: int(k.split("_")[1]))]
            if len(gathered) != len(expected_output):
                lines.append(f"the gathered output has {len(gathered)} arrays; the single-"
                             f"process run has {len(expected_output)}")
            else:
                max_diff = 0.0
                for i, (g, want) in enumerate(zip(gathered, expected_output)):
                    if g.shape != want.shape:
                        lines.append(f"output {i}: gathered shape {g.shape}, single-process "
                                     f"shape {want.shape}")
                        continue
                    diff = float(np.max(np.abs(g.astype(np.float64) - want.astype(np.float64))))
                    max_diff = max(max_diff, diff)
                    if not np.allclose(g, want, rtol=1e-4, atol=1e-5):
                        lines.append(f"output {i}: the gathered output differs from the single-"
                                     f"process run (max |diff| {diff:.3g})")
        else:
            lines.append("process 0 wrote no gathered output")
    agree = not lines and not failures
    if own_dir and agree:
        import shutil

        shutil.rmtree(directory, ignore_errors=True)
    elif not agree:
        failures.append(f"the workers' logs are in {directory}")
    return Verification(processes=n, agree=agree, disagreements=lines, failures=failures,
                        hosts=report.hosts,
                        checked=checked, max_abs_diff=max_diff,
                        seconds=time.perf_counter() - start, report=report)
