""":func:`fit`: the largest global batch that fits a slice, or the smallest
slice that fits a batch, for the train step ``model.fit`` runs, each answer
the compiler's own.

For the largest batch, :func:`~shardviz.planner.batch_search.search_largest_batch`
places a line with the compiler's cheap refusals and compiles the batch the
line puts at the capacity and the next one: 4 compiles, 2 of them fitting,
where the bytes grow linearly in the batch. For the smallest slice, the
variables' exact bytes per chip (no compile) rule out the slices too small to
hold them; after each refusal the search jumps to the first slice with enough
chips to hold, split evenly, what the refused one needed, and the slice below
the answer is compiled to confirm it is refused. Every compile is listed
in the answer (:attr:`FitAnswer.compiles`).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable, Sequence

import pandas as pd

from ..analysis import analyze
from ..errors import OutOfMemory, ShardvizError
from ..format import human_bytes
from ..hub.presets import model_of
from ..model.scan import Scan
from ..model.scan import scan as scan_model
from ..model.tuning import Tuning
from ..plan import Plan, as_plan
from ..report import Report, Settings
from ..strategy.rules import rules_for
from ..strategy.specs import fully_sharded_specs
from ..strategy.strategies import candidate_plans
from ..target import family_slices, parse_target
from .batch_inputs import BatchInputs, positive
from .batch_search import MAX_COMPILES, OutOfCompiles, Point, search_largest_batch
from .fit_answer import ANSWER_COLUMNS, COMPILE_COLUMNS, FitAnswer


def fit(model_or_builder: object, plan: Plan | Callable[[int], Plan] | None = None, *,
        settings: Settings | None = None, target: str | None = None,
        batch: int | None = None, seq: int | None = None,
        inputs: object = None, labels: object = None, remat: object = None,
        dtype: str | None = None, lora_rank: int | None = None,
        lora_layers: Sequence[str] | None = None, quantize: str | None = None,
        optimizer: object = None, max_compiles: int = MAX_COMPILES, precision: float = 0.0,
        progress: Callable[[str], object] | bool | None = None) -> FitAnswer:
    """Will this fine-tune fit, with what batch, on how many chips?

    With a slice as ``target`` (``"v5e:2x4"``), the largest global batch
    whose train step fits, for each remat mode asked for. With a chip family
    (``"v5e"``) and a ``batch``, the smallest slice sold that fits it.

    Args:
        model_or_builder: a builder (the settings below change how it is
            built), a built model, or a :class:`~shardviz.Scan`.
        plan: the layout: a Plan for the slice; for the smallest slice, a
            function of the device count that returns one, or a Plan whose
            batch axis grows to fill each slice. By default every variable
            is split over one ``batch`` axis of all devices (fully sharded); on a
            slice with more devices than the batch divides over, a ``model``
            axis takes the rest (tensor parallel).
        settings: the analysis settings every compile carries
            (:class:`~shardviz.report.settings.Settings`, such as a report's
            ``report.settings``); the keywords below that differ from their
            defaults replace its values. Each compile is a train step on the
            slice tried, at the batch tried, with no stage lines.
        target: a slice (largest batch) or a chip family (smallest slice).
        batch: the global batch (for the smallest slice).
        seq: the sequence length of a token model: each input dim the model
            leaves open after the batch is ``seq``.
        inputs, labels: shapes (or arrays) of one batch, for models that are
            not token models; their first dim is replaced by each batch tried.
        remat: a remat mode, or a list of modes to compare (``[None,
            "full"]``); a list of layer names as one mode is a tuple inside
            the list.
        dtype, lora_rank, lora_layers, quantize, optimizer: as in
            :func:`~shardviz.analyze`.
        max_compiles: the most compiles for one remat mode.
        precision: stop the largest batch's search when the batch that fits
            and the one refused are this fraction of the batch apart (0.01:
            within 1%); 0 (the default) finds the exact batch.
        progress: a line per compile on stderr (True), to a callable, or
            none (None, False).
    """
    if isinstance(precision, bool) or not isinstance(precision, (int, float)) or not (
            0 <= precision < 1):
        raise ShardvizError(f"precision={precision!r:.40} is not a fraction of the batch.",
                            hint="Give 0 (the exact batch) or a fraction such as 0.01 (1%).")
    if isinstance(max_compiles, bool) or not isinstance(max_compiles, int) or max_compiles < 2:
        raise ShardvizError(f"max_compiles={max_compiles!r:.40} leaves no room for a search.",
                            hint="Give at least 2 (the default is 12).")
    asked = (settings if settings is not None else Settings()).given(
        target=target, seq=seq, inputs=inputs, labels=labels, dtype=dtype,
        lora_rank=lora_rank, lora_layers=lora_layers, quantize=quantize, optimizer=optimizer)
    seq, inputs, labels = asked.seq, asked.inputs, asked.labels
    # remat= here may list modes to compare; the settings' remat is one mode (a list in it
    # names layers, as analyze reads it).
    modes = _modes(remat) if remat is not None else [
        tuple(asked.remat) if isinstance(asked.remat, list) else asked.remat]
    say = _say(progress)
    family = _family_or_slice(asked.target)
    target = str(asked.target)  # a text: _family_or_slice refuses anything else
    if batch is None and family is not None:  # on a slice, the batch is what fit finds
        batch = asked.batch
    if family is not None and batch is None:
        raise ShardvizError(f"The smallest slice of {target} for which batch?",
                            hint="Give batch=, e.g. fit(build, target='v5e', batch=32, "
                            "seq=2048); or a slice such as 'v5e:2x4' for the largest batch.")
    if family is not None:
        batch = positive(batch, "batch")
    elif batch is not None:
        raise ShardvizError(
            f"batch={batch!r:.20} with the slice {target!r}: on a slice, fit finds the largest "
            "batch itself.",
            hint=f"Leave batch out to find it, or give the chip family (target="
            f"{str(target).partition(':')[0]!r}) to find the smallest slice for this batch.")
    # What every compile of one remat mode carries; the asker sets the rest.
    each = [asked.replace(remat=m, progress=None, batch=None, seq=None, inputs=None,
                          labels=None, train_step=True) for m in modes]
    tunings = [s.tuning for s in each]
    rows: list[dict] = []
    compiles: list[list] = []
    notes: list[str] = []
    best: Report | None = None
    best_row: dict = {}
    for mode, tuning, carried in zip(modes, tunings, each):
        scan = _scan(model_or_builder, tuning)
        shapes = BatchInputs(scan, seq, inputs, labels)
        if mode is modes[0] and not any(v.trainable for v in scan.variables):
            notes.append("the model has no trainable variables: its train step updates "
                         "nothing (every layer is frozen)")
        ask = _Asker(scan, shapes, carried, mode, compiles, notes, say)
        if family is None:
            target = parse_target(target).label  # v5litepod-1 is v5e:1x1
            devices = parse_target(target, carried.slices).plan_devices()
            this = (as_plan(plan) if plan is not None and not callable(plan)
                    else _plan_for(plan, scan, devices))
            row, report = _largest_batch(ask, this, target, max_compiles, precision)
        else:
            row, report = _smallest_slice(ask, plan, family, positive(batch, "batch"),
                                          max_compiles, notes)
        rows.append(row)
        if report is not None and (best is None or row.get("batch") is not None):
            # Of the answers that fit, the fastest per sample where times are expected.
            if best is None or _faster(row, best_row):
                best, best_row = report, row
    return FitAnswer("largest batch" if family is None else "smallest slice",
                     pd.DataFrame(rows, columns=ANSWER_COLUMNS),
                     pd.DataFrame(compiles, columns=COMPILE_COLUMNS), best,
                     dataclasses.replace(tunings[0], remat=None), notes)


# ------------------------------------------------------------------ the searches
def _largest_batch(ask: _Asker, plan: Plan, target: str, max_compiles: int,
                   precision: float) -> tuple[dict, Report | None]:
    """The largest multiple of the batch axis's size that fits, and the next
    one refused (:func:`search_largest_batch`, each point a compile)."""
    unit = plan.mesh_dict.get(plan.batch_axis, 1)
    seen: dict[int, Report] = {}
    mode = _mode_text(ask.mode) or "no remat"

    def verdict(b: int) -> Point:
        seen[b] = ask(plan, target, b)
        return Point(b, bool(seen[b].totals.fits), checked_bytes(seen[b]),
                     state_bytes(seen[b]))

    capacity = int(parse_target(target).capacity_bytes() or 0)
    found = search_largest_batch(verdict, unit, capacity, max_compiles, precision)
    ask.notes.extend(f"{mode}: {note}" for note in found.notes)
    if found.fits is None:
        refused = seen.get(found.refused) if found.refused is not None else None
        return ask.row(plan, target, None, f"batch {found.refused}",
                       needed_of(refused) if refused is not None else None,
                       len(seen)), refused
    report = seen[found.fits]
    if found.refused is None:
        return ask.row(plan, target, report, None, None, len(seen)), report
    return ask.row(plan, target, report, f"batch {found.refused}",
                   needed_of(seen[found.refused]), len(seen)), report


def needed_of(report: Report) -> int | None:
    """The bytes a chip needs by the compiler, or None when it refused the
    program without saying how many."""
    return report.totals.bytes_per_device if _figured(report) else None


def _figured(report: Report) -> bool:
    """Whether a report's bytes are the compiler's: a refusal without the
    figure in its message holds only the variables, no point of the line."""
    error = report.trace_error
    return not (isinstance(error, OutOfMemory) and not error.needed)


def state_bytes(report: Report) -> int | None:
    """The bytes per chip of a report's variables and optimizer state (the
    bytes that do not grow with the batch), or None untraced."""
    if not len(report.memory):
        return None
    row = report.memory.iloc[0]
    parts = [row.get("variable_bytes"), row.get("optimizer_bytes")]
    return int(sum(p for p in parts if p is not None and p == p))


def checked_bytes(report: Report) -> int | None:
    """The bytes per chip the compiler checks against the chip: for a
    program it took on a target whose compiler decides (the TPU compiler),
    its peak (what is live at once); for one it refused, what it said it
    needed; elsewhere the sum of the program's buffers. None where unknown."""
    if not report.totals.fits:
        return needed_of(report)
    if report.target.compiler_decides_fit:
        peak = _peak(report)
        if peak is not None:
            return peak
    return report.totals.bytes_per_device


def _smallest_slice(ask: _Asker, plan: object, family: list[str], batch: int,
                    max_compiles: int, notes: list[str]) -> tuple[dict, Report | None]:
    """The smallest slice that fits ``batch``, and the next smaller one's
    refusal. Slices whose variables alone overflow a chip are ruled out with
    no compile; after a refusal, the search jumps to the first slice with
    enough chips to hold what the refused one needed, split evenly, and
    confirms that the slice below its answer is refused."""
    chip = family[0].partition(":")[0]
    candidates: list[tuple[str, Plan, int]] = []
    bound: tuple[str, int] | None = None  # the largest slice ruled out without a compile
    for target in family:
        devices = parse_target(target, ask.settings.slices).plan_devices()
        this = _plan_for(plan, ask.scan, devices, batch)
        unit = this.mesh_dict.get(this.batch_axis, 1)
        if batch % unit:
            notes.append(f"{target} skipped: batch {batch} does not divide over its "
                         f"{unit} {this.batch_axis!r} devices")
            continue
        bare = analyze(ask.scan, this, settings=ask.settings.replace(train_step=False,
                                                                     target=target))
        capacity = bare.target.capacity_bytes() or 0
        if bare.totals.variable_bytes_per_device > capacity:
            ask.record(this, target, batch, bare.totals.variable_bytes_per_device, capacity,
                       False, False, 0.0)
            bound = (target, bare.totals.variable_bytes_per_device)
            continue
        candidates.append((target, this, devices))
    seen: dict[int, Report] = {}

    def at(i: int) -> Report:
        if i not in seen:
            if len(seen) >= max_compiles:
                raise OutOfCompiles
            seen[i] = ask(candidates[i][1], candidates[i][0], batch)
        return seen[i]

    def answer(i: int) -> tuple[dict, Report | None]:
        below = (candidates[i - 1][0], needed_of(seen[i - 1])) if i else bound
        nxt, nxt_bytes = below or (None, None)
        return ask.row(candidates[i][1], candidates[i][0], seen[i], nxt, nxt_bytes,
                       len(seen)), seen[i]

    try:
        i = 0
        while i < len(candidates):
            if at(i).totals.fits:
                while i and (i - 1 not in seen or seen[i - 1].totals.fits):
                    if at(i - 1).totals.fits:  # the line jumped too far
                        i -= 1
                    else:
                        break
                return answer(i)
            i = _next_slice(candidates, seen, i, ask.capacity(seen[i]))
    except OutOfCompiles:
        notes.append(f"stopped after {max_compiles} compiles (max_compiles)")
        fitting = sorted(k for k, r in seen.items() if r.totals.fits)
        if fitting:
            return answer(fitting[0])
    return ask.row(None, chip, None, f"no {chip} slice sold fits batch {batch}", None,
                   len(seen)), None


def _next_slice(candidates: list[tuple[str, Plan, int]], seen: dict[int, Report], i: int,
                capacity: int) -> int:
    """The next slice to compile after slice ``i`` was refused: the first one
    with enough chips to hold, split evenly, what slice ``i`` needed. A
    chip's share shrinks at best in proportion to the chips, so the slices
    between are refused too (the slice below an answer is compiled to
    confirm it). A refusal without a figure steps to the next slice."""
    if not _figured(seen[i]):
        return i + 1
    chips = candidates[i][2] * seen[i].totals.bytes_per_device / max(capacity, 1)
    for k in range(i + 1, len(candidates)):
        if candidates[k][2] >= chips:
            return k
    # None holds it split evenly: the largest is tried once, and after it, nothing.
    return max(len(candidates) - 1, i + 1)


# ------------------------------------------------------------------ one compile
class _Asker:
    """Compiles the train step for a plan, target and batch, and records it."""

    def __init__(self, scan: Scan, shapes: BatchInputs, settings: Settings, mode: object,
                 compiles: list, notes: list[str], say: Callable[[str], object] | None) -> None:
        self.scan, self.shapes, self.settings, self.mode = scan, shapes, settings, mode
        self.compiles, self.notes, self.say = compiles, notes, say

    def __call__(self, plan: Plan, target: str, batch: int) -> Report:
        start = time.perf_counter()
        inputs, labels = self.shapes.at(batch)
        report = analyze(self.scan, plan, settings=self.settings.replace(
            inputs=inputs, labels=labels, target=target))
        if report.trace_error is not None and report.totals.fits is not False:
            raise ShardvizError(
                f"The train step at batch {batch} on {target} failed: "
                f"{report.trace_error.message}", hint=report.trace_error.hint)
        seconds = time.perf_counter() - start
        self.record(plan, target, batch, needed_of(report), self.capacity(report),
                    bool(report.totals.fits), True, seconds, report.from_cache)
        return report

    def capacity(self, report: Report) -> int:
        return int(report.target.capacity_bytes() or 0)

    def record(self, plan: Plan, target: str, batch: int, needed: int | None, capacity: int,
               fits: bool, compiled: bool, seconds: float, from_cache: bool = False) -> None:
        self.compiles.append([_mode_text(self.mode), target, _mesh_text(plan), batch, needed,
                              capacity, fits, compiled, round(seconds, 2), from_cache])
        if self.say is not None:
            verdict = "fits" if fits else "does not fit"
            how = f"compile {sum(c[7] for c in self.compiles)}" if compiled else "no compile"
            how += ", read from the compile cache" if from_cache else ""
            self.say(f"fit: batch {batch} on {target}, {_mode_text(self.mode) or 'no remat'}: "
                     f"{human_bytes(needed) if needed else 'unknown bytes'} of "
                     f"{human_bytes(capacity)}, {verdict} ({how}, "
                     f"{seconds:.1f} s)")

    def row(self, plan: Plan | None, target: str, report: Report | None, nxt: str | None,
            nxt_bytes: int | None, compiles: int) -> dict:
        """One answer: ``report`` fits (None: nothing does) and ``nxt``, the
        next step up (or down), was refused needing ``nxt_bytes``."""
        batch = self.shapes.batch_of(report) if report is not None else None
        return {"remat": _mode_text(self.mode), "target": target,
                "mesh": _mesh_text(plan) if plan is not None else None,
                "batch": batch,
                "bytes_per_device": report.totals.bytes_per_device if report else None,
                "capacity_bytes": self.capacity(report) if report else None,
                "next": nxt, "next_bytes_per_device": nxt_bytes, "compiles": compiles,
                "peak_bytes_per_device": _peak(report),
                **_speed(report, batch, self.shapes.seq)}


def _faster(row: dict, than: dict) -> bool:
    """Whether answer ``row`` trains more samples per second than ``than``;
    where either has no expected step, the later answer (as before times)."""
    if not than or than.get("batch") is None:
        return True
    if row.get("batch") is None:
        return False
    a, b = row.get("step_seconds"), than.get("step_seconds")
    if not a or not b:
        return True
    return row["batch"] / a > than["batch"] / b


def _speed(report: Report | None, batch: int | None, seq: int | None) -> dict:
    """The expected step at an answer, its tokens per second and the
    chip-hours of a million tokens (None where not known)."""
    out: dict = {"step_seconds": None, "tokens_per_second": None,
                 "chip_hours_per_million_tokens": None}
    if report is None or not batch or report.trace is None:
        return out
    est = report.estimate
    expected = [float(s) for p, s in zip(est["part"], est["seconds"]) if p == "expected"]
    if not expected:
        return out
    step = expected[0]
    out["step_seconds"] = step
    if seq and step > 0:
        tokens = batch * seq / step
        out["tokens_per_second"] = tokens
        out["chip_hours_per_million_tokens"] = report.target.chips * 1e6 / tokens / 3600
    return out


def _peak(report: Report | None) -> int | None:
    """The compiler's peak bytes per chip of a report's program, if it gives one."""
    if report is None or not len(report.memory):
        return None
    peak = report.memory["peak_bytes"].iloc[0]
    return int(peak) if peak is not None and peak == peak else None


# ------------------------------------------------------------------ arguments
def default_plan(scan: Scan, devices: int, batch: int | None = None) -> Plan:
    """The plan :func:`fit` uses when given none, for ``devices`` devices and
    a global ``batch``."""
    return _plan_for(None, scan, devices, batch)


def _plan_for(plan: object, scan: Scan, devices: int, batch: int | None = None) -> Plan:
    """The plan for ``devices``: ``plan(devices)``, ``plan`` with its batch
    axis grown to fill them, or by default every variable split over one batch
    axis of all devices; when ``batch`` does not divide over them, the batch
    axis takes what it divides and a ``model`` axis the rest (tensor parallel,
    with the large variables also split over the batch axis)."""
    if plan is None:
        data = math.gcd(batch, devices) if batch else devices
        if data < devices:
            for label, candidate, _ in candidate_plans(scan, devices, sequence=False):
                if candidate.mesh_dict == {"batch": data, "model": devices // data} and \
                        label.startswith("fully sharded"):
                    return candidate
            for _label, candidate, _ in candidate_plans(scan, devices, sequence=False):
                if candidate.mesh_dict == {"batch": data, "model": devices // data}:
                    return candidate
        specs = fully_sharded_specs(scan, "batch", devices)
        return Plan({"batch": devices}, rules_for(specs, scan.variable_paths + scan.other_paths))
    if callable(plan) and not isinstance(plan, Plan):
        return as_plan(plan(devices))
    plan = as_plan(plan)
    others = math.prod(size for axis, size in plan.mesh if axis != plan.batch_axis)
    if devices % others:
        raise ShardvizError(
            f"The plan's other axes ({others} devices) do not divide a slice of {devices}.",
            hint="Pass plan= as a function of the device count that returns a plan.")
    mesh = {axis: devices // others if axis == plan.batch_axis else size
            for axis, size in plan.mesh}
    return Plan(mesh, [(r.key, r.axes) for r in plan.rules], plan.batch_axis)


def _scan(model_or_builder: object, tuning: Tuning) -> Scan:
    if isinstance(model_or_builder, Scan):
        if tuning.changes_model and tuning != model_or_builder.tuning:
            raise ShardvizError("A scan was given with training settings of another build.",
                                hint="Pass the builder, so that each setting builds it anew.")
        return model_or_builder
    return scan_model(model_of(model_or_builder), tuning=tuning)


def _modes(remat: object) -> list[object]:
    if isinstance(remat, list):
        if not remat:
            raise ShardvizError("remat=[] asks for no remat mode.",
                                hint="Leave remat out, or give modes such as [None, 'full'].")
        return [tuple(m) if isinstance(m, (list, tuple)) else m for m in remat]
    return [remat]


def _family_or_slice(target: object) -> list[str] | None:
    """The slices of the chip family ``target`` names (smallest slice), else
    None (a slice: the largest batch)."""
    if not isinstance(target, str):
        raise ShardvizError(f"target={target!r:.60} is not a slice or a chip family.",
                            hint="Give a slice such as 'v5e:2x4', or a family such as 'v5e'.")
    slices = family_slices(target)
    if slices is None:
        parse_target(target)  # a bad slice gets its own error now
    return slices


def _mode_text(mode: object) -> str | None:
    if mode is None:
        return None
    if isinstance(mode, str):
        return mode
    return "layers " + ", ".join(str(m) for m in mode)  # type: ignore[attr-defined]


def _mesh_text(plan: Plan) -> str:
    return " x ".join(f"{axis}={size}" for axis, size in plan.mesh)


def _say(progress: object) -> Callable[[str], object] | None:
    if progress is True:
        return lambda line: print(line, file=sys.stderr, flush=True)
    if callable(progress):
        return progress
    return None
