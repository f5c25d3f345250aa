"""The values an explanation is made of: :class:`Meeting` (one operand at
the site), :class:`Tried` (one counterfactual plan) and
:class:`Explanation`, which shows itself as text and HTML (drawn by
:mod:`shardviz.render.explanation_view`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..format import format_spec
from ..plan import Plan

NO_RULE = "no rule: the default replicated layout"


@dataclasses.dataclass(frozen=True)
class Meeting:
    """One operand at the site: a variable or an activation, its layout, and
    the rule that set it."""

    name: str
    kind: str
    """``"variable"``, ``"activation"``, ``"input"``, ``"internal"``, or
    ``"result"``: the site's own output, when an /output rule constrains it."""
    shape: tuple
    """Empty when unknown (a value inside an enclosing layer's call)."""
    spec: tuple | None
    rule: str | None
    """The rule key that set the layout; None when none did."""
    via: tuple = ()
    """For an activation no /output rule sets: ``(variable, rule, rule index)``
    of the producing layer's split variables, whose layouts XLA propagated."""
    rule_index: int | None = None
    """The position of ``rule`` in the plan, as the rule editor numbers it."""

    def describe(self) -> str:
        shape = f" {self.shape}" if self.shape else ""
        if self.spec is None:
            return f"`{self.name}`{shape}"
        layout = format_spec(self.spec)
        if self.kind == "result":
            return (f"{rule_text(str(self.rule), self.rule_index)} asks its result "
                    f"`{self.name}`{shape} to be {layout}")
        if self.rule:
            how = f"by {rule_text(self.rule, self.rule_index)}"
        elif self.kind == "variable":
            how = f"({NO_RULE})"
        elif self.kind == "input":
            how = "(the batch layout Keras gives inputs)"

        elif self.via:
            how = ("(no /output rule: XLA propagated it from "
                   + " and ".join(f"`{v}` ({rule_text(r, i)})" for v, r, i in self.via) + ")")
        else:
            how = "(no /output rule: XLA chose it by propagation)"
        return f"`{self.name}`{shape} is {layout} {how}"


@dataclasses.dataclass
class Tried:
    """One counterfactual plan and what the compiler made of it."""

    change: str
    plan: Plan
    outcome: str
    comm_bytes: int | None = None
    """Collective bytes per device over the whole program, or None if it
    did not compile."""
    bytes_per_device: int | None = None
    """Variable bytes per device."""
    removes: bool = False
    """Whether this collective is gone or smaller."""
    report: Any = dataclasses.field(default=None, repr=False)


@dataclasses.dataclass
class Explanation:
    """What one collective communicates, why, and what removes it.

    Displays itself in notebooks (HTML) and terminals (``print``)."""

    index: int
    kind: str
    layer: str
    site: str
    source: str
    source_from: str
    text: str
    """What is communicated and why, in plain words."""
    rules: tuple[str, ...]
    """The rule keys involved."""
    meetings: tuple[Meeting, ...]
    fix: Plan | None
    """A plan that removes or shrinks this collective, or None."""
    fix_change: str = ""
    fix_cost: str = ""
    """What the fix costs elsewhere, or why there is none."""
    fix_report: Any = dataclasses.field(default=None, repr=False)
    tried: tuple[Tried, ...] = ()

    def __str__(self) -> str:
        from ..render.explanation_view import text

        return text(self)

    def text_block(self, width: int = 88) -> str:
        """The explanation as plain text, wrapped to ``width`` columns."""
        from ..render.explanation_view import text

        return text(self, width)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        from ..render.explanation_view import text

        p.text(text(self))

    def _repr_html_(self) -> str:
        from ..render.explanation_view import html

        return html(self)


def rule_text(key: str, index: int | None) -> str:
    """``rule 2 `.*down/kernel```, numbered as the plan (and the editor) number it."""
    return f"rule {index} `{key}`" if index is not None else f"rule `{key}`"
