"""What would make a program fit: the changes that most reduce the bytes the
compiler checks, each one compiled. The candidates come from what fills the
device at the peak (``report.peak``): remat of the layers whose kept
activations weigh most, a smaller batch, a shorter sequence, LoRA, an
optimizer without slots, bfloat16. Each is analysed again with the same
plan and target, and measured as the compiler measures the original.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pandas as pd

from ..analysis import analyze
from ..errors import OutOfMemory, ShardvizError
from ..format import human_bytes
from ..report import Report, Settings
from .batch_inputs import resized
from .fit_search import checked_bytes

LEVER_COLUMNS = ("lever", "change", "bytes", "saved", "fits", "note")

SHARE = 0.05
"""A role (activations, optimizer state) is a lever only when it holds at
least this share of the peak."""


@dataclasses.dataclass
class Lever:
    """One change to try: its name, the settings it analyses, and what it says."""

    name: str
    change: str
    settings: Settings


def levers(report: Report, builder: Callable[[], object], *, top: int | None = None,
           progress: Callable[[str], object] | None = None) -> pd.DataFrame:
    """The changes that would reduce the bytes the compiler checks for
    ``report``'s program, largest saving first, each compiled: ``builder``
    builds the model again (remat, LoRA and dtype change how it is built).

    Columns: ``lever``, ``change`` (the settings it changes), ``bytes`` (what
    the compiler checked after the change, or said it needed), ``saved``,
    ``fits`` (on a target chip), ``note`` (why one could not be compiled).
    """
    if report.pass_name is None and not isinstance(report.trace_error, OutOfMemory):
        raise ShardvizError("levers() needs a compiled pass (one that fits, or one the compiler "
                            "refused), and this report has none.",
                            hint="Analyse with inputs (and train_step=True for a fine-tune).")
    before = checked_bytes(report)
    candidates = candidate_levers(report)[:top]
    rows: list[tuple[str, str, int | None, int | None, bool | None, str]] = []
    for i, lever in enumerate(candidates):
        if progress is not None:
            progress(f"lever {i + 1} of {len(candidates)}: {lever.name}")
        try:
            after = analyze(builder, report.plan, settings=lever.settings.replace(progress=None))
        except ShardvizError as e:
            rows.append((lever.name, lever.change, None, None, None, e.message))
            continue
        error = after.trace_error
        if error is not None and not isinstance(error, OutOfMemory):
            # Not compiled (the model refuses the change): no figure to compare.
            rows.append((lever.name, lever.change, None, None, None, error.message))
            continue
        figure = checked_bytes(after)
        saved = before - figure if before is not None and figure is not None else None
        rows.append((lever.name, lever.change, figure, saved, after.fits, ""))
    rows += _advice(report)
    frame = pd.DataFrame(rows, columns=list(LEVER_COLUMNS))
    for column in ("bytes", "saved"):
        frame[column] = pd.to_numeric(frame[column])
    return frame.sort_values("saved", ascending=False, na_position="last",
                             kind="stable").reset_index(drop=True)


def candidate_levers(report: Report) -> list[Lever]:
    """The changes worth compiling for ``report``, the most promising first."""
    settings = report.settings
    peak = report.peak
    total = float(peak["bytes"].sum()) if len(peak) else 0.0
    share = (peak.groupby("role")["bytes"].sum() / total) if total else pd.Series(dtype=float)
    out: list[Lever] = []
    if settings.train_step and share.get("activation", 0) >= SHARE:
        blocks = _heaviest_blocks(peak)
        if blocks:
            out.append(Lever("remat", f"remat={tuple(blocks)!r:.80} (Keras's RematScope, "
                             "list_of_layers)", settings.replace(remat=tuple(blocks))))
    batch = _batch(report) if settings.inputs is not None or settings.batch else None
    unit = _batch_unit(report)
    half = (batch // 2) // unit * unit if batch else 0  # Keras splits the batch evenly
    if batch and 0 < half < batch:
        out.append(Lever("smaller batch", f"batch {batch} -> {half}", _with_batch(settings, half)))
    seq = settings.seq or (_seq(report) if settings.inputs is not None else None)
    if seq and seq > 1:
        out.append(Lever("shorter sequence", f"sequence {seq} -> {seq // 2}",
                         _with_seq(settings, seq // 2)))
    if settings.train_step and settings.lora_rank is None:
        out.append(Lever("LoRA", "lora_rank=8 (only the LoRA factors train)",
                         settings.replace(lora_rank=8)))
    if settings.train_step and share.get("optimizer state", 0) >= SHARE:
        import keras

        out.append(Lever("SGD", "optimizer=keras.optimizers.SGD() (no slots per weight)",
                         settings.replace(optimizer=keras.optimizers.SGD())))
    if settings.dtype is None and _float32(report):
        out.append(Lever("bfloat16", "dtype='mixed_bfloat16'",
                         settings.replace(dtype="mixed_bfloat16")))
    return out


def _heaviest_blocks(peak: pd.DataFrame, cover: float = 0.8) -> list[str]:
    """The top-level layers whose activations at the peak make up ``cover``
    of all activations there, heaviest first."""
    kept = peak[(peak["role"] == "activation") & (peak["layer"] != "")]
    if kept.empty:
        return []
    by_block = kept.groupby(kept["layer"].str.split("/").str[0])["bytes"].sum()
    by_block = by_block.sort_values(ascending=False)
    out, running, total = [], 0.0, float(by_block.sum())
    for name, size in by_block.items():
        out.append(str(name))
        running += float(size)
        if running >= cover * total:
            break
    return out


def _advice(report: Report) -> list[tuple[str, str, None, None, None, str]]:
    """Changes no setting can make, said where the peak calls for them (not
    compiled): a loss that never holds the full-vocabulary logits."""
    peak = report.peak
    total = float(peak["bytes"].sum()) if len(peak) else 0.0
    logits = float(peak.loc[peak["role"] == "logits and loss", "bytes"].sum()) if total else 0.0
    if not report.settings.train_step or logits < 0.25 * total:
        return []
    return [("chunked loss", "a loss that never holds the full-vocabulary logits", None, None,
             None, f"not compiled: the logits and the loss hold {human_bytes(int(logits))} of "
             f"the peak's {human_bytes(int(total))}; compute the output projection and the "
             "cross-entropy inside the model over slices of the sequence (or in bfloat16), "
             "so that no float32 copy of every token's vocabulary is live at once; that "
             "changes the model's code, so shardviz cannot compile it for you")]


def _batch_unit(report: Report) -> int:
    """The size of the plan's batch axis: every batch is a multiple of it."""
    axis = report.plan.batch_axis
    return int(report.plan.mesh_dict.get(axis, 1)) if axis else 1


def _batch(report: Report) -> int | None:
    if report.settings.batch:
        return int(report.settings.batch)
    shapes = report.arguments.get("inputs")
    first = _first_shape(shapes)
    return int(first[0]) if first else None


def _seq(report: Report) -> int | None:
    first = _first_shape(report.arguments.get("inputs"))
    return int(first[1]) if first and len(first) > 1 else None


def _first_shape(tree: object) -> tuple | None:
    if isinstance(tree, dict):
        tree = next(iter(tree.values()), None)
    if isinstance(tree, (list, tuple)) and tree and not all(isinstance(d, int) for d in tree):
        tree = tree[0]
    shape = getattr(tree, "shape", tree)
    return tuple(shape) if isinstance(shape, (tuple, list)) and shape else None


def _with_batch(settings: Settings, batch: int) -> Settings:
    return settings.replace(batch=batch) if settings.batch else _resized(settings, 0, batch)


def _with_seq(settings: Settings, seq: int) -> Settings:
    return settings.replace(seq=seq) if settings.seq else _resized(settings, 1, seq)


def _resized(settings: Settings, dim: int, size: int) -> Settings:
    """The settings' inputs and labels with dim ``dim`` set to ``size``."""
    labels = None if settings.labels is None else resized(settings.labels, dim, size, "labels")
    return settings.replace(inputs=resized(settings.inputs, dim, size), labels=labels)


def _float32(report: Report) -> bool:
    return bool(len(report.variables)) and (report.variables["dtype"] == "float32").mean() > 0.5


def describe(frame: pd.DataFrame) -> str:
    """The levers as lines: ``remat: 3.1 GiB saved (fits)``."""
    lines = []
    for lever, change, left, saved, fits, note in frame.itertuples(index=False):
        if pd.isna(saved):
            lines.append(f"{lever}: not compiled ({note})")
            continue
        verdict = "" if fits is None else " (fits)" if fits else " (still too large)"
        lines.append(f"{lever}: {human_bytes(float(saved))} saved, "
                     f"{human_bytes(float(left))} left{verdict}; {change}")
    return "\n".join(lines)
