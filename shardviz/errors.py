"""Errors and problem records.

shardviz distinguishes two kinds of trouble:

* a :class:`ShardvizError` is raised when shardviz cannot do what was asked
  (a malformed plan file, a builder that raises, too few devices to run);
* a :class:`Problem` is a finding about a plan that shardviz could analyse
  (a rule that matches nothing, a dimension that does not divide). Problems
  are collected on the report; they never stop the analysis.

Both say what is wrong, where (path, rule or layer) and what to change.

>>> p = Problem("warning", "unused-rule", "Rule 'd1/kernel' matches nothing.",
...             hint="Did you mean '.*d1/kernel'?", rule="d1/kernel")
>>> p.severity, p.kind
('warning', 'unused-rule')
>>> print(ShardvizError("Mesh axis 'x' has size 0.", hint="Use a size >= 1."))
Mesh axis 'x' has size 0.
  hint: Use a size >= 1.
"""

from __future__ import annotations

import dataclasses

SEVERITIES = ("error", "warning", "info")
"""Problem severities, most severe first."""

PROBLEM_KINDS = {
    # plan and rules
    "invalid-regex": "a rule key is not a valid regular expression",
    "duplicate-rule": "two rules have the same key",
    "unknown-axis": "a rule names an axis the mesh does not have",
    "duplicate-axis": "a rule uses one mesh axis on two dimensions",
    "batch-axis": "the batch axis is not a mesh axis",
    # matching
    "unused-rule": "a rule matches no variable or output path",
    "conflict": "a path matches several rules, which Keras refuses",
    "pinned-layout": "a variable carries its own layout, which wins over rules",
    "lora-unmatched": "LoRA factors of split kernels match no rule and stay replicated",
    # geometry
    "indivisible": "a sharded dimension does not divide by its mesh axis",
    "rank-mismatch": "a layout's rank differs from the tensor's rank",
    "replicated-large": "a large variable is left fully replicated",
    "mesh-size": "the mesh size differs from the devices available",
    # tracing
    "multi-output-rule": "an /output rule on a layer with several outputs, which Keras "
    "cannot apply while it builds a functional model",
    "reused-layer": "one /output rule constrains several calls of a layer, with different shapes",
    "dropped-constraint": "XLA did not give an output the layout its rule asks for",
    "trace-failed": "the forward pass could not be traced",
    "xla-resharding": "XLA could not move a tensor between two layouts efficiently, and "
    "replicated it whole to split it again (involuntary full rematerialization)",
    # target hardware
    "does-not-fit": "a chip needs more memory than it has",
    "attention": "Keras runs XLA's attention, which keeps every head's scores, on a target",
    # numerics
    "wrong-gradient": "XLA computes a wrong gradient under this layout (grouped "
    "convolutions on a mesh that copies the batch)",
}
"""Every problem kind shardviz reports, with a one-line description."""

BLOCKING = frozenset({"conflict", "indivisible", "rank-mismatch", "unknown-axis", "duplicate-axis",
                      "invalid-regex", "duplicate-rule", "batch-axis", "multi-output-rule"})
"""Error kinds that make Keras refuse the plan before the forward pass runs."""

KINDS = PROBLEM_KINDS
"""The same table by its first name (``from shardviz.errors import KINDS``)."""


def _severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity)


@dataclasses.dataclass(frozen=True)
class Problem:
    """One finding about a plan, with where it is and how to fix it.

    Attributes:
        severity: ``"error"`` (Keras would raise, or the layout is not what
            was asked), ``"warning"`` (legal but probably a mistake) or
            ``"info"``.
        kind: one of :data:`PROBLEM_KINDS`.
        message: what is wrong, naming the path, rule or layer.
        hint: what to change.
        path: the variable or output path concerned, if any.
        rule: the rule key concerned, if any.
        layer: the layer concerned, if any.
    """

    severity: str
    kind: str
    message: str
    hint: str = ""
    path: str | None = None
    rule: str | None = None
    layer: str | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(
                f"Problem severity must be one of {SEVERITIES}, got {self.severity!r}"
            )
        if self.kind not in PROBLEM_KINDS:
            raise ValueError(f"Unknown problem kind {self.kind!r}; known: {sorted(PROBLEM_KINDS)}")

    def at_least(self, severity: str) -> bool:
        """Whether this problem is at least as severe as ``severity``."""
        return _severity_rank(self.severity) <= _severity_rank(severity)

    def __str__(self) -> str:
        text = f"[{self.severity}] {self.kind}: {self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class ShardvizError(Exception):
    """Raised when shardviz cannot do what was asked.

    The message says what happened; ``hint`` says what to do about it.
    """

    def __init__(self, message: str, *, hint: str = "", path: str | None = None,
                 rule: str | None = None, layer: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.path = path
        self.rule = rule
        self.layer = layer

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  hint: {self.hint}"
        return self.message


class OutOfMemory(ShardvizError):
    """The compiler refused a program that needs more memory per chip than
    the chip has. ``needed`` and ``available`` are bytes, when the compiler
    said them. ``flops`` is per device: XLA's count for the whole program
    before partitioning, divided by the devices (a refused compile gives no
    costs of its own). ``attention`` lists the calls of Keras's
    ``dot_product_attention`` the program traced."""

    def __init__(self, message: str, *, needed: int | None, available: int | None,
                 detail: str = "", hint: str = "", flops: float | None = None):
        super().__init__(message, hint=hint)
        self.needed, self.available, self.detail = needed, available, detail
        """``detail`` is the compiler's own message."""
        self.flops = flops
        self.attention: list = []
        self.from_cache = False
        """Whether the refusal was read from the compile cache (the compiler
        gave it for the same program before)."""
        self.peak_source: object = None
        """The compiler's buffer assignment of the refused program
        (:class:`~shardviz.trace.peak.PeakSource`), where it wrote one."""
