"""The worker processes of :func:`~shardviz.multihost.verify`: a free port on
127.0.0.1, each worker's environment, what it last said, a time limit on this
process's own work, and stopping every process a worker started."""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence

from ..errors import ShardvizError

DEFAULT_TIMEOUT = 180.0
"""Seconds verification may take, the model built in this process and the
workers' run included, before it is stopped."""


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


def check_workdir(workdir: object) -> str | None:
    """``workdir`` as an absolute path to a directory this process may write
    in, made if missing; None for none (verify makes a temporary one).

    >>> check_workdir(None) is None
    True
    """
    if workdir is None:
        return None
    try:
        path = os.path.abspath(os.fspath(workdir))  # type: ignore[call-overload]
    except TypeError:
        raise ShardvizError(f"workdir={workdir!r:.60} is not a path.",
                            hint="Give a directory, or leave workdir out.") from None
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise ShardvizError(
            f"workdir={path!r} cannot hold the workers' files: {e.strerror or e}.",
            hint="Give a directory shardviz may create and write in, or leave workdir out "
                 "(a temporary one is made and removed).") from None
    return path


def signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_workers(workers: Sequence[subprocess.Popen]) -> None:
    """Stop every worker and every process it started (each worker leads a
    process group of its own, kept while any member lives, even after the
    worker itself has ended); wait so that none is left."""
    for w in workers:
        signal_group(w.pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    for w in workers:
        try:
            w.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for w in workers:
        signal_group(w.pid, signal.SIGKILL)
        w.wait()


def last_lines(path: str, n: int = 8) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.rstrip() for line in f if line.strip() and "[Gloo]" not in line]
    except OSError:
        return "    (no output yet)"
    return "\n".join("    " + line for line in lines[-n:]) or "    (no output yet)"


def stage_of(directory: str, i: int) -> str:
    """What worker ``i`` last said it was doing."""
    try:
        with open(os.path.join(directory, f"worker{i}.stage"), encoding="utf-8") as f:
            return f.read().strip() or "starting up"
    except OSError:
        return "starting up"


class Alarm(BaseException):
    """The time limit rang (a BaseException, so that no ``except Exception``
    in a builder swallows it)."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`Alarm` in this thread after ``seconds``.

    Only in the main thread, where signals arrive, and only when no other
    real-time interval timer runs; elsewhere nothing is limited.
    """
    if (not hasattr(signal, "setitimer")
            or threading.current_thread() is not threading.main_thread()
            or signal.getitimer(signal.ITIMER_REAL)[0] > 0):
        yield
        return

    def ring(signum, frame):
        raise Alarm()

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, min(seconds, 1e8))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def worker_env() -> dict[str, str]:
    """This process's environment, with this copy of shardviz first on the path."""
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "2"}
    # Each worker sets its own device count; the user's other XLA flags stay.
    flags = [f for f in env.pop("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in env.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    return env
