"""The Report class: everything shardviz found about one model under one plan.

It holds what :func:`~shardviz.analyze` made (the plan, the scan, the mesh,
the per-variable layouts, the problems, the trace) and offers it as
DataFrames (built in :mod:`.frames`, cached here), totals, accessors, lookups
by path (:mod:`.lookups`), pictures (:mod:`.display`) and explanations
(:mod:`.explaining`); it shows itself in a notebook and a terminal.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..checks import memory_parts, replicated_large
from ..errors import SEVERITIES, Problem, ShardvizError
from ..format import plural
from ..layout.assign import OutputLayout, VariableLayout
from ..layout.geometry import MeshModel
from ..model.scan import Scan
from ..model.tuning import Tuning
from ..plan import Plan, as_bytes
from ..target import Target, checked_against, parse_target
from . import display, explaining, frames, lookups, op_frames, peak_frames
from .mesh_view import MeshView
from .settings import Settings
from .totals import Totals

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult

    from ..trace import Trace


class Report:
    """The analysis of one model under one plan. Build it with
    :func:`shardviz.analyze`."""

    def __init__(self, *, plan: Plan, scan: Scan, mesh: MeshModel,
                 variable_layouts: list[VariableLayout], output_layouts: list[OutputLayout],
                 problems: list[Problem], rule_usage: list[dict], device_count: int,
                 seconds: float = 0.0, trace: Trace | None = None,
                 trace_error: ShardvizError | None = None, target: Target | None = None,
                 arguments: dict | None = None, settings: Settings | None = None,
                 reanalyse: Callable[..., Report] | None = None) -> None:
        self.plan = plan
        self.scan = scan
        self.mesh = mesh
        self.variable_layouts = variable_layouts
        self.output_layouts = output_layouts
        self.problem_list = sorted(problems, key=lambda p: SEVERITIES.index(p.severity))
        self.rule_usage = rule_usage
        self.device_count = device_count
        self.seconds = seconds
        self.trace = trace
        """The :class:`~shardviz.trace.Trace` of the forward pass, or None."""
        self.trace_error = trace_error
        """Why the forward pass could not run (a ShardvizError), or None."""
        self.target: Target = target if target is not None else parse_target("cpu")
        """The hardware planned for (:class:`~shardviz.target.Target`)."""
        self.settings: Settings = settings if settings is not None else Settings()
        """What :func:`~shardviz.analyze` was asked for besides the model and
        the plan (:class:`~shardviz.report.settings.Settings`), as given: what
        a re-analysis of another plan or batch passes on, edited."""
        self.arguments: dict = dict(arguments or {})
        """The settings as the analysis resolved them (the inputs ``batch=``
        and ``seq=`` stand for, the threshold in bytes, the mesh axes across
        slices, the processes the target does not decide): what was run."""
        self._reanalyse = reanalyse
        """:func:`~shardviz.analyze` itself, handed in by it, for why() to
        analyse other plans like this one (the Report does not import it)."""

    @functools.cached_property
    def _by_path(self) -> dict[str, VariableLayout]:
        return {vl.info.path: vl for vl in self.variable_layouts}

    # ------------------------------------------------------------ frames
    # Built by frames.py, one function per frame; cached here, once each.
    variables = functools.cached_property(frames.variables)
    outputs = functools.cached_property(frames.outputs)
    rules = functools.cached_property(frames.rules)
    problems = functools.cached_property(frames.problems)
    devices = functools.cached_property(frames.devices)
    hosts = functools.cached_property(frames.hosts)
    activations = functools.cached_property(frames.activations)
    collectives = functools.cached_property(frames.collectives)
    memory = functools.cached_property(frames.memory)
    optimizer_variables = functools.cached_property(frames.optimizer_variables)
    estimate = functools.cached_property(frames.estimate)
    peak = functools.cached_property(peak_frames.peak)
    op_times = functools.cached_property(op_frames.op_times)
    _timed_program = functools.cached_property(op_frames.timed_program)
    timeline = functools.cached_property(peak_frames.timeline_frame)
    peak_note = property(peak_frames.peak_note)
    peak_source = property(peak_frames.peak_source)
    _batch_rows_by_position = frames.batch_rows_by_position
    _crosses_hosts = frames.crosses_hosts

    def ranks_of(self, key: str) -> list[int]:
        """The ranks of the variables and layer outputs ``key`` fullmatches,
        as Keras matches it (an invalid regex matches nothing). Cached per
        key on the scan."""
        memo = self.scan.rank_memo
        found = memo.get(key)
        if found is None:
            ranks: set[int] = set()
            for matcher, shapes in ((self.scan.variable_matcher,
                                     [v.shape for v in self.scan.variables]),
                                    (self.scan.output_matcher,
                                     [o.shapes[0] if o.shapes else None
                                      for o in self.scan.outputs])):
                hits = matcher.hits(key)
                if isinstance(hits, str):
                    ranks = set()
                    break
                ranks.update(len(s) for i in hits if (s := shapes[i]) is not None)
            found = memo[key] = sorted(ranks)
        return list(found)

    @functools.cached_property
    def process_of_position(self) -> tuple[int, ...]:
        """Per mesh position (flat), the process (host) that owns the device:
        contiguous groups in JAX's order with ``processes=N``, the topology's
        hosts on a TPU target, else 0 everywhere."""
        n = self.processes
        if n is not None:
            per = self.mesh.size // n
            return tuple(p // per for p in range(self.mesh.size))
        if self.mesh.devices is not None:
            return tuple(int(getattr(d, "process_index", 0) or 0) for d in self.mesh.devices.flat)
        return (0,) * self.mesh.size

    @property
    def processes(self) -> int | None:
        """The process count given to :func:`~shardviz.analyze`, or None."""
        return self.arguments.get("processes")

    @property
    def host_count(self) -> int:
        return max(self.process_of_position) + 1

    @property
    def fits(self) -> bool | None:
        """The one verdict: False when the compiler refused the program for
        memory or a chip needs more than it may use, True when every chip
        has room, None on the simulated CPU. Every view reads this (through
        ``report.memory.fits``)."""
        fits = self.memory["fits"]
        if not len(fits) or fits.isna().all():
            return None
        return bool(fits.all())

    @functools.cached_property
    def memory_parts(self) -> dict[str, int]:
        """Bytes per device by what holds them, in drawing order; they add
        up to ``report.memory.total_bytes``, the figure the verdict reads:
        ``variables`` (every model variable under the plan's layouts, read
        by the program or not), and after a forward pass ``optimizer
        state`` (train step), ``inputs`` (every other argument: the batch,
        labels and metric state, with any padding XLA gives the arguments),
        ``outputs`` (XLA's output bytes less those aliased to arguments) and
        ``temporaries`` (XLA's temp bytes, which hold the layer outputs while
        they are live). Parts that are zero are left out, except variables.
        """
        return memory_parts(self.variable_bytes_per_device, self.trace)

    @property
    def pass_name(self) -> str | None:
        """``"abstract forward pass"``, ``"concrete train step"``, ..., or
        None when nothing was traced."""
        if self.trace is None:
            return None
        return f"{self.trace.mode} {'train step' if self.trace.train_step else 'forward pass'}"

    @functools.cached_property
    def mesh_view(self) -> MeshView:
        """The mesh as renderers and widgets read it (:class:`MeshView`)."""
        m = self.mesh
        return MeshView(tuple(m.axis_names), tuple(m.shape), m.size, m.abstract,
                        dict(m.coords), tuple(m.slice_of_position))

    @property
    def rule_paths(self) -> tuple[str, ...]:
        """Every path a rule can match: variable paths, then output paths."""
        return self.scan.paths

    @property
    def step_setup(self) -> Any:
        """With ``train_step=True``: the loss, optimizer and labels the train
        step was compiled with (a ``StepSetup``, with ``describe()``); else None."""
        return self.trace.step_setup if self.trace is not None else None

    @property
    def pass_mode(self) -> str | None:
        """``"abstract"`` or ``"concrete"``: how the pass was traced; None untraced."""
        return self.trace.mode if self.trace is not None else None

    @property
    def hlo_text(self) -> str:
        """The compiled program's HLO text ("" untraced)."""
        return self.trace.hlo_text if self.trace is not None else ""

    @property
    def xla_memory(self) -> dict | None:
        """XLA's own memory and cost analysis of the compiled program
        (``argument_bytes``, ``output_bytes``, ``temp_bytes``, ``alias_bytes``,
        ``unread_bytes``, ``flops``, ...), a copy; None untraced."""
        return dict(self.trace.memory) if self.trace is not None else None

    @property
    def timings(self) -> dict[str, float]:
        """Seconds each stage of the pass took (``forward_compile``, ...), a copy."""
        return dict(self.trace.seconds) if self.trace is not None else {}

    @property
    def from_cache(self) -> bool:
        """Whether the compiler's figures (memory, collectives, layouts, or
        its refusal) were read from shardviz's compile cache: the same
        program, compiled by the same compiler with the same options, gave
        them before (``shardviz.trace.compile_cache``)."""
        if self.trace is not None and any(k.endswith("_cache") for k in self.trace.seconds):
            return True
        return bool(getattr(self.trace_error, "from_cache", False))

    @property
    def model_name(self) -> str:
        return self.scan.model_name

    @property
    def notes(self) -> tuple[str, ...]:
        """What the scan noticed about the model (variables that carry their
        own layout, output paths that could not be found, ...)."""
        return tuple(self.scan.notes)

    @property
    def estimate_checked(self) -> str:
        """How far the step-time estimate may be from a real step, and why:
        what real chips of the target's kind measured against it, or that
        none did (:data:`shardviz.target.MEASURED_STEPS`)."""

        program = "train step" if self.arguments.get("train_step") else "forward pass"
        checks = checked_against(self.target.hardware.name, program)
        timing = self._timed_program
        if timing is not None:
            model = timing.model
            measured = f" Measured {'; '.join(checks)}." if checks else ""
            carried = "" if model.hardware == self.target.hardware.name else (
                f" No chip of this kind was profiled: {model.hardware}'s efficiencies are "
                "carried over, and the step is an estimate.")
            return (f"The expected step sums the compiled program's operations, each timed "
                    f"with efficiencies fitted to profiles of {len(model.fitted_on)} steps on "
                    f"one {model.hardware} chip; on {len(model.held_out)} steps of models the "
                    f"fit never saw it was within {model.accuracy:.0%} of the chip. Keras's "
                    f"host work per step ({model.host_step_seconds * 1e3:.1f} ms on the chip's "
                    "host) is a floor. Collectives are timed from published link bandwidths "
                    f"(no profile of more than one chip).{carried}{measured}")
        unknown = ("It does not model kernel efficiency, Keras's per-step host work, nor "
                   "communication overlapping compute.")
        if not checks:
            return ("Not checked against a real chip of this kind: a roofline from published "
                    f"peak figures. {unknown}")
        measured = "; ".join(checks)
        return f"Measured {measured}. {unknown}"

    @property
    def flops(self) -> float | None:
        """Flops per device of the compiled pass, when XLA reports them."""
        return self.trace.memory.get("flops") if self.trace else None

    @property
    def values(self) -> dict:
        """Concrete mode: variable path to its real sharded ``jax.Array``.

        Pass one to ``jax.debug.visualize_array_sharding`` to see it as JAX does.
        """
        if self.trace is None or self.trace.variables is None:
            raise ShardvizError(
                "This report holds no arrays: the forward pass was not run in concrete mode.",
                hint="Call shardviz.analyze(model, plan, inputs=arrays, mode='concrete').",
            )
        return self.trace.variables

    @property
    def output_values(self) -> Any:
        """Concrete mode: the model's sharded outputs (``jax.Array``s)."""
        if self.trace is None or self.trace.variables is None:
            return self.values  # raises, saying why
        return self.trace.outputs

    # ----------------------------------------------------------- numbers
    @property
    def variable_bytes_per_device(self) -> int:
        return sum(vl.geometry.bytes_per_device for vl in self.variable_layouts)

    @property
    def variable_bytes(self) -> int:
        return sum(vl.geometry.bytes for vl in self.variable_layouts)

    @functools.cached_property
    def totals(self) -> Totals:
        """The report's totals (:class:`Totals`), computed once."""
        mem = self.memory
        compiled = self.trace is not None
        needed = mem["total_bytes"].dropna() if len(mem) else mem["total_bytes"]
        peak = int(needed.max()) if len(needed) else self.variable_bytes_per_device
        collectives = self.collectives if compiled else None
        est = self.estimate
        parts = est[est["part"].isin(["compute", "memory", "collectives"])] if len(est) else est
        return Totals(
            bytes_per_device=peak,
            variable_bytes_per_device=self.variable_bytes_per_device,
            compiled=compiled,
            collectives=len(collectives) if collectives is not None else None,
            collective_bytes=(int(collectives["bytes_per_device"].sum())
                              if collectives is not None and len(collectives) else
                              0 if collectives is not None else None),
            step_seconds=(self._timed_program.seconds if self._timed_program is not None
                          else float(parts["seconds"].max()) if len(parts) else None),
            fits=self.fits)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problem_list if p.severity == "error"]

    @property
    def ok(self) -> bool:
        """True when Keras would accept the plan for this model."""
        return not self.errors

    def replicated_large(self, threshold: int | str) -> list[Problem]:
        """``replicated-large`` problems at another threshold than the one the
        report was made with: bytes, or a size such as ``"1MB"`` or ``"2GiB"``,
        as ``analyze(replicated_threshold=...)`` takes it."""
        threshold = as_bytes(threshold, "replicated_large's threshold")
        return replicated_large(self.variable_layouts, self.plan, self.mesh, threshold)

    def problems_of(self, kind: str) -> list[Problem]:
        return [p for p in self.problem_list if p.kind == kind]

    # ------------------------------------------------------------ lookups
    @property
    def paths(self) -> list[str]:
        return list(self._by_path)

    @functools.cached_property
    def _outputs_by_path(self) -> dict[str, OutputLayout]:
        return {ol.info.path: ol for ol in self.output_layouts}

    variable = lookups.variable
    output = lookups.output
    activation = lookups.activation
    _check_path = lookups.check_path
    geometry = lookups.geometry
    shards = lookups.shards
    indices = lookups.indices
    _refuse_uneven = lookups.refuse_uneven
    _unknown_path = lookups.unknown_path

    # ----------------------------------------------------------- pictures
    show = display.show
    text = display.text
    show_mesh = display.show_mesh
    show_memory = display.show_memory
    show_flow = display.show_flow
    show_grid = display.show_grid
    pictures = display.pictures
    show_peak = display.show_peak
    show_times = display.show_times

    # ------------------------------------------------------- explanations
    why = explaining.why
    explanations = explaining.explanations
    explained = property(explaining.explained)
    explain = explaining.explain

    # ------------------------------------------------------------ display
    @property
    def tuning(self) -> Tuning:
        """The training settings the model was built with (dtype policy, LoRA,
        quantization, remat): ``analyze``'s ``dtype=``, ``lora_rank=``, ..."""
        return self.scan.tuning

    def summary(self) -> dict:
        counts = {s: 0 for s in SEVERITIES}
        for p in self.problem_list:
            counts[p.severity] += 1
        statuses = [vl.status for vl in self.variable_layouts]
        return {
            "model": self.model_name,
            "mesh": self.plan.mesh_dict,
            "devices": self.mesh.size,
            "abstract_mesh": self.mesh.abstract,
            "target": self.target.label,
            "tuning": self.tuning.describe(),
            "variables": len(self.variable_layouts),
            "sharded": statuses.count("sharded"),
            "replicated": statuses.count("replicated"),
            "failing": statuses.count("error"),
            "params": self.scan.param_count,
            "variable_bytes": self.variable_bytes,
            "variable_bytes_per_device": self.variable_bytes_per_device,
            "problems": counts,
            "traced": self.trace.mode if self.trace else None,
            "collectives": self.totals.collectives,
            "collective_bytes": self.totals.collective_bytes,
            "fits": self.totals.fits,
            "from_cache": self.from_cache,
        }

    def _repr_html_(self) -> str:
        from ..render.html import report_html

        return report_html(self)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from ..render.text import report_renderables

        yield from report_renderables(self, width=options.max_width)

    def __str__(self) -> str:
        from ..render.text import report_text

        return report_text(self)

    def __repr__(self) -> str:
        s = self.summary()
        return (
            f"<Report {s['model']!r} on {s['mesh']}: {plural(s['variables'], 'variable')} "
            f"({s['sharded']} sharded, {s['replicated']} replicated, {s['failing']} failing), "
            f"{plural(s['problems']['error'], 'error')}, "
            f"{plural(s['problems']['warning'], 'warning')}>"
        )
