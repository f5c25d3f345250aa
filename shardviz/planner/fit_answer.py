"""What :func:`~shardviz.planner.fit` answers: :class:`FitAnswer`, one row
per remat mode, every compile it made, and the Report of the best answer,
shown as text and as HTML (by :mod:`shardviz.render.fit_view`)."""

from __future__ import annotations

import dataclasses

import pandas as pd

from ..model.tuning import Tuning
from ..report import Report

COMPILE_COLUMNS = ["remat", "target", "mesh", "batch", "bytes_per_device", "capacity_bytes",
                   "fits", "compiled", "seconds", "from_cache"]
ANSWER_COLUMNS = ["remat", "target", "mesh", "batch", "bytes_per_device", "capacity_bytes",
                  "next", "next_bytes_per_device", "compiles", "peak_bytes_per_device",
                  "step_seconds", "tokens_per_second", "chip_hours_per_million_tokens"]
"""``step_seconds`` is the expected step at the answer (the report's
``estimate``), ``tokens_per_second`` the batch's tokens (batch x ``seq``)
over it, and ``chip_hours_per_million_tokens`` what a million tokens cost in
chip-hours on the answer's slice; None where no time is expected (GPUs, the
CPU) or no ``seq`` was given."""


@dataclasses.dataclass
class FitAnswer:
    """What :func:`fit` found: one row per remat mode in :attr:`answers`,
    every compile in :attr:`compiles`, and the Report of the best answer.

    For the largest batch, a row's ``batch`` fits ``target`` and ``next``
    (the next batch the batch axis allows) was refused, with the bytes it
    needed. For the smallest slice, ``target`` fits ``batch`` and ``next``
    names the next smaller slice sold, which was refused (by the compiler,
    or because the variables alone exceed a chip: ``compiled`` False).
    """

    question: str
    """``"largest batch"`` or ``"smallest slice"``."""
    answers: pd.DataFrame
    compiles: pd.DataFrame
    report: Report | None
    """The Report at the best answer (the last remat mode's if none fits)."""
    tuning: Tuning
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def compile_count(self) -> int:
        """How many train steps were compiled (read from the compile cache or
        not)."""
        return int(self.compiles.compiled.sum())

    @property
    def cached_count(self) -> int:
        """How many of the compiles were read from the compile cache."""
        if "from_cache" not in self.compiles:
            return 0
        return int(self.compiles.from_cache.fillna(False).astype(bool).sum())

    def __str__(self) -> str:
        from ..render.fit_view import text

        return text(self)

    def __repr__(self) -> str:
        return f"<FitAnswer {self.question}: {len(self.answers)} rows, {self.compile_count} compiles>"

    def _repr_html_(self) -> str:
        from ..render.fit_view import html

        return html(self)
