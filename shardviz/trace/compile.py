"""Compiling a traced pass: the program, its collectives, and a failure
that names the layer that raised."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import re
import time

from .._adapters import jax as jax_adapter
from .._adapters import keras as keras_adapter
from .._adapters.jax import capturing_shardings, module_text, tracing_for
from ..errors import OutOfMemory, Problem, ShardvizError
from ..format import format_spec
from ..matching.match import compiled as compiled_key
from . import buffer_dump, cached_compile, compile_cache, hlo, sources, xla_log

_RANKING: contextvars.ContextVar[bool] = contextvars.ContextVar("ranking", default=False)

RANKING_OPTIONS = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
"""XLA options of a compile that only ranks alternatives on the simulated
CPUs: the CPU backend skips its machine-code optimizations (about a third of
the compile time), which run after the partitioner has placed the
collectives. ``tests/test_audit.py`` checks that the collectives and the
bytes per device are those of a default compile."""


@contextlib.contextmanager
def ranking_compiles():
    """Compiles inside only rank alternatives against each other: on the
    simulated CPUs they use :data:`RANKING_OPTIONS`. A program whose figures
    are shown is compiled again outside."""
    token = _RANKING.set(True)
    try:
        yield
    finally:
        _RANKING.reset(token)


def _compiler_options(devices) -> dict | None:
    import jax

    if not _RANKING.get() or devices or jax.default_backend() != "cpu":
        return None
    return dict(RANKING_OPTIONS)


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def short_message(e: Exception) -> str:
    """The gist of an exception, without terminal colour codes: Keras wraps
    layer errors as "Exception encountered when calling X.call(). <message>
    Arguments received ..."."""
    lines = [line.strip() for line in _ANSI.sub("", str(e)).splitlines() if line.strip()]
    kept = []
    for line in lines:
        if line.startswith("Arguments received"):
            break
        kept.append(line)
        if len(kept) == 2:
            break
    return " ".join(kept)[:500]


def _named_layout(text: str, activations) -> tuple[str, str | None]:
    """XLA's sharding text, named after the layer output that has it (and
    as a spec), when one does: ``("`dense/output` P('batch', None)", path)``."""

    for a in activations:
        if a.hlo is not None and a.hlo.strip() == text.strip() and a.actual_spec is not None:
            return f"{format_spec(a.actual_spec)} (the layout of `{a.path}`)", a.path
    m = re.fullmatch(r"\{devices=\[([\d,]+)\]\S*( last_tile_dim_replicate)?\}", text.strip())
    if m:
        tiles = [int(t) for t in m.group(1).split(",")]
        copies = tiles.pop() if m.group(2) else 1
        split = [f"dim {d} {t} ways" for d, t in enumerate(tiles) if t > 1]
        words = ("split " + ", ".join(split)) if split else "whole"
        return words + (f", {copies} copies" if copies > 1 else "") + f" ({text})", None
    return text, None


def _layer_of(op_name: str, layer_paths) -> str | None:
    """The Keras layer an op's name scope belongs to, or None."""
    for scope in hlo.scopes_of(op_name)[0]:
        layer = hlo.layer_for_scope(scope, layer_paths)
        if layer:
            return layer
    return None


def reshard_problems(compiled, warnings, layer_paths, plan, what: str = "forward",
                     activations=()):
    """Each :class:`~.xla_log.ReshardWarning` as a Problem naming its layer,
    its source line, and the rules whose layouts meet there."""

    if not warnings:
        return []

    program = sources.Program.parse(module_text(compiled))
    out = []
    for w in warnings:
        layer = _layer_of(w.op_name, layer_paths)
        frame = sources.source_frame(program.frames.get(w.frame_id, ()))
        site = next((i for i in program.instructions.values() if i.op_name == w.op_name), None)
        inputs = []
        if site is not None:
            inputs = [name for kind, name in program.inputs_of(
                site.name, {}, layer, lambda op_name: _layer_of(op_name, layer_paths))
                if kind == "activation"]
        if not inputs and layer in layer_paths and layer_paths.index(layer) > 0:
            # XLA fused the op away: take the layer called just before it.
            inputs = [layer_paths[layer_paths.index(layer) - 1]]
        source_layout, src_path = _named_layout(w.source_layout, activations)
        target_layout, dst_path = _named_layout(w.target_layout, activations)
        paths = [f"{p}/output" for p in ([layer] if layer else []) + inputs]
        paths += [p for p in (src_path, dst_path) if p and p not in paths]
        patterns = [(r.key, compiled_key(r.key)) for r in plan.rules]
        rules = [key for key, pattern in patterns
                 if pattern is not None and any(pattern.fullmatch(p) for p in paths)]
        where = f" at layer {layer!r}" if layer else ""
        source = f" ({sources.short_file(frame.location)})" if frame else ""
        involved = (", ".join(f"`{k}`" for k in rules)) or "none: XLA chose both layouts"
        out.append(Problem(
            "warning", "xla-resharding",
            f"XLA cannot move a tensor{where}{source} from {source_layout} to "
            f"{target_layout} efficiently in the {what} pass: it replicates the whole tensor "
            f"on every device and splits it again. Rules whose layouts meet there: {involved}.",
            hint="Make the two layouts agree: give the producer's /output rule the layout the "
            "next layer asks for, or drop the /output rule that asks for the other one. "
            "Moving a split to another dimension and another mesh axis at once is what XLA "
            "cannot do in one step.",
            rule=rules[0] if rules else None, layer=layer))
    return out


def collectives_of(compiled, mesh, layer_paths, parameters=None):
    """The compiled program's collectives, each attributed to the Keras layer
    where its layouts meet, with its source line and what meets there.

    ``parameters`` maps an entry parameter's name (``"tv[0]"``) to the
    variable path it carries."""

    text = module_text(compiled)
    program = sources.Program.parse(text)
    parameters = parameters or {}

    def layer_of(op_name: str) -> str | None:
        return _layer_of(op_name, layer_paths)

    out = []
    for c in hlo.collectives(text, mesh.axis_names, mesh.shape):
        layers = []
        site = program.site(c.name, c.kind)
        site_layer = layer_of(site.op_name) if site is not None and site.op_name else None
        if site_layer:
            layers.append(site_layer)
        else:
            for scope in c.scopes:
                layer = hlo.layer_for_scope(scope, layer_paths) or scope
                if layer not in layers:
                    layers.append(layer)
        # The collective's own metadata names the op it was made for on some
        # XLA versions and the op that produced its data on others; the site
        # (the op that needs it, or whose partial sums it adds) is the one
        # to show when the two differ, and the row says so.
        stack, source_from = program.stack(c.name), "itself"
        if site is not None and (not stack or site.op_name != c.op_name):
            site_stack = program.stack(site.name)
            if site_stack:
                stack = site_stack
                source_from = ("the op it feeds" if c.kind in sources.GATHERING
                               else "the op that feeds it")
        frame = sources.source_frame(stack)
        operands: list[str] = []
        if site is not None:
            for kind, name in program.inputs_of(site.name, parameters, site_layer, layer_of):
                operands.append({"variable": name, "activation": f"{name}/output",
                                 "internal": f"inside {name}"}.get(kind, f"input:{name}"))
        out.append(dataclasses.replace(
            c, layer=", ".join(layers), source=frame.location if frame else "",
            source_function=frame.function if frame else "",
            source_from=source_from if frame else "", stack=stack,
            site=site.op_name if site is not None else "", operands=tuple(operands)))
    return out


def compile_pass(fn, args, name, recorder, seconds, what, progress=None, log=None,
                 observe=None, lower_only=False, devices=None, attention=None, peak=None):
    """Lower and compile ``fn(*args)`` (``fn`` jitted here, unless it is
    jitted already); with ``lower_only``, only lower it and return the
    ``Lowered`` (its ``out_info`` says what it returns). XLA's resharding
    warnings go to ``log`` (a list of
    :class:`~.xla_log.ReshardWarning`); anything else it writes to stderr is
    passed on. ``observe=(on_output, distribution)`` traces inside
    :func:`~shardviz._adapters.keras.observing_outputs` and with deferred
    variables, for a function (Keras's own train step) that cannot open them
    itself. ``devices`` (a target's, e.g. a TPU topology's) are the ones
    Keras sees while it traces, so that it picks the kernels it would pick
    on them. Each call of ``keras.ops.dot_product_attention`` traced, and
    whether Keras ran its kernel for it, is appended to ``attention`` (a
    list), and a refusal for memory carries them too. The compiler's buffer
    assignment (:class:`~.buffer_dump.BufferPeak`, or why there is none) is
    appended to ``peak`` (a list), for a refused program too."""

    import jax

    progress = progress or (lambda stage: None)
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    key = what.replace(" ", "_")
    t = time.perf_counter()
    lowered = None
    cached: _Cached | None = None
    try:
        progress("tracing")
        with contextlib.ExitStack() as stack:
            stack.enter_context(keras_adapter.full_tracebacks())
            stack.enter_context(tracing_for(devices))
            watches = stack.enter_context(jax_adapter.numbering_watches())
            if attention is not None:
                stack.enter_context(keras_adapter.watching_attention(attention))
            if observe is not None:
                stack.enter_context(keras_adapter.deferred_variables())
                stack.enter_context(keras_adapter.observing_outputs(observe[0], base=observe[1]))
            lowered = jitted.lower(*args)
        seconds[f"{key}_trace"] = time.perf_counter() - t
        if lower_only:
            return lowered
        t = time.perf_counter()
        options = _compiler_options(devices)
        cached = _Cached.find(lowered, args, options, watches)
        if cached is not None and cached.entry is not None:
            progress("reading the compile cache")
            if peak is not None:
                peak.append(cached.buffer_peak())
            compiled = cached.replay(what, name, attention)
            if log is not None:
                log.extend(cached.log)
            seconds[f"{key}_cache"] = time.perf_counter() - t
            return compiled
        progress("compiling")
        with _dumping(peak, options) as compile_options, capturing_shardings(), \
                xla_log.capturing_stderr() as lines, watches.recording_deliveries() as delivered:
            compiled = lowered.compile(compiler_options=compile_options)
        warnings, rest = xla_log.split_log(lines)
        xla_log.pass_on(rest)
        if log is not None:
            log.extend(warnings)
        seconds[f"{key}_compile"] = time.perf_counter() - t
        if cached is not None:
            cached.keep(compiled, delivered, lines, peak[-1] if peak else None)
    except ShardvizError:
        raise
    except Exception as e:
        if "RESOURCE_EXHAUSTED" in str(e) and "memory" in str(e):
            oom = out_of_memory(e, what, name)
            if devices and lowered is not None:
                flops = jax_adapter.unpartitioned_cost(lowered).get("flops")
                oom.flops = flops / len(devices) if flops is not None else None
            oom.attention = list(attention or ())
            if cached is not None:
                cached.keep_refusal(str(e), oom.flops, peak[-1] if peak else None)
            raise oom from None
        kernels = [c for c in attention or () if c.kernel]
        if kernels and "cannot be automatically partitioned" in str(e):
            raise _kernel_not_partitioned(kernels, what, name, devices) from e
        raised = keras_adapter.raising_layer(e)
        if raised is not None and raised is not recorder.model:
            layer = raised.name
            where = f" in layer {layer!r} ({type(raised).__name__})"
        else:
            layer = recorder.last_layer
            where = f" after layer {layer!r}" if layer else ""
        first = short_message(e)
        raise ShardvizError(
            f"The {_named(what)} of model {name!r} failed{where}: {type(e).__name__}: {first}",
            hint="Check the input shapes and dtypes against the model, and the /output rules "
            "of the layer named in the message.",
            layer=layer,
        ) from e
    return compiled


@contextlib.contextmanager
def _dumping(peak, options):
    """The compile's options, with a dump of its buffer assignment into a
    directory of its own when ``peak`` (a list) asks for one; the dump is
    read into ``peak`` when the compile ends (refused too) and removed."""
    if peak is None:
        yield options
        return
    with buffer_dump.dump_directory() as directory:
        if directory is None:
            peak.append("no temporary directory could be made for the compiler's dump")
            yield options
            return
        try:
            yield {**(options or {}), **buffer_dump.dump_options(directory)}
        finally:
            peak.append(buffer_dump.read_or_why(directory))


class _Cached:
    """One program's place in the compile cache: its entry if one is there,
    and the means to keep a compile's."""

    def __init__(self, store, key: str, lowered, mesh, watches) -> None:
        self.store, self.key, self.lowered, self.mesh = store, key, lowered, mesh
        self.watches = watches
        self.entry: dict | None = None
        self.decoded: tuple | None = None
        self.log: list = []

    @classmethod
    def find(cls, lowered, args, options, watches) -> _Cached | None:
        """The program's place, with its entry when the cache holds a valid
        one; None when the cache is off or the program is not cached (it
        runs here, or has no mesh)."""
        mesh = cached_compile.program_mesh(args)
        store = compile_cache.store() if mesh is not None else None
        if store is None:
            return None
        try:
            key = compile_cache.program_key(lowered, [mesh], options)
        except Exception:  # noqa: BLE001 - a program whose text cannot be keyed is compiled
            return None
        found = cls(store, key, lowered, mesh, watches)
        entry = store.get(key)
        count = len(watches.watches)
        if entry is not None and entry.get("watches") == count:
            decoded = cached_compile.read(entry, lowered, mesh)
            if decoded is not None and all(0 <= d[0] < count for d in decoded[0]):
                found.entry, found.decoded = entry, decoded
        return found

    def replay(self, what: str, name: str, attention) -> object:
        """The cached compile: its layouts handed to the watches again, or
        the compiler's refusal raised again."""
        entry = self.entry
        assert entry is not None
        if entry["kind"] == "refused":
            oom = out_of_memory(RuntimeError(entry["error"]), what, name)
            oom.flops = entry.get("flops")
            oom.attention = list(attention or ())
            oom.from_cache = True
            raise oom
        assert self.decoded is not None
        deliveries, compiled = self.decoded
        for number, sharding, described in deliveries:
            self.watches.watches[number].deliver(sharding, described)
        self.log, _ = xla_log.split_log(entry["log"])
        return compiled

    def buffer_peak(self):
        """The buffer assignment the entry keeps, or why there is none."""
        assert self.entry is not None
        return buffer_dump.from_entry(self.entry.get("buffer_peak"))

    def keep(self, compiled, delivered: list, lines: list, peak=None) -> None:
        """Write the compile's entry; a compile that cannot be written as data
        is simply not cached (never an error of the analysis)."""
        try:
            entry = cached_compile.entry_of_compile(
                compiled, self.lowered, self.mesh, self.watches.watches, delivered, lines,
                module_text(compiled))
        except Exception:  # noqa: BLE001 - NotRecordable, or a JAX object that moved
            return
        entry["buffer_peak"] = buffer_dump.to_entry(peak)
        self._put(entry)

    def keep_refusal(self, message: str, flops: float | None, peak=None) -> None:
        entry = cached_compile.entry_of_refusal(message, flops, self.watches.watches)
        entry["buffer_peak"] = buffer_dump.to_entry(peak)
        self._put(entry)

    def _put(self, entry: dict) -> None:
        try:
            self.store.put(self.key, entry)
        except OSError as e:
            compile_cache.unusable(self.store, e)
        except Exception:  # noqa: BLE001 - an entry that cannot be written is not kept
            return


def _kernel_not_partitioned(kernels: list, what: str, name: str, devices) -> ShardvizError:
    """Keras calls its splash-attention kernel outside a ``shard_map``, and
    XLA cannot split a kernel call over devices: on more than one chip the
    program does not compile, on the chips as here."""
    layers = sorted({c.layer for c in kernels if c.layer})
    named = f" ({', '.join(layers[:3])}{', ...' if len(layers) > 3 else ''})" if layers else ""
    return ShardvizError(
        f"The {_named(what)} of model {name!r} does not compile for {len(devices or ())} TPU "
        f"devices: Keras runs its splash-attention kernel for {len(kernels)} "
        f"call{'s' if len(kernels) != 1 else ''} of keras.ops.dot_product_attention{named}, "
        "outside a shard_map, and XLA cannot split a kernel call over devices. model.fit on "
        "the chips fails the same way.",
        hint="Call keras.config.disable_flash_attention() before building the model (Keras "
        "then runs XLA's attention, which keeps the scores), or plan for one chip.",
        layer=kernels[0].layer or None)


def _named(what: str) -> str:
    """``"forward"`` -> ``"forward pass"``; ``"train step"`` stays."""
    return what if what.endswith("step") else f"{what} pass"


_SIZE = r"\(?([\d.]+)\s*([KMGT]?)i?B?\)?"
_OOM = re.compile(rf"required[^(]*{_SIZE}\s*exceeds available HBM\s*{_SIZE}")
_OOM_USED = re.compile(rf"Used\s+{_SIZE}\s+of\s+{_SIZE}\s+hbm", re.IGNORECASE)
_OVER = re.compile(rf"Exceeded hbm capacity by\s+{_SIZE}", re.IGNORECASE)
"""The compiler's other refusal: "Ran out of memory in memory space hbm. Used
17.25G of 15.75G hbm. Exceeded hbm capacity by 1.5G." """


def _bytes(number: str, unit: str) -> int:
    return int(float(number) * 1024 ** " KMGT".index(unit or " "))


def out_of_memory(error: Exception, what: str, name: str) -> OutOfMemory:
    """The compiler's out-of-memory refusal ("RESOURCE_EXHAUSTED: Ran out of
    memory on HBM, the total memory required ... (47.68G) exceeds available
    HBM (15.75G)") as an :class:`OutOfMemory` with both figures.

    >>> e = RuntimeError("RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. "
    ...                  "the total memory required for HLO temporaries (47.68G) exceeds "
    ...                  "available HBM (15.75G).")
    >>> oom = out_of_memory(e, "forward", "m")
    >>> round(oom.needed / 2**30, 2), round(oom.available / 2**30, 2)
    (47.68, 15.75)
    >>> e = RuntimeError("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of "
    ...                  "memory in memory space hbm. Used 17.25G of 15.75G hbm. Exceeded "
    ...                  "hbm capacity by 1.50G.")
    >>> oom = out_of_memory(e, "train step", "m")
    >>> round(oom.needed / 2**30, 2), round(oom.available / 2**30, 2)
    (17.25, 15.75)
    >>> e = RuntimeError("RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. Used "
    ...                  "15.75G of 15.75G hbm. Exceeded hbm capacity by 90.0K.")
    >>> oom = out_of_memory(e, "train step", "m")
    >>> oom.needed - oom.available
    92160
    """
    text = short_message(error)
    m = _OOM.search(str(error)) or _OOM_USED.search(str(error))
    needed = _bytes(m.group(1), m.group(2)) if m else None
    available = _bytes(m.group(3), m.group(4)) if m else None
    over = _OVER.search(str(error))
    if over and available is not None:
        # "Used 15.75G of 15.75G hbm. Exceeded hbm capacity by 90.0K": the figures are
        # rounded to 10 MiB, the excess is not.
        needed = max(needed or 0, available + _bytes(over.group(1), over.group(2)))
    return OutOfMemory(
        f"The {_named(what)} of model {name!r} does not fit.",
        needed=needed, available=available, detail=text[:400],
        hint="Shard the largest variables over more devices, or use a target with more chips "
        "or more memory per chip.")
