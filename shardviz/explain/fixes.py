"""Fixes by counterfactual: the local changes to try at a collective's site,
each analysed with the real compiler, and what each adds or removes."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import pandas as pd

from ..errors import BLOCKING
from ..format import format_spec, human_bytes
from ..plan import Plan
from .cache import analysed
from .explanation import Meeting, Tried

if TYPE_CHECKING:
    from ..report import Report


MAX_CANDIDATES = 8
"""The most counterfactual plans compiled for one explanation."""


def _divides(shape, spec, sizes: dict) -> bool:
    for n, entry in zip(shape, spec):
        names = entry if isinstance(entry, tuple) else (entry,)
        k = 1
        for a in names:
            if a:
                k *= sizes.get(a, 1)
        if n % k:
            return False
    return True


def _candidates(report: Report, row, meetings: list[Meeting]) -> list[tuple[str, Plan]]:
    plan = report.plan
    sizes = plan.mesh_dict
    axes = tuple(row["axes"])
    variables = report.variables.set_index("path")
    targets: list[str] = [m.name for m in meetings if m.kind == "variable"]
    # The same split on the producer: the variables of layers whose outputs meet here.
    for m in meetings:
        if m.kind == "activation":
            producer = m.name[: -len("/output")]
            targets += [p for p in variables.index
                        if variables.loc[p, "layer"] == producer and len(variables.loc[p, "shape"]) >= 2]
    out: list[tuple[str, Plan]] = []
    seen: set[Plan] = set()

    def add(change: str, candidate: Plan) -> None:
        if candidate != plan and candidate not in seen:
            seen.add(candidate)
            out.append((change, candidate))

    for path in dict.fromkeys(targets):
        row_v = variables.loc[path]
        shape, spec = tuple(row_v["shape"]), tuple(row_v["spec"])
        rule = str(row_v["rule"]) if row_v["rule"] not in (None, "<own layout>") else None
        alternatives: list[tuple[str, tuple]] = []
        if len(shape) == 2 and spec[0] != spec[1]:
            alternatives.append(("the transposed split", (spec[1], spec[0])))
        used = [e for e in spec if e is not None]
        for d in range(len(shape)):
            for entry in used:
                moved = tuple(entry if i == d else (None if e == entry else e)
                              for i, e in enumerate(spec))
                if moved != spec:
                    alternatives.append((f"split dim {d}", moved))
        if not used:
            for a in axes:
                for d in range(len(shape)):
                    alternatives.append((f"split dim {d} over {a!r}",
                                         tuple(a if i == d else None for i in range(len(shape)))))
        for label, new in alternatives:
            if not _divides(shape, new, sizes):
                continue
            new = tuple(new)
            if rule is not None:
                candidate = plan.with_rule_at(plan.rule_index(rule), axes=tuple(new))
                add(f"rule `{rule}`: {format_spec(spec)} → {format_spec(new)} ({label})",
                    candidate)
            else:
                key = re.escape(path)
                add(f"new rule `{key}`: {format_spec(new)} ({label})",
                    plan.with_rule(key, tuple(new)))
        if rule is not None:
            add(f"drop rule `{rule}` (replicate what it splits)", plan.without_rule(rule))
    for m in meetings:
        if m.kind == "activation" and m.rule:
            add(f"drop /output rule `{m.rule}`", plan.without_rule(m.rule))
    site_rule = f"{row['layer']}/output"
    for r in plan.rules:
        if r.is_output and re.fullmatch(r.key, site_rule) and not any(
                c.startswith(f"drop /output rule `{r.key}`") for c, _ in out):
            add(f"drop /output rule `{r.key}`", plan.without_rule(r.key))
    return out[:MAX_CANDIDATES]


def _at_site(c: pd.DataFrame, kind: str, layer: str) -> int:
    if not len(c):
        return 0
    return int(c[(c["kind"] == kind) & (c["layer"] == layer)]["bytes_per_device"].sum())


def changes_text(before: pd.DataFrame, after: pd.DataFrame) -> str:
    """The collectives that a fix adds or removes, in words."""
    def counts(c: pd.DataFrame) -> dict:
        out: dict = {}
        for _, row in c.iterrows():
            key = (row["kind"], row["layer"])
            n, b = out.get(key, (0, 0))
            out[key] = (n + 1, b + int(row["bytes_per_device"]))
        return out

    a, b = counts(before), counts(after)
    parts = []
    for key in sorted(set(a) | set(b)):
        (na, ba), (nb, bb) = a.get(key, (0, 0)), b.get(key, (0, 0))
        if (na, ba) == (nb, bb):
            continue
        kind, layer = key
        if nb == 0:
            parts.append(f"removes the {kind} at `{layer}` ({human_bytes(ba)})")
        elif na == 0:
            parts.append(f"adds {'an' if kind[0] == 'a' else 'a'} {kind} at `{layer}` "
                         f"({human_bytes(bb)})" if nb == 1 else
                         f"adds {nb} {kind}s at `{layer}` ({human_bytes(bb)})")
        elif ba == bb:
            parts.append(f"splits the {kind} at `{layer}` ({human_bytes(ba)}) into {nb}"
                         if nb > na else f"merges the {kind}s at `{layer}` ({human_bytes(ba)}) "
                         f"into {nb}")
        else:
            parts.append(f"changes the {kind}{'s' if na > 1 else ''} at `{layer}` from "
                         f"{human_bytes(ba)} to {human_bytes(bb)}")
    return "; ".join(parts) or "leaves the collectives as they were"


@dataclasses.dataclass
class _Base:
    """What the counterfactual plans are compared with: the report's own
    collectives, or on a train step those of its plan's forward pass."""

    collectives: pd.DataFrame
    comm_bytes: int
    """The collectives' bytes per device, from the report's totals."""
    variable_bytes: int
    screened: bool
    note: str = ""
    """Why no plan could be judged, when none could."""


def try_all(report: Report, row, meetings: list[Meeting],
             progress: Callable[[str], object] | None = None) -> tuple[_Base, list[Tried]]:

    say = progress or (lambda line: None)
    settings = report.settings.replace(mode="abstract", progress=None)
    layouts = settings.layouts_only()
    screened = settings.train_step
    candidates = _candidates(report, row, meetings)
    started = time.perf_counter()

    def tell(i: int, what: str) -> None:
        say(f"why({row.name}): plan {i} of {len(candidates) + screened}, "
            f"{time.perf_counter() - started:.0f} s: {what}")

    if screened:
        # The collective is in the forward pass: compare forward passes.
        forward = settings.replace(train_step=False, labels=None, optimizer=None)
        tell(1, "compiling this plan's forward pass")
        own = analysed(report, report.plan, forward)
        if own.trace is None:  # compare whole train steps, then
            base = _Base(report.collectives, report.totals.collective_bytes or 0,
                         report.variable_bytes_per_device, False)
        else:
            settings = forward
            base = _Base(own.collectives, own.totals.collective_bytes or 0,
                         report.variable_bytes_per_device, True)
    else:
        base = _Base(report.collectives, report.totals.collective_bytes or 0,
                     report.variable_bytes_per_device, False)
    before_site = _at_site(base.collectives, row["kind"], row["layer"])
    if base.screened and before_site == 0:
        base.note = (f"The forward pass alone has no {row['kind']} at `{row['layer']}`: the "
                     "train step needs it for what follows the model (its loss or metrics), "
                     "so forward passes cannot judge a change to it, and a train step per "
                     "change costs too much to search.")
        return base, []
    comm_before = base.comm_bytes
    out = []
    for i, (change, plan) in enumerate(candidates, start=1 + screened):
        tell(i, f"trying {change}")
        # The layouts alone (no compile): whether Keras takes the plan.
        quick = analysed(report, plan, layouts)
        errors = [p for p in quick.errors if p.kind in BLOCKING]
        if errors:
            out.append(Tried(change, plan, f"Keras refuses it: {errors[0].message}"))
            continue
        after = analysed(report, plan, settings)
        if after.trace is None:
            msg = after.trace_error.message if after.trace_error else "the pass did not run"
            out.append(Tried(change, plan, f"does not compile: {msg}"))
            continue
        comm = after.totals.collective_bytes or 0
        at_site = _at_site(after.collectives, row["kind"], row["layer"])
        # A fix removes or shrinks this collective and lowers the total
        # communication; swapping it for an equal one elsewhere is no fix.
        removes = at_site < before_site and (
            comm < comm_before
            or (comm == comm_before
                and after.variable_bytes_per_device < base.variable_bytes))
        outcome = (f"{changes_text(base.collectives, after.collectives)}; "
                   f"{'forward-pass ' if base.screened else ''}communication "
                   f"{human_bytes(comm_before)} → {human_bytes(comm)} per device")
        if after.variable_bytes_per_device != base.variable_bytes:
            outcome += (f"; variables {human_bytes(base.variable_bytes)} → "
                        f"{human_bytes(after.variable_bytes_per_device)} per device")
        out.append(Tried(change, plan, outcome, comm, after.variable_bytes_per_device, removes,
                         after))
    if candidates:
        say(f"why({row.name}): {len(out)} plans tried in {time.perf_counter() - started:.0f} s")
    return base, out
