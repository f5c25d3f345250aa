"""analyze: a model (or builder, or scan) and a plan in, a Report out.

>>> import keras, shardviz
>>> def build():
...     x = keras.Input((16,))
...     return keras.Sequential([x, keras.layers.Dense(32, name="d1")], name="seq")
>>> plan = shardviz.Plan({"model": 1}, {"d1/kernel": (None, "model")})
>>> report = shardviz.analyze(build, plan)
>>> report.variables[["path", "rule", "status"]].values.tolist()
[['seq/d1/kernel', None, 'replicated'], ['seq/d1/bias', None, 'replicated']]
>>> print(report.problems_of("unused-rule")[0].hint)
Keras matches a key against the whole path (re.fullmatch). Did you mean '.*d1/kernel'? It matches 'seq/d1/kernel'.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from . import checks
from .errors import BLOCKING, OutOfMemory, Problem, ShardvizError
from .format import plural
from .hub.presets import model_of
from .layout.assign import output_layouts, variable_layouts
from .layout.geometry import mesh_model
from .matching.match import compiled
from .model.inputs import TokenBatch, positive
from .model.scan import Scan
from .model.scan import scan as scan_model
from .plan import as_bytes, as_plan, check_processes
from .report import Report
from .report.settings import Settings
from .target import Target, parse_target
from .trace import Trace
from .trace import trace as run_trace
from .trace.compile import ranking_compiles

__all__ = ["BLOCKING", "analyze", "ranking_compiles"]


def analyze(model_or_builder: object, plan: object, inputs: object = None, *,
            settings: Settings | None = None,
            labels: object = None, mode: str | None = None, train_step: bool = False,
            optimizer: object = None,
            progress: Callable[[str], object] | bool | None = None,
            replicated_threshold: int | str = checks.DEFAULT_REPLICATED_THRESHOLD,
            abstract_mesh: bool | None = None, target: str | Target | None = None, slices: int = 1,
            dcn_axes: tuple[str, ...] | None = None, processes: int | None = None,
            dtype: str | None = None, lora_rank: int | None = None,
            lora_layers: list[str] | None = None, quantize: str | None = None,
            remat: str | list[str] | None = None, batch: int | None = None,
            seq: int | None = None) -> Report:
    """Analyse how ``plan`` lays out a model, and with ``inputs`` run it.

    Without inputs, only variables are analysed, and nothing is allocated.
    With inputs, the model's forward pass is also traced under ``jax.jit`` on
    the plan's mesh: every layer output's actual sharding, the collectives
    XLA inserts, and the memory per device are added to the report. If the
    pass cannot run (bad inputs, too few devices, a layer that raises), the
    report says why in ``report.trace_error`` and a ``trace-failed``
    problem, and still holds every variable layout.

    Args:
        model_or_builder: a built Keras model, a zero-argument builder, or a
            :class:`~shardviz.model.scan.Scan` from :func:`shardviz.scan` (reuse a
            scan to re-analyse quickly after an edit).
        plan: a :class:`~shardviz.Plan`, a Keras ``ModelParallel`` /
            ``DataParallel`` / ``LayoutMap``, or a plan dict.
        inputs: model inputs: arrays, shapes such as ``(8, 128)``,
            ``jax.ShapeDtypeStruct``s, or a list or dict of these.
        settings: every keyword below at once, as one
            :class:`~shardviz.report.settings.Settings` (``report.settings``
            of an earlier analysis, edited with ``.replace()``); keywords
            given beside it that differ from their defaults replace its values.
        labels: with ``train_step``: the labels ``model.fit`` would take as
            ``y``, in the same forms as ``inputs`` (a bare shape is float32).
            A compiled model whose loss needs labels must be given them. A
            model that was never compiled is trained with
            :data:`~shardviz.trace.train_step.DEFAULT_LOSS` against these, or
            against zeros of its outputs' shapes.
        mode: ``"abstract"`` (lower and compile with ShapeDtypeStructs only;
            the default for shapes, or for a builder) or ``"concrete"``
            (also execute, and keep the sharded arrays on the report; the
            default for arrays with a built model).
        train_step: also analyse the train step ``model.fit`` runs: the
            model's own ``train_step`` (its compiled loss, metrics and
            optimizer), jitted as Keras jits it (state donated). Memory,
            collectives and the fit verdict are then that program's.
        optimizer: the Keras optimizer for ``train_step``: an instance, or a
            name ``keras.optimizers.get`` knows, such as ``"sgd"`` (default:
            the model's own, else Adam).
        progress: called with the name of each stage of the forward pass
            (``"tracing"``, ``"compiling"``, ...), for progress displays;
            ``True`` prints each stage on stderr, ``None`` or ``False`` nothing.
        replicated_threshold: variables of at least this many bytes that
            stay fully replicated are reported: a number, or a size such as
            ``"1MB"``.
        abstract_mesh: force (True) or forbid (False) an abstract mesh; by
            default the mesh is concrete when enough devices exist.
        target: the hardware to plan for: ``"v5e:4x4"``, ``"v5p:2x2x4"``,
            ``"h100:8"``, or ``"cpu"`` (the default; the simulated devices).
            On a TPU target the pass is compiled by the TPU compiler for the
            topology's chips, and memory, fit and collectives are its own.
            On a GPU target the pass compiles for the simulated CPUs, and
            every figure from the GPU's published numbers is an estimate.
            See :func:`shardviz.targets`.
        slices: TPU slices joined by DCN (or GPU nodes joined by InfiniBand).
        dcn_axes: the mesh axis that spans the slices; by default the plan's
            batch axis.
        processes: spread the mesh's devices over this many processes (hosts),
            in JAX's order: the first ``size / processes`` mesh positions on
            process 0, and so on. ``report.hosts`` then shows what each host
            holds and feeds, and ``report.collectives.crosses_hosts`` which
            collectives leave a host. On a TPU target the hosts come from the
            topology, and ``processes`` may be left out.
        dtype, lora_rank, lora_layers, quantize, remat: build the model (from
            a builder) with these training settings: a dtype policy
            (``"bfloat16"``, ``"mixed_bfloat16"``, ...), LoRA of a rank (on
            ``lora_layers``, by default a keras-hub backbone's own choice or
            every Dense and EinsumDense layer), a quantization mode
            (``"int8"``, ``"int4"``, ``"float8"``) and rematerialisation
            (``"full"``, ``"activations"``, ``"larger_than:N"`` or layer
            names), each applied as Keras applies it
            (:class:`~shardviz.model.tuning.Tuning`).
        batch, seq: instead of ``inputs``, the global batch and a token
            model's sequence length: the model's own inputs (a dict for a
            keras-hub backbone) at ``batch`` rows, with each dim it leaves
            open after the batch set to ``seq``.
    """
    start = time.perf_counter()
    asked = (settings if settings is not None else Settings()).given(
        inputs=inputs, labels=labels, mode=mode, train_step=train_step, optimizer=optimizer,
        progress=progress, replicated_threshold=replicated_threshold,
        abstract_mesh=abstract_mesh, target=target, slices=slices, dcn_axes=dcn_axes,
        processes=processes, dtype=dtype, lora_rank=lora_rank, lora_layers=lora_layers,
        quantize=quantize, remat=remat, batch=batch, seq=seq)
    return _analyze(model_or_builder, plan, asked, start)


def _analyze(model_or_builder: object, plan: object, asked: Settings, start: float) -> Report:
    """:func:`analyze` with its settings as one value."""
    tuning = asked.tuning
    inputs, labels, mode, train_step = asked.inputs, asked.labels, asked.mode, asked.train_step
    optimizer, progress, abstract_mesh = asked.optimizer, asked.progress, asked.abstract_mesh
    target, slices, dcn_axes, processes = asked.target, asked.slices, asked.dcn_axes, asked.processes
    replicated_threshold, batch, seq = asked.replicated_threshold, asked.batch, asked.seq
    given_optimizer = optimizer
    optimizer = _optimizer(optimizer)
    stages = _progress(progress)
    replicated_threshold = as_bytes(replicated_threshold, "replicated_threshold")
    plan = as_plan(plan)
    processes = check_processes(processes, plan.mesh_size)
    if isinstance(model_or_builder, Scan):
        scan = model_or_builder
        if tuning.changes_model and tuning != scan.tuning:
            raise ShardvizError(
                f"This scan was built {scan.tuning.describe()}, not {tuning.describe()}.",
                hint="Scan the builder again with these settings (shardviz.scan(builder, "
                "tuning=...)), or pass the builder to analyze.")
    else:
        scan = scan_model(model_of(model_or_builder), inputs=inputs, tuning=tuning)
    if batch is not None or seq is not None:
        inputs = _token_inputs(scan, inputs, batch, seq)
        if train_step and labels is None and batch is not None:
            # A keras-hub causal LM's labels are its token ids: seq gives them.
            labels = TokenBatch(scan.model, seq).labels_at(positive(batch, "batch"))

    hardware = parse_target(target, slices)
    if dcn_axes is None:
        dcn_axes = (plan.batch_axis,) if plan.batch_axis else ()
    mesh = mesh_model(plan.mesh, abstract_mesh, hardware, tuple(dcn_axes))
    if processes is not None and mesh.devices is not None:
        hosts = len({getattr(d, "process_index", 0) for d in mesh.devices.flat})
        if hosts != processes:
            raise ShardvizError(
                f"The target {hardware.label} has {hosts} hosts, not {processes}: on a TPU "
                "target the hosts come from the topology.",
                hint="Leave processes out on a TPU target, or give its host count.")
        processes = None  # the topology's own hosts
    device_count = hardware.plan_devices()
    var_layouts = variable_layouts(scan, plan, mesh)
    out_layouts = output_layouts(scan, plan)
    problems = list(plan.check())
    problems += checks.variable_problems(plan, var_layouts, mesh, replicated_threshold)
    problems += checks.output_problems(plan, out_layouts)
    rule_problems, usage = checks.rule_problems(plan, scan, var_layouts, out_layouts)
    problems += rule_problems
    problems += checks.mesh_problems(plan, mesh, device_count)
    problems += checks.scan_problems(scan, var_layouts)
    traced, trace_error = None, None
    if inputs is not None:
        blocking = [p for p in problems if p.severity == "error" and p.kind in BLOCKING]
        if blocking:
            trace_error = ShardvizError(
                f"The forward pass was not run: Keras would refuse this plan "
                f"({plural(len(blocking), 'error')}; the first: {blocking[0].message})",
                hint=blocking[0].hint, path=blocking[0].path, rule=blocking[0].rule,
            )
        else:
            try:
                traced = run_trace(scan, plan, mesh, var_layouts, inputs, mode=mode,
                                   train_step=train_step, optimizer=optimizer, labels=labels,
                                   progress=stages)
            except OutOfMemory as e:
                trace_error = e
                problems.append(checks.out_of_memory_problem(e, hardware, var_layouts, mesh))
                problems += checks.attention_problems(e.attention, hardware, refused=True)
            except ShardvizError as e:
                trace_error = e
        if trace_error is not None and not isinstance(trace_error, OutOfMemory):
            problems.append(Problem(
                "error", "trace-failed", trace_error.message, hint=trace_error.hint,
                path=trace_error.path, rule=trace_error.rule, layer=trace_error.layer,
            ))
        elif traced is not None:
            problems += checks.activation_problems(plan, traced)
            problems += checks.attention_problems(traced.attention, hardware)
            problems += traced.problems
            problems = _drop_rules_that_place_slots(problems, traced)
    problems += checks.gradient_problems(scan, plan, traced)
    if not isinstance(trace_error, OutOfMemory):
        problems += checks.fit_problems(hardware, var_layouts, traced, mesh)
    return Report(
        plan=plan, scan=scan, mesh=mesh, variable_layouts=var_layouts,
        output_layouts=out_layouts, problems=problems, rule_usage=usage,
        device_count=device_count, seconds=time.perf_counter() - start,
        trace=traced, trace_error=trace_error, target=hardware,
        arguments=dict(inputs=inputs, labels=labels, mode=mode, train_step=train_step,
                       optimizer=given_optimizer,
                       replicated_threshold=replicated_threshold, abstract_mesh=abstract_mesh,
                       target=target, slices=slices, dcn_axes=dcn_axes, processes=processes),
        settings=asked, reanalyse=analyze,
    )


def _optimizer(optimizer: object) -> object:
    """``analyze``'s ``optimizer``: None, a Keras optimizer, or a name Keras
    knows (``"sgd"``, ``"adam"``), as an optimizer."""
    if optimizer is None:
        return None
    from ._adapters import keras as keras_adapter

    optimizers = keras_adapter.keras().optimizers
    if isinstance(optimizer, optimizers.Optimizer):
        return optimizer
    hint = "Pass a Keras optimizer such as keras.optimizers.SGD(0.01), or a name such as 'sgd'."
    if not isinstance(optimizer, str):
        raise ShardvizError(f"optimizer={optimizer!r:.60} is not a Keras optimizer.", hint=hint)
    try:
        return optimizers.get(optimizer)
    except ValueError:
        raise ShardvizError(f"optimizer={optimizer!r:.60} is not an optimizer Keras knows.",
                            hint=hint) from None


def _progress(progress: object) -> Callable[[str], object] | None:
    """``analyze``'s ``progress``: a callable, True (print each stage on
    stderr), or None or False (nothing)."""
    if progress is None or progress is False:
        return None
    if progress is True:

        return lambda stage: print(f"shardviz: {stage}…", file=sys.stderr)
    if not callable(progress):
        raise ShardvizError(f"progress={progress!r:.60} is not a callable.",
                            hint="Pass a function that takes the stage's name, True to print "
                            "each stage, or None.")
    return progress


def _drop_rules_that_place_slots(problems: list[Problem], traced: Trace) -> list[Problem]:
    """A rule that matches no model path but lays out an optimizer slot (the
    step counter, say) is used in a train step: drop its unused-rule warning."""
    slots = [o.path for o in traced.optimizer_variables if o.reference is None]
    if not slots:
        return problems

    def places_a_slot(p: Problem) -> bool:
        pattern = compiled(p.rule) if p.kind == "unused-rule" and p.rule else None
        return pattern is not None and any(pattern.fullmatch(s) for s in slots)

    return [p for p in problems if not places_a_slot(p)]


def _token_inputs(scan: Scan, inputs: object, batch: int | None, seq: int | None) -> object:
    """The model's own inputs at a global ``batch`` and sequence length ``seq``."""
    if inputs is not None:
        raise ShardvizError("Both inputs= and batch=/seq= were given.",
                            hint="Give inputs= (the shapes of one batch), or batch= and seq= "
                            "for a token model, not both.")
    if batch is None:
        raise ShardvizError(f"seq={seq!r:.40} was given without the global batch.",
                            hint="Give batch= too, e.g. batch=8, seq=2048.")
    return TokenBatch(scan.model, seq).at(positive(batch, "batch"))
