"""Devices: the simulated CPU devices, and the process's standard error while
C++ code (XLA, libtpu) writes to it. A TPU target's chips are in
:mod:`shardviz.target.tpu`.

JAX fixes its device count when its backend starts, which happens at the
first JAX operation. :func:`simulate_devices` must therefore run first, right
after the imports; a notebook that calls it late has to restart its kernel.

>>> import shardviz
>>> shardviz.simulate_devices(8)   # doctest: +SKIP
8
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import functools
import importlib.util
import numbers
import os
import re
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator

from ._adapters.jax import backend_started
from .errors import ShardvizError
from .format import plural

MAX_SIMULATED_DEVICES = 2048
"""The most CPU devices shardviz simulates. JAX starts 2,048 devices in about
2.5 s and ends the process in about 6 s; at 4,096 ending takes 14 s, at 8,192
over 30 s (``bench/bench_devices.py``). Larger meshes are planned without
devices: layouts, shards and bytes are exact on an abstract mesh."""


VERBOSE_ENV = "SHARDVIZ_VERBOSE"
"""Set it (to anything but ``0``) to see the TPU runtime's start-up lines."""

_QUIET_TPU_ENV = {
    # What libtpu reads to describe this machine's chips. With no chip here
    # and these unset, it warns that it cannot determine them ("Failed to
    # find host bounds for accelerator type", "unexpected worker hostname")
    # each time it starts, on stderr, where they read as errors.
    "TPU_ACCELERATOR_TYPE": "v5litepod-1",
    "TPU_WORKER_HOSTNAMES": "localhost",
    "TPU_SKIP_MDS_QUERY": "1",
}


@functools.cache
def quiet_tpu_runtime() -> tuple[str, ...]:
    """On a machine with no TPU chip, set what libtpu reads (only where
    unset) so that it starts without its start-up warnings, and return the
    names set. Nothing changes on a machine with chips, when libtpu is not
    installed, or when ``SHARDVIZ_VERBOSE`` is set."""
    if os.environ.get(VERBOSE_ENV, "0") not in ("", "0") or no_libtpu():
        return ()
    from ._adapters.jax import tpu_chips_here

    if tpu_chips_here():
        return ()
    unset = tuple(k for k in _QUIET_TPU_ENV if k not in os.environ)
    for k in unset:
        os.environ[k] = _QUIET_TPU_ENV[k]
    return unset


def simulate_devices(n: int = 8, *, cpu_only: bool = True) -> int:
    """Make JAX expose ``n`` CPU devices, and return ``n``.

    Call it before any JAX operation. It is a no-op when ``n`` devices are
    already in force, and raises :class:`ShardvizError` when the backend has
    already started with another count.

    Args:
        n: the number of CPU devices to simulate.
        cpu_only: also make CPU the only JAX platform, so that Keras's
            ``list_devices()`` returns the simulated devices even on a
            machine with an accelerator. Only applied before the backend
            starts.
    """

    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ShardvizError(
            f"simulate_devices(n={n!r:.40}): n must be a positive integer.",
            hint="Pass the number of devices the plan's mesh needs, e.g. simulate_devices(8).",
        )
    n = int(n)
    quiet_tpu_runtime()
    if n > MAX_SIMULATED_DEVICES:
        raise ShardvizError(
            f"simulate_devices({n}): shardviz simulates at most {MAX_SIMULATED_DEVICES:,} "
            f"devices. JAX's start-up and shut-down grow with the count (about 14 s to end a "
            "process with 4,096 devices, over 30 s with 8,192), and a notebook would stall.",
            hint="Analyse larger meshes without simulating them: layouts, shard shapes and "
            "bytes per device are exact on an abstract mesh (analyze without inputs).",
        )
    import jax

    if backend_started():
        count = jax.device_count()
        if count == n:
            return n
        raise ShardvizError(
            f"JAX has already started with {plural(count, 'device')}, so it cannot "
            f"simulate {n}: the device count is fixed when JAX runs its first operation.",
            hint=(
                "Restart the kernel (or the Python process) and call "
                f"shardviz.simulate_devices({n}) right after the imports, "
                "before anything touches JAX."
            ),
        )
    if cpu_only and not jax.config.jax_platforms:
        jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", n)
    return n



def cpu_only() -> None:
    """Make the simulated CPU the only JAX platform, if JAX has not started:
    shardviz never runs on an accelerator (TPU targets are compiled for, not
    run on), and starting one prints its start-up warnings."""
    quiet_tpu_runtime()
    import jax

    if not backend_started() and not getattr(jax.config, "jax_platforms", None):
        jax.config.update("jax_platforms", "cpu")


stderr_lock = threading.RLock()
"""Taken by every fd-2 redirect in shardviz: one thread's at a time. In the
same thread one nests in another (a builder's import, filtered, may analyze a
model): the inner one passes the lines it does not take to the outer one."""


@contextlib.contextmanager
def filtering_stderr(take: Callable[[str], bool]) -> Iterator[list[str]]:
    """Hold fd 2 for the length of the block: each line written to it (from
    C++ or Python, by any thread) for which ``take(line)`` is true is kept in
    the list the block receives; every other line goes on to the real stderr
    as it arrives, in order. Nothing is lost, whatever the block raises. At
    the instant the block ends, a line another thread writes straight to the
    real stderr may pass one it wrote an instant before, still in the pipe:
    the block waits for the pipe to empty first, which makes that rare.

    >>> import os
    >>> with filtering_stderr(lambda line: line.startswith("mine")) as kept:
    ...     _ = os.write(2, b"mine: taken\\n")
    >>> kept
    ['mine: taken']
    """

    sys.stderr.flush()
    with stderr_lock:
        kept: list[str] = []
        read_end, write_end = os.pipe()
        saved = os.dup(2)
        out = os.dup(saved)  # the pump's own, closed when it is done

        def handle(line: bytes, newline: bytes) -> None:
            text = line.decode("utf-8", "replace")
            if take(text):
                kept.append(text.rstrip("\r"))
            else:
                data = memoryview(line + newline)
                while data:  # a pipe or a terminal may take part of it
                    data = data[os.write(out, data):]

        busy = threading.Event()  # set while the pump passes complete lines on

        def pump() -> None:
            pending = b""
            try:
                while chunk := os.read(read_end, 65536):
                    busy.set()
                    pending += chunk
                    *complete, pending = pending.split(b"\n")
                    for line in complete:
                        handle(line, b"\n")
                    busy.clear()  # a partial line waits for its end, or for the close
                if pending:
                    handle(pending, b"")
            finally:
                busy.clear()
                os.close(read_end)
                os.close(out)

        os.dup2(write_end, 2)
        os.close(write_end)
        reader = threading.Thread(target=pump, name="shardviz-stderr", daemon=True)
        reader.start()
        try:
            yield kept
        finally:
            sys.stderr.flush()
            # Let the pump pass on what is in the pipe before fd 2 points at the real
            # stderr again, so that another thread's next line does not overtake it.
            _drain(read_end, busy)
            os.dup2(saved, 2)  # the pipe's last write end closes: the pump ends
            os.close(saved)
            reader.join(timeout=10)


def _drain(read_end: int, busy: threading.Event, limit: float = 1.0) -> None:
    """Wait (at most ``limit`` seconds) until the pipe at ``read_end`` is empty
    and its pump has passed every complete line on."""
    deadline, idle = time.monotonic() + limit, 0
    while time.monotonic() < deadline and idle < 2:  # idle twice: not between read and set
        waiting = array.array("i", [0])
        fcntl.ioctl(read_end, termios.FIONREAD, waiting)
        idle = idle + 1 if not waiting[0] and not busy.is_set() else 0
        time.sleep(0.0005)


_TPU_START_UP = re.compile(
    r"host bounds for accelerator type|could not determine TPU|TPU_WORKER_HOSTNAMES|"
    r"Logging before InitGoogle|=== Source Location Trace|^\s*learning/\S+\.cc:\d+")


def _tpu_start_up_line(line: str) -> bool:
    """A start-up line of libtpu's on a machine with no chip."""
    return _quiet_line(_TPU_START_UP, line)


def _quiet_line(pattern: re.Pattern[str], line: str) -> bool:
    """Whether ``line`` is one of ``pattern``'s, to keep off stderr (never
    with ``SHARDVIZ_VERBOSE=1``)."""
    return os.environ.get(VERBOSE_ENV, "0") in ("", "0") and bool(pattern.search(line))


_LIBRARY_START_UP = re.compile(
    r"All log messages before absl::InitializeLog|cudart_stub\.cc|Could not find cuda drivers|"
    r"Unable to register cu(DNN|FFT|BLAS) factory|computation_placer\.cc.*already registered|"
    r"oneDNN custom operations are on|cpu_feature_guard\.cc|"
    r"^To enable the following instructions:.*rebuild TensorFlow")


def quiet_start_up() -> contextlib.AbstractContextManager[list[str]]:
    """The lines TensorFlow's C++ start-up writes on a machine without a GPU
    (keras-hub imports TensorFlow for its tokenizers) kept off stderr while
    the block imports a builder; every other line passes. With
    ``SHARDVIZ_VERBOSE=1`` every line passes.

    >>> import os
    >>> with quiet_start_up() as kept:
    ...     _ = os.write(2, b"I0000 00:00:1 12 cudart_stub.cc:31] Could not find cuda drivers\\n")
    >>> len(kept)
    1
    """
    return filtering_stderr(lambda line: _quiet_line(_LIBRARY_START_UP, line))


def quiet_stderr() -> contextlib.AbstractContextManager[list[str]]:
    """libtpu's start-up lines kept off stderr while it describes a
    topology; every other line passes."""
    return filtering_stderr(_tpu_start_up_line)


def no_libtpu() -> bool:

    return importlib.util.find_spec("libtpu") is None
