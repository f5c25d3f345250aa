"""Devices: simulated CPU devices, and the TPU chips of a target.

JAX fixes its device count when its backend starts, which happens at the
first JAX operation. :func:`simulate_devices` must therefore run first, right
after the imports; a notebook that calls it late has to restart its kernel.

>>> import shardviz
>>> shardviz.simulate_devices(8)   # doctest: +SKIP
8
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ._adapters.jax import backend_started
from .errors import ShardvizError
from .format import plural

if TYPE_CHECKING:
    import numpy as np

    from .hardware import Target

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
    if os.environ.get(VERBOSE_ENV, "0") not in ("", "0") or _no_libtpu():
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
    import numbers

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


stderr_lock = threading.Lock()
"""Taken by every fd-2 redirect in shardviz, so that two never nest."""


@contextlib.contextmanager
def filtering_stderr(take: Callable[[str], bool]) -> Iterator[list[str]]:
    """Hold fd 2 for the length of the block: each line written to it (from
    C++ or Python, by any thread) for which ``take(line)`` is true is kept in
    the list the block receives; every other line goes on to the real stderr
    as it arrives, in order. Nothing is lost, whatever the block raises.

    >>> import os
    >>> with filtering_stderr(lambda line: line.startswith("mine")) as kept:
    ...     _ = os.write(2, b"mine: taken\\n")
    >>> kept
    ['mine: taken']
    """
    import sys

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
                os.write(out, line + newline)

        def pump() -> None:
            pending = b""
            try:
                while chunk := os.read(read_end, 65536):
                    pending += chunk
                    *complete, pending = pending.split(b"\n")
                    for line in complete:
                        handle(line, b"\n")
                if pending:
                    handle(pending, b"")
            finally:
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
            os.dup2(saved, 2)  # the pipe's last write end closes: the pump ends
            os.close(saved)
            reader.join(timeout=10)


_TPU_START_UP = re.compile(
    r"host bounds for accelerator type|could not determine TPU|TPU_WORKER_HOSTNAMES|"
    r"Logging before InitGoogle|=== Source Location Trace|^\s*learning/\S+\.cc:\d+")


def _tpu_start_up_line(line: str) -> bool:
    """A start-up line of libtpu's on a machine with no chip."""
    return os.environ.get(VERBOSE_ENV, "0") in ("", "0") and bool(_TPU_START_UP.search(line))


def _quiet_stderr() -> contextlib.AbstractContextManager[list[str]]:
    """libtpu's start-up lines kept off stderr while it describes a
    topology; every other line passes."""
    return filtering_stderr(_tpu_start_up_line)


@functools.lru_cache(maxsize=32)
def tpu_topology_devices(chip: str, topology: str, slices: int = 1) -> tuple:
    """The devices of a TPU topology (``"v5e"``, ``"4x4"``), described by
    libtpu with no TPU present: real ``TpuDevice``s that the TPU compiler
    compiles for. Each carries ``slice_index`` when ``slices > 1``.

    Raises:
        ShardvizError: when libtpu is missing, or rejects the topology.
    """
    try:
        from jax.experimental import topologies
    except ImportError as e:  # pragma: no cover - every supported jax has it
        raise ShardvizError(f"This JAX has no topology API ({e}).",
                            hint="Install jax >= 0.10.") from None
    name = f"{chip}:{topology}"
    quiet_tpu_runtime()
    # libtpu guards real chips with a machine-wide lock file, so that one
    # process owns them. shardviz only compiles for a described topology and
    # never touches a chip, so two notebooks (or test workers) may both plan.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    # v4 and v5p chips hold two TensorCores that Cloud TPU runs as one JAX
    # device (megacore); libtpu describes a v4 core by core unless asked.
    config: dict[str, object] = (
        {"chip_config_name": "megacore"} if chip in ("v4", "v5p") else {})
    # Slices of one host: v5litepod-1 / v6e-1 (a chip) and v5litepod-8 / v6e-8
    # (one VM of 8 chips); libtpu's default host is 2x2 chips.
    if chip in ("v5e", "v6e") and topology in ("1x1", "2x4"):
        config["chips_per_host_bounds"] = tuple(int(d) for d in topology.split("x")) + (1,)
    try:
        with _quiet_stderr():
            try:
                description = topologies.get_topology_desc(
                    platform="tpu", topology_name=name, num_slices=slices, **config)
            except Exception as first:
                # Another slice smaller than libtpu's default host (2x2x1), asked
                # for directly: one host holds it all.
                if "chips_per_host_bounds" not in str(first) or "chips_per_host_bounds" in config:
                    raise
                dims = [int(d) for d in topology.split("x")] + [1, 1]
                description = topologies.get_topology_desc(
                    platform="tpu", topology_name=name, num_slices=slices,
                    chips_per_host_bounds=tuple(dims[:3]),
                    **{k: v for k, v in config.items() if k != "chips_per_host_bounds"})
    except Exception as e:
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if _no_libtpu():
            raise ShardvizError(
                f"TPU target {name!r} needs libtpu, the TPU compiler, and it is not installed "
                f"or does not load here ({text[:200]}).",
                hint='Install it with `pip install "shardviz[tpu]"` (Linux x86_64; about 680 '
                "MB), or plan for target='cpu' or a GPU target.") from None
        raise ShardvizError(f"libtpu rejects the topology {name!r}: {text[:300]}",
                            hint="Use a topology that tiles the chip's hosts, such as "
                            f"'{chip}:4x4'; see shardviz.targets().") from None
    return tuple(description.devices)


def _no_libtpu() -> bool:
    import importlib.util

    return importlib.util.find_spec("libtpu") is None


def check_dcn_axes(target: Target, axis_names: tuple[str, ...], shape: tuple[int, ...],
                   dcn_axes: tuple[str, ...]) -> None:
    """Refuse a multi-slice layout the mesh cannot take: one mesh axis spans
    the slices (by default the batch axis), and its size is a multiple of
    the number of slices."""
    what = "slices" if target.is_tpu else "nodes"
    if not dcn_axes:
        raise ShardvizError(
            f"{target.slices} {what} need a mesh axis to span them, and dcn_axes names none.",
            hint="Leave dcn_axes unset to span them with the plan's batch axis (data "
            f"parallelism over the {target.hardware.between.upper()} links), or pass "
            "dcn_axes=('axis',).")
    if len(dcn_axes) > 1:
        raise ShardvizError(f"dcn_axes={dcn_axes!r}: shardviz spans the {what} with one mesh axis.",
                            hint="Name one axis, such as dcn_axes=('batch',).")
    sizes = dict(zip(axis_names, shape))
    axis = dcn_axes[0]
    if axis not in sizes:
        raise ShardvizError(f"dcn_axes names {axis!r}, which the mesh {sizes} does not have.",
                            hint=f"Name one of {list(sizes)}.")
    if sizes[axis] % target.slices:
        raise ShardvizError(
            f"The mesh axis {axis!r} of size {sizes[axis]} spans the {target.slices} {what}, "
            "but does not divide among them.",
            hint=f"Make {axis!r} a multiple of {target.slices}.")


def target_device_array(target: Target, axis_names: tuple[str, ...], shape: tuple[int, ...],
                        dcn_axes: tuple[str, ...]) -> np.ndarray:
    """The target's TPU devices laid out in the mesh's shape, in the order
    the interconnect favours (``mesh_utils.create_device_mesh``, or
    ``create_hybrid_device_mesh`` over several slices, with ``dcn_axes``
    spanning the slices).

    Raises:
        ShardvizError: when the mesh does not fit the target's chips.
    """
    import numpy as np
    from jax.experimental import mesh_utils

    size = int(np.prod(shape))
    if size != target.chips:
        raise ShardvizError(
            f"The mesh {dict(zip(axis_names, shape))} has {size} devices, but the target "
            f"{target.label} has {target.chips} chips ({target.chips_per_slice} per slice x "
            f"{target.slices}).",
            hint=f"Make the mesh's axes multiply to {target.chips}, or pick a target with "
            f"{size} chips.")
    if target.slices > 1:
        check_dcn_axes(target, axis_names, shape, dcn_axes)
    devices = tpu_topology_devices(target.hardware.name, target.topology, target.slices)
    try:
        if target.slices == 1:
            array = mesh_utils.create_device_mesh(shape, list(devices),
                                                  allow_split_physical_axes=True)
        else:
            dcn_shape = tuple(target.slices if n == dcn_axes[0] else 1 for n in axis_names)
            ici_shape = tuple(s // d for s, d in zip(shape, dcn_shape))
            array = mesh_utils.create_hybrid_device_mesh(ici_shape, dcn_shape, list(devices),
                                                         allow_split_physical_axes=True)
    except Exception as e:
        raise ShardvizError(
            f"JAX cannot lay the mesh {dict(zip(axis_names, shape))} over {target.label}: "
            f"{str(e).splitlines()[0][:300]}",
            hint="Choose axis sizes that are products of the topology's dims.") from None
    return np.asarray(array).reshape(shape)


_AVAILABLE = re.compile(r"exceeds available HBM \(([\d.]+)([KMGT]?)\)")


@functools.lru_cache(maxsize=16)
def tpu_usable_bytes(chip: str, topology: str) -> int | None:
    """The memory the TPU compiler lets one chip's program use (less than the
    chip's HBM: the runtime keeps some), read from the compiler's own
    refusal of a program too large for any chip. None if it says nothing.

    It is the capacity the compiler's out-of-memory check uses, so shardviz's
    fit verdict and the compiler's agree.
    """
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    device = tpu_topology_devices(chip, topology)[0]
    mesh = Mesh(np.array([device]), ("x",))
    huge = jax.ShapeDtypeStruct((2**20, 2**20, 2**8), "float32",
                                sharding=NamedSharding(mesh, PartitionSpec()))
    try:
        with _quiet_stderr():
            jax.jit(lambda a: a * 2).lower(huge).compile()
    except Exception as e:
        m = _AVAILABLE.search(str(e))
        if m:
            return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2) or " "))
    return None
