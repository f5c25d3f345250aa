"""What is wrong with a plan on its own, before any model is involved.

:func:`plan_problems` is the body of :meth:`Plan.check
<shardviz.plan.value.Plan.check>`: a batch axis the mesh lacks, duplicate
rule keys, invalid or catastrophically backtracking regexes, unknown axes
and an axis used on two dimensions of one rule, each as a
:class:`~shardviz.errors.Problem` that says where and what to change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import Problem
from ..matching.match import regex_error

if TYPE_CHECKING:
    from .value import Plan


def plan_problems(plan: Plan) -> list[Problem]:
    """The problems :meth:`Plan.check <shardviz.plan.value.Plan.check>` returns."""
    problems = []
    names = set(plan.axis_names)
    if plan.batch_axis not in names:
        problems.append(Problem(
            "error", "batch-axis",
            f"The batch axis {plan.batch_axis!r} is not a mesh axis {list(plan.axis_names)}.",
            hint=f"Set batch_axis to one of {list(plan.axis_names)}.",
        ))
    seen: dict[str, int] = {}
    for i, rule in enumerate(plan.rules):
        if rule.key in seen:
            problems.append(Problem(
                "error", "duplicate-rule",
                f"Rules {seen[rule.key]} and {i} have the same key {rule.key!r}; "
                "Keras's LayoutMap refuses a duplicate key.",
                hint="Delete one of them or merge their axes.", rule=rule.key,
            ))
        else:
            seen[rule.key] = i
        error = regex_error(rule.key)
        if error and error.startswith("it backtracks catastrophically"):
            problems.append(Problem(
                "error", "invalid-regex",
                f"Rule {rule.key!r} cannot be used: {error}",
                hint="Repeat a pattern once rather than a repeated group ('a+' for "
                "'(a+)+', '.*' for '(.*)*'), and make alternatives under a repeat "
                "exclusive.", rule=rule.key,
            ))
        elif error:
            problems.append(Problem(
                "error", "invalid-regex",
                f"Rule {rule.key!r} is not a valid regular expression: {error}.",
                hint="Escape special characters (e.g. '\\(' for a literal '('), "
                "or fix the pattern.", rule=rule.key,
            ))
        unknown = [a for a in rule.axes if a is not None and a not in names]
        if unknown:
            problems.append(Problem(
                "error", "unknown-axis",
                f"Rule {rule.key!r} uses axis {unknown[0]!r}, which the mesh does not "
                f"have; valid axis names: {list(plan.axis_names)}.",
                hint=f"Use one of {list(plan.axis_names)} or None, or add axis "
                f"{unknown[0]!r} to the mesh.", rule=rule.key,
            ))
        used = [a for a in rule.axes if a is not None]
        dupes = sorted({a for a in used if used.count(a) > 1})
        if dupes:
            problems.append(Problem(
                "error", "duplicate-axis",
                f"Rule {rule.key!r} {rule.axes!r} shards two dimensions over axis "
                f"{dupes[0]!r}; a mesh axis can shard only one dimension.",
                hint=f"Keep {dupes[0]!r} on one dimension and use None or another "
                "axis on the others.", rule=rule.key,
            ))
    return problems
