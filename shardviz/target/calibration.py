"""Measured steps beside shardviz's bound for the same program: the data
behind the expected step time.

Each :class:`MeasuredStep` is one step whose time was measured (on a chip
shardviz's own records ran on, or in a published run) together with the
bound shardviz gives for the same program (the largest row of
``Report.estimate``; ``bench/records/calibrate_step_time.py`` prints it for the
published runs, ``bench/records/chip/compare.py`` for the chip records). The
expected step time of a new program is its bound times the median of
measured over bound for steps of the same kind on the same chip.

>>> e = expected_step("v6e", "train step", bound=1.0)
>>> round(e.factor, 2), len(e.steps)
(2.17, 2)
>>> expected_step("v4", "train step", bound=1.0) is None
True
"""

from __future__ import annotations

import dataclasses
import statistics

CHIP_RECORDS = "tests/data/chip/v5e-1x1.jsonl (bench/records/chip/record.py, bench/records/chip/compare.py)"
TPU_RECIPES = ("published MaxText run (AI-Hypercomputer tpu-recipes, training/trillium); "
               "bound from bench/records/calibrate_step_time.py")


@dataclasses.dataclass(frozen=True)
class MeasuredStep:
    """One measured step and shardviz's bound for the same program."""

    hardware: str
    program: str
    """``"train step"`` (what ``model.fit`` runs) or ``"forward pass"``."""
    case: str
    model: str
    seconds: float
    """The measured seconds per step."""
    bound: float
    """shardviz's bound for the same program, in seconds."""
    date: str
    source: str
    where: str = "on one v5e chip"

    @property
    def ratio(self) -> float:
        return self.seconds / self.bound


MEASURED_STEPS: tuple[MeasuredStep, ...] = (
    # One v5e chip, Keras's own model.fit / model.predict (docs/CHIP.md).
    *(MeasuredStep("v5e", "train step", case, model, s, b, day, CHIP_RECORDS)
      for case, model, s, b, day in (
          ("dict_model_fit_b32", "a 10M-parameter classifier", 0.00263, 0.0020, "2026-12-05"),
          ("dict_model_fit_b4", "a 10M-parameter classifier", 0.0029, 0.00155, "2026-12-07"),
          ("decoder_fit_b4", "a 335M decoder, full fine-tune", 0.11302, 0.121, "2026-12-05"),
          ("decoder_fit_b6", "a 335M decoder, full fine-tune", 0.1718, 0.173, "2026-12-05"),
          ("decoder_fit_b7", "a 335M decoder, full fine-tune", 0.22242, 0.205, "2026-12-05"),
          ("decoder_lora_fit_b4", "a 335M decoder, LoRA", 0.09556, 0.098, "2026-12-05"),
          ("decoder_lora_fit_b8", "a 335M decoder, LoRA", 0.20923, 0.191, "2026-12-05"),
          ("decoder_lora_fit_b9", "a 335M decoder, LoRA", 0.24728, 0.217, "2026-12-05"),
          ("hub_gpt2_fit_b8", "keras-hub's GPT-2 (124M), full fine-tune", 0.16517, 0.082,
           "2026-12-07"),
          ("hub_gpt2_fit_b33", "keras-hub's GPT-2 (124M), full fine-tune", 0.74098, 0.289,
           "2026-12-07"))),
    *(MeasuredStep("v5e", "forward pass", case, "a 109M encoder under model.predict", s, b,
                   "2026-12-05", CHIP_RECORDS)
      for case, s, b in (("encoder_predict_b64", 0.13202, 0.029),
                         ("encoder_predict_b256", 0.50432, 0.115))),
    # Published MaxText runs on v6e-8; the bound is shardviz's for the same
    # shapes built with keras-hub classes (mixed_bfloat16, AdamW, fully sharded).
    MeasuredStep("v6e", "train step", "llama3.1-8b_v6e-8_b24x8192",
                 "Llama 3.1 8B, global batch 24 x 8192 (413.4 TFLOP/s per chip)",
                 3.443, 1.5545, "2025", TPU_RECIPES, "in a published MaxText run on v6e-8"),
    MeasuredStep("v6e", "train step", "mistral-7b_v6e-8_b48x8192",
                 "Mistral 7B, global batch 48 x 8192 (432.0 TFLOP/s per chip)",
                 6.320, 2.9822, "2025", TPU_RECIPES, "in a published MaxText run on v6e-8"),
)
"""Every measured step the expected step time is calibrated with."""


@dataclasses.dataclass(frozen=True)
class Expected:
    """A step time calibrated against measured steps."""

    seconds: float
    factor: float
    """The median of measured over bound, which the bound was multiplied by."""
    steps: tuple[MeasuredStep, ...]

    def describe(self) -> str:
        """Where the figure comes from, for reports.

        >>> for part in expected_step("v6e", "train step", 1.0).describe().split("; "):
        ...     print(part)
        2.17x the bound: the median of 2 measured steps (train step) on v6e (2.12-2.21x
        published MaxText run)
        """
        low = min(s.ratio for s in self.steps)
        high = max(s.ratio for s in self.steps)
        sources = sorted({s.source.split(";")[0].split(" (")[0] for s in self.steps})
        spread = f"{low:.2f}-{high:.2f}x" if len(self.steps) > 1 else f"{low:.2f}x"
        return (f"{self.factor:.2f}x the bound: the median of {len(self.steps)} measured "
                f"steps ({self.steps[0].program}) on {self.steps[0].hardware} ({spread}; "
                f"{', '.join(sources)})")


def expected_step(hardware: str, program: str, bound: float,
                  exclude: tuple[str, ...] = ()) -> Expected | None:
    """The expected seconds of a step whose bound is ``bound``, calibrated
    with the measured steps of the same program on the same chip (leaving
    out the cases named in ``exclude``); None when there are none."""
    steps = tuple(s for s in MEASURED_STEPS if s.hardware == hardware
                  and s.program == program and s.case not in exclude)
    if not steps or not bound or bound <= 0:
        return None
    factor = statistics.median(s.ratio for s in steps)
    return Expected(bound * factor, factor, steps)


def checked_against(hardware: str, program: str) -> tuple[str, ...]:
    """One clause per model whose steps of ``program`` were measured on
    ``hardware``: how the measured steps compared with the bound.

    >>> checked_against("v5e", "forward pass")[0][:64]
    'on one v5e chip (2026-12-05), the forward pass of a 109M encoder'
    """
    groups: dict[tuple[str, str], list[MeasuredStep]] = {}
    for s in MEASURED_STEPS:
        if s.hardware == hardware and s.program == program:
            groups.setdefault((s.where, s.model), []).append(s)
    out = []
    for (where, model), steps in groups.items():
        low, high = min(s.ratio for s in steps), max(s.ratio for s in steps)
        spread = f"{low:.2f}-{high:.2f}x" if len(steps) > 1 else f"{low:.2f}x"
        days = sorted({s.date for s in steps})
        out.append(f"{where} ({' and '.join(days)}), the {program} of {model} took {spread} "
                   "the bound")
    return tuple(out)
