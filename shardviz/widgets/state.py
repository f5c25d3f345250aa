"""The Explorer's state, apart from its view: plain Python, no front end.

The state holds the current plan and its report, the history for undo and
redo, the last forward pass and whether it is stale, the last failure, and
when to re-run by itself. The Explorer's widgets only render it.

>>> from shardviz import Plan, examples
>>> state = ExplorerState(examples.mlp, Plan({"batch": 2, "model": 4}), inputs=(8, 16))
>>> state.status
'forward pass not run yet'
>>> state.run().trace is not None, state.status.startswith("forward pass fresh")
(True, True)
>>> state.apply(state.plan.with_rule(".*up/kernel", (None, "model")))
True
>>> state.status
'forward pass stale: the plan changed since it ran'
>>> state.undo(); state.plan.rules
()
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..analysis import analyze
from ..errors import ShardvizError
from ..hub.presets import model_of
from ..model.scan import Scan
from ..model.scan import scan as scan_model
from ..plan import Plan, as_plan
from ..report import Report
from ..target import Target, parse_target


class ExplorerState:
    """Everything the Explorer knows, and every change it can make.

    Args:
        model_or_builder: a model, a builder or a :class:`~shardviz.model.scan.Scan`.
        plan: the first plan (a Plan, a Keras distribution or a plan dict).
        inputs: inputs for the forward pass, or None for variables only.
        train_step: trace the train step ``model.fit`` runs instead of a
            forward pass.
        labels: with ``train_step``, the labels (y) as ``fit`` takes them.
        target, slices: the hardware planned for.
        auto_run: re-run the pass after an edit when the last attempt was
            cheap (at most ``cheap_seconds``), and after a failure as soon
            as the plan changes.
    """

    def __init__(self, model_or_builder: Any, plan: Any, inputs: Any = None, *,
                 train_step: bool = False, labels: Any = None,
                 target: str | Target | None = None, slices: int = 1,
                 auto_run: bool = True, cheap_seconds: float = 1.0) -> None:
        model_or_builder = model_of(model_or_builder)  # a name (hub:NAME) is its builder
        self.source = model_or_builder
        """The model, builder or scan as given: what a question that builds the
        model anew (``shardviz.fit`` with fine-tune settings) starts from."""
        self.scan = model_or_builder if isinstance(model_or_builder, Scan) else scan_model(
            model_or_builder, inputs=inputs)
        self.inputs = inputs
        self.train_step = train_step
        self.labels = labels
        self.target = parse_target(target, slices)
        self.auto_run = auto_run
        self.cheap_seconds = cheap_seconds
        self.plan: Plan = as_plan(plan)
        self.report: Report = self.analyze(self.plan)
        self.traced: Report | None = None
        """The last report with a forward pass (possibly of an older plan)."""
        self.failure: ShardvizError | None = None
        """Why the last forward pass failed, while the plan it ran under is current."""
        self.last_seconds: float | None = None
        """How long the last attempt at the pass took, whether or not it failed."""
        self.traced_seconds: float | None = None
        """How long the pass of ``traced`` took."""
        self.history: list[Plan] = []
        self.future: list[Plan] = []
        self._merge: object = None
        self.listeners: list[Callable[[Plan, Plan], None]] = []
        """Called with ``(old, new)`` whenever the plan changes."""

    # ------------------------------------------------------------ analysis
    def analyze(self, plan: Plan, inputs: Any = None, **kwargs: Any) -> Report:
        return analyze(self.scan, plan, inputs, target=self.target, **kwargs)

    @property
    def fresh(self) -> bool:
        """Whether the last forward pass ran under the current plan."""
        return self.traced is not None and self.traced.plan == self.plan

    @property
    def status(self) -> str:
        """The forward pass in words, for the header."""
        if self.inputs is None:
            return "no inputs given: variables only"
        if self.failure is not None:
            return "forward pass failed under this plan: " + self.failure.message
        if self.fresh:
            seconds = f" ({self.traced_seconds:.2f} s)" if self.traced_seconds is not None else ""
            return f"forward pass fresh{seconds}"
        if self.traced is not None:
            return "forward pass stale: the plan changed since it ran"
        return "forward pass not run yet"

    @property
    def wants_run(self) -> bool:
        """Whether the pass should run now by itself: auto-run is on, there are
        inputs, the pass is not fresh, and the last attempt was cheap (or
        there was none yet)."""
        if self.inputs is None or not self.auto_run or self.fresh or self.failure is not None:
            return False
        return self.last_seconds is None or self.last_seconds <= self.cheap_seconds

    # ------------------------------------------------------------ edits
    def apply(self, plan: Plan, record: bool = True, merge: object = None) -> bool:
        """Make ``plan`` current (analysing it first; a ShardvizError leaves
        everything as it was). Returns whether the plan changed.

        Successive edits with the same ``merge`` tag (the keystrokes of one
        rule key, say) make one step of undo history.
        """
        plan = as_plan(plan)
        if plan == self.plan:
            return False
        report = self.analyze(plan)
        old = self.plan
        if record:
            if merge is None or merge != self._merge or not self.history:
                self.history.append(old)
            self.future.clear()
        self._merge = merge if record else None
        self.plan, self.report = plan, report
        # A failure belongs to the plan it ran under: a new plan clears it,
        # and auto-run may try again.
        self.failure = None
        for listener in list(self.listeners):
            listener(old, plan)
        return True

    def undo(self) -> None:
        if self.history:
            current = self.plan
            if self.apply(self.history[-1], record=False):
                self.history.pop()
                self.future.append(current)

    def redo(self) -> None:
        if self.future:
            current = self.plan
            if self.apply(self.future[-1], record=False):
                self.future.pop()
                self.history.append(current)

    def set_target(self, target: str | Target | None, slices: int = 1) -> None:
        """Plan for other hardware; a ShardvizError leaves the old target."""
        new = parse_target(target, slices)
        old = self.target
        self.target = new
        try:
            report = self.analyze(self.plan)
        except ShardvizError:
            self.target = old
            raise
        self.report, self.traced, self.failure, self.last_seconds = report, None, None, None

    # ------------------------------------------------------------ the pass
    def run(self, progress: Callable[[str], object] | None = None) -> Report:
        """Run the forward pass (or train step) under the current plan. A
        pass that fails is kept as ``failure``; the report still holds every
        variable."""
        if self.inputs is None:
            raise ShardvizError("The Explorer has no inputs, so there is no forward pass to run.",
                                hint="Create it with inputs=..., e.g. inputs=(8, 128).")
        start = time.perf_counter()
        report = self.analyze(self.plan, self.inputs, train_step=self.train_step,
                              labels=self.labels if self.train_step else None,
                              progress=progress)
        self.last_seconds = time.perf_counter() - start
        self.report = report
        if report.trace_error is not None:
            self.failure = report.trace_error
        else:
            self.failure = None
            self.traced, self.traced_seconds = report, self.last_seconds
        return report
