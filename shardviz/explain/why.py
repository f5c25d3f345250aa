""":func:`explain_collective` (``report.why(i)``): one collective's
explanation, from its row, the operands that meet at its site, the why-text
and the best fix found."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..format import human_bytes
from .explanation import NO_RULE, Explanation
from .fixes import changes_text, try_all
from .meetings import constrained_result, meetings_of
from .rows import collective_row
from .text import why_text

if TYPE_CHECKING:
    from ..report import Report


def explain_collective(report: Report, which: object, *, search: bool = True,
                       progress: Callable[[str], object] | None = None) -> Explanation:
    """The :class:`Explanation` of row ``which`` of ``report.collectives``
    (an index, or a row). With ``search=False`` no counterfactual plan is
    compiled, and ``fix`` is None. ``progress(line)`` hears of each plan as
    it is compiled.

    On a train step, the plans are compared on their forward passes, where
    the collective is (a train step costs several times a forward pass to
    compile), and the explanation says so."""
    index, row = collective_row(report, which)
    meetings = meetings_of(report, tuple(row["operands"]))
    text, split_contraction = why_text(report, row, meetings)
    result = constrained_result(report, row) if row["pass"] == "forward" else None
    if result is not None:
        text = (f"At `{row['layer'] or '?'}`, {result.describe()}, so XLA must produce that "
                "layout there.\n" + text)
        meetings.append(result)
    rules = tuple(sorted({m.rule for m in meetings if m.rule}
                         | {r for m in meetings for _, r, _ in m.via}))
    base = dict(index=index, kind=row["kind"], layer=row["layer"], site=row["site"],
                source=row["source"], source_from=row["source_from"], text=text, rules=rules,
                meetings=tuple(meetings))
    if not rules:
        base["text"] = text + f"\nRules involved: none ({NO_RULE})."
    if not search:
        return Explanation(**base, fix=None, fix_cost="Not searched (search=False).")
    if row["pass"] != "forward":
        return Explanation(**base, fix=None, fix_cost=(
            f"Fixes are searched for forward-pass collectives; this one is in the "
            f"{row['pass']} pass, where layer names do not identify a collective across "
            "plans. Explain the forward-pass collective at the same layer instead."))
    compared, tried = try_all(report, row, meetings, progress)
    good = [t for t in tried if t.removes]
    if not good:
        if tried:
            reason = ("Every local change tried leaves at least as much communication (or "
                      "more bytes on every device).")
        else:
            reason = ("There is no local change to try: no rule or variable meets here, and "
                      "the layouts come from XLA's propagation. Change the layer that produces "
                      "the input (see the collectives before this one), or constrain it with "
                      "an /output rule.")
        if compared.note:
            reason = compared.note
        if split_contraction:
            reason = ("None of the local changes helps: this reduction is the price of "
                      "splitting the contraction. Removing it means replicating the kernel "
                      "(more bytes on every device) or gathering the input (more communication)."
                      " " + reason)
        return Explanation(**base, fix=None, fix_cost=reason, tried=tuple(tried))
    # Changes that keep every device's bytes come first: a fix that only
    # works by replicating is offered when nothing else removes the collective.
    before_bytes = report.variable_bytes_per_device
    best = min(good, key=lambda t: ((t.bytes_per_device or 0) > before_bytes, t.comm_bytes,
                                    t.bytes_per_device))
    what = ("Forward-pass communication per device (the train step was not recompiled: "
            "analyse the fix with train_step=True for its whole cost)"
            if compared.screened else "Communication per device")
    cost = [f"{what}: {human_bytes(compared.comm_bytes)} → "
            f"{human_bytes(best.comm_bytes or 0)}; it "
            f"{changes_text(compared.collectives, best.report.collectives)}."]
    before = report.variable_bytes_per_device
    if best.bytes_per_device is not None and best.bytes_per_device != before:
        cost.append(f"Variables per device: {human_bytes(before)} → "
                    f"{human_bytes(best.bytes_per_device)}.")
    else:
        cost.append("Variables per device are unchanged.")
    return Explanation(**base, fix=best.plan, fix_change=best.change, fix_cost=" ".join(cost),
                       fix_report=best.report, tried=tuple(tried))
