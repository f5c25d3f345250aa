"""Private JAX APIs shardviz relies on, each with its reason.

>>> from shardviz._adapters import jax as jax_adapter
>>> callable(jax_adapter.watch_sharding)
True
"""

from __future__ import annotations

import contextlib
import io
import sys
import threading

from . import Swap

_state = threading.local()


def tpu_chips_here() -> int:
    """How many TPU chips this machine has (0 on a machine without any).

    Reason: JAX's own probe (the PCI devices it looks for before it starts
    libtpu) is private; no public call answers without starting a backend.
    Waits for a public "TPU chips present?" query.
    """
    try:
        from jax._src import hardware_utils

        chips, _ = hardware_utils.num_available_tpu_chips_and_device_id()
    except Exception:  # pragma: no cover - layout of jax internals moved
        return 0
    return int(chips or 0)


def backend_started() -> bool:
    """Whether JAX's backend has started, without starting it.

    Reason: ``jax.device_count()`` would start it, and then the number of
    simulated devices can no longer be chosen. Waits for a public
    "backends initialised?" query.
    """
    try:
        from jax._src import xla_bridge
    except ImportError:  # pragma: no cover - layout of jax internals moved
        return True
    probe = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(probe()) if probe is not None else True


def _named_or_placeholder(original):
    """A ``parse_flatten_op_sharding`` that keeps the raw HloSharding for
    shardviz's callbacks, and answers them with a placeholder where JAX
    would raise; for every other caller it is JAX's own."""
    from jax.sharding import PartitionSpec

    def parse_flatten_op_sharding(hlo_sharding, mesh):
        _state.hlo, _state.mesh, _state.unnamed = hlo_sharding, mesh, False
        try:
            return original(hlo_sharding, mesh)
        except Exception:
            # The caller is JAX's _hlo_sharding_callback; its `callback` is
            # the function that was passed to inspect_array_sharding.
            caller = sys._getframe(1).f_locals.get("callback")
            if not getattr(caller, "_shardviz_watch", False):
                raise
            _state.unnamed = True
            return [PartitionSpec()]

    return parse_flatten_op_sharding


def _debugging():
    from jax._src import debugging

    return debugging


_unnamed_swap = Swap(_debugging, "parse_flatten_op_sharding", _named_or_placeholder)


def capturing_shardings():
    """Hold this around the compile of a program that uses
    :func:`watch_sharding`, so that its callbacks see every sharding.

    Reason: ``jax.debug.inspect_array_sharding`` turns XLA's HloSharding into
    a ``NamedSharding`` with ``parse_flatten_op_sharding``, which raises
    ``IndivisibleError`` when XLA splits a value over part of a mesh axis
    (2 key/value heads on a 4-device axis), and the whole compile fails.
    While this is held, that function keeps the raw HloSharding for
    shardviz's callbacks and answers them with a placeholder instead of
    raising; every other caller sees JAX's behaviour unchanged. Waits for a
    public inspection API that hands over a ``jax.sharding.Sharding`` for
    every layout XLA can choose.
    """
    return _unnamed_swap.held()


def _devices_answering_the_target(original):
    """``jax.devices`` that, in a thread tracing for a target, answers the
    target's devices when asked with no backend; JAX's own otherwise."""

    def devices(backend=None):
        target = getattr(_state, "target_devices", None)
        if target is not None and backend is None:
            return list(target)
        return original() if backend is None else original(backend)

    return devices


def _jax_module():
    import jax

    return jax


_devices_swap = Swap(_jax_module, "devices", _devices_answering_the_target)


@contextlib.contextmanager
def tracing_for(devices):
    """Trace as on ``devices`` (a compile target's, such as a TPU topology's
    with no TPU here): in this thread, ``jax.devices()`` answers them.

    Reason: Keras and keras-hub choose kernels by ``jax.devices()[0].platform``
    while they trace: ``keras.ops.dot_product_attention`` runs its TPU
    splash-attention kernel on ``"tpu"`` and materialises the attention
    scores elsewhere (412 MB more temporaries for a 12-layer encoder at batch
    64, sequence 512, than the program a v5e chip runs). A program traced on
    this host for a chip must make the choices the chip makes. JAX itself
    never calls ``jax.devices`` while tracing. Waits for a public way to
    trace for another platform than the host's.
    """
    if devices is None:
        yield
        return
    previous = getattr(_state, "target_devices", None)
    _state.target_devices = tuple(devices)
    try:
        with _devices_swap.held():
            yield
    finally:
        _state.target_devices = previous


class _Watch:
    """The callback handed to ``inspect_array_sharding``. Made while a
    program is traced inside :func:`numbering_watches`, it has a number: its
    place in the trace, the same each time the same program is traced."""

    _shardviz_watch = True

    def __init__(self, callback):
        self.callback = callback
        self.book = getattr(_state, "watches", None)
        self.number = None
        if self.book is not None:
            self.number = len(self.book.watches)
            self.book.watches.append(self)

    def __call__(self, named):
        hlo = getattr(_state, "hlo", None)
        mesh = getattr(_state, "mesh", None)
        unnamed = getattr(_state, "unnamed", False)
        _state.hlo = _state.mesh = None
        _state.unnamed = False
        from jax.sharding import NamedSharding

        if not isinstance(named, NamedSharding):  # JAX built it from the HloSharding
            self.deliver(named, None)
            return
        if unnamed and hlo is not None and mesh is not None:
            from jax._src.sharding_impls import GSPMDSharding

            self.deliver(GSPMDSharding(tuple(mesh.devices.flat), hlo), hlo)
            return
        self.deliver(named, hlo)

    def deliver(self, sharding, hlo) -> None:
        """Hand ``(sharding, hlo)`` to the callback, and to its book while
        the book records (XLA calls back from its own threads)."""
        if self.book is not None and self.book.recording:
            with self.book.lock:
                self.book.delivered.append((self.number, sharding, hlo))
        self.callback(sharding, hlo)


class WatchBook:
    """The watches of one traced program, in trace order, and the layouts
    they were handed while :meth:`recording_deliveries` is held."""

    def __init__(self) -> None:
        self.watches: list[_Watch] = []
        self.delivered: list[tuple] = []
        self.recording = False
        self.lock = threading.Lock()

    @contextlib.contextmanager
    def recording_deliveries(self):
        """Record each ``(number, sharding, hlo_sharding)`` delivered while
        held (while XLA compiles the program), so that a compile read from
        the cache can deliver them again; yields the list."""
        self.recording = True
        try:
            yield self.delivered
        finally:
            self.recording = False


@contextlib.contextmanager
def numbering_watches():
    """Number each :func:`watch_sharding` made in this thread while held, in
    the order the program is traced; yields their :class:`WatchBook`."""
    previous = getattr(_state, "watches", None)
    _state.watches = book = WatchBook()
    try:
        yield book
    finally:
        _state.watches = previous


def watch_sharding(x, callback) -> None:
    """Call ``callback(sharding, hlo_sharding)`` with the sharding XLA gives
    ``x`` after propagation, inside ``jax.jit``, at compile time.

    ``sharding`` is a ``NamedSharding`` when a PartitionSpec can name it, and
    otherwise a sharding over the mesh's devices that still answers
    ``devices_indices_map`` and ``shard_shape`` (XLA split ``x`` over part
    of a mesh axis). ``hlo_sharding`` is XLA's own description, or None when
    JAX did not need one (a single device). Compile the program inside
    :func:`capturing_shardings`.
    """
    import jax

    jax.debug.inspect_array_sharding(x, callback=_Watch(callback))


def indices_on_positions(sharding, shape, size: int) -> list:
    """Per mesh position, the index ranges a ``NamedSharding`` on an
    ``AbstractMesh`` gives each device.

    Reason: ``devices_indices_map`` needs real devices, and a 16x16 pod is
    planned on a laptop; this is the routine it uses
    (``op_sharding_to_indices``). Waits for ``devices_indices_map`` on
    abstract meshes.
    """
    from jax._src import op_shardings

    hlo = sharding._to_xla_hlo_sharding(len(shape))
    return list(op_shardings.op_sharding_to_indices(hlo, shape, size))


_rich_lock = threading.Lock()


def visualize_sharding_text(shape, sharding, width: int = 80) -> str:
    """What ``jax.debug.visualize_sharding`` prints, as plain text.

    Reason: JAX prints through a ``rich.console.Console`` it creates itself,
    and inside Jupyter such a console displays HTML instead of writing text.
    For the duration of the call, the Console class JAX looks up is one that
    writes to a buffer, but only for consoles made in this thread; other
    threads get rich's own Console, and calls are serialised by a lock. Waits
    for ``visualize_sharding`` to return its text (or take a console).
    """

    import jax
    import rich.console

    buf = io.StringIO()
    with _rich_lock:
        original = rich.console.Console
        owner = threading.get_ident()

        # Ignores: mypy cannot subclass a class held in a variable, nor assign to a class.
        class _Capturing(original):  # type: ignore[valid-type, misc]
            def __init__(self, *args, **kwargs):
                if threading.get_ident() == owner:
                    kwargs.update(file=buf, force_jupyter=False, force_terminal=False)
                super().__init__(*args, **kwargs)

        rich.console.Console = _Capturing  # type: ignore[misc]
        try:
            jax.debug.visualize_sharding(tuple(shape), sharding, use_color=False,
                                         max_width=width)
        finally:
            rich.console.Console = original  # type: ignore[misc]
    return buf.getvalue()


def module_text(compiled) -> str:
    """The compiled program's HLO text with its table of Python stack frames
    (``FileNames`` ... ``StackFrames``), which maps each instruction's
    ``stack_frame_id`` to a file and line.

    Reason: ``Compiled.as_text()`` prints the instructions but drops that
    table; the module behind ``runtime_executable().hlo_modules()`` prints
    both. Falls back to ``as_text()`` (no source lines) where that is not
    available. Waits for a public source-location API on ``Compiled``.
    """
    cached = getattr(compiled, "cached_module_text", None)
    if cached is not None:
        return cached()
    try:
        modules = compiled.runtime_executable().hlo_modules()
        if modules:
            return modules[0].to_string()
    except Exception:  # noqa: BLE001 - any failure means: no frames, plain text
        pass
    return compiled.as_text()


def unpartitioned_cost(lowered) -> dict[str, float]:
    """XLA's cost analysis (``flops``, ``bytes accessed``) of a lowered
    program before it is partitioned: the whole program's figures, for all
    devices together. Empty when this JAX cannot give them.

    Reason: ``Lowered.cost_analysis()`` answers ``None`` when the program is
    lowered for devices this machine does not have (a TPU topology), and a
    compile that the TPU compiler refuses for lack of memory gives no costs.
    XLA's own HLO cost analysis, run on the host backend, is private
    (``xla_client._xla.hlo_module_cost_analysis``). Waits for a public cost
    analysis of a ``Lowered`` for any platform.
    """
    try:
        import jax
        from jax._src.lib import xla_client

        analyse = xla_client._xla.hlo_module_cost_analysis
        module = lowered.compiler_ir("hlo").get_hlo_module()
        cost = analyse(jax.devices("cpu")[0].client, module)
    except Exception:  # pragma: no cover - layout of jax internals moved
        return {}
    return {k: float(cost[k]) for k in ("flops", "bytes accessed") if k in cost}
