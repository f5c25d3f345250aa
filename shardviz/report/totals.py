"""A report's totals (:class:`Totals`): one frozen value, computed once,
that every reader takes instead of adding frames up itself."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Totals:
    """A report's totals, computed once: what ``summary()``, the planner,
    sweep, the fix search and the CLI read instead of adding frames up
    themselves."""

    bytes_per_device: int
    """The most any device needs: the compiled program's total (or the
    compiler's own figure when it refused the program), else the variables
    alone."""
    variable_bytes_per_device: int
    compiled: bool
    """Whether a pass (or train step) was compiled."""
    collectives: int | None
    """How many collectives the compiled program has; None untraced."""
    collective_bytes: int | None
    """Their bytes per device, summed; None untraced."""
    step_seconds: float | None
    """The step-time estimate's bound (the largest of compute, memory and
    collectives), or None where no step time applies."""
    fits: bool | None
    """The one verdict (``Report.fits``)."""
