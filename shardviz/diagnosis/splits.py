"""The audit's search for splits on the wrong dimension: each rule's mesh
axes moved to other dims of the variables it matches, alone, with the next
rule's (a pair of kernels that feed each other, such as a column- and a
row-parallel one), and every rule's at once; each alternative compiled, and
kept only when it needs fewer collective bytes per device and no more
memory. Never by names: only the compiled programs decide. A shape group
of a rule's variables (query and key/value kernels) gets its own split only
where the rule's split cannot divide every shape. The alternatives are
ranked by compiles that skip the CPU backend's machine-code optimizations
(:func:`~shardviz.trace.compile.ranking_compiles`); the one shown is
compiled again as Keras would compile it."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Callable

from ..analysis import analyze, ranking_compiles
from ..model.scan import Scan
from ..plan import Plan
from ..plan.rule import Rule
from ..report import Report, Settings
from ..strategy.rules import rules_for

BETTER = 0.05
"""An alternative is kept when it needs this fraction fewer collective bytes
per device (5%), and no more memory."""

Edits = dict[int, list[tuple[str, tuple]]]
"""Rule index to the rules that replace it."""


@dataclasses.dataclass(frozen=True)
class Split:
    """One rule of the best alternative found: how it splits now, and the
    rules that replace it."""

    rule: Rule
    matched: list[str]
    """The variable paths the rule matches."""
    replacement: list[tuple[str, tuple]]
    moved: list[str]
    """The paths whose split moves (all of ``matched``, or those of one shape)."""


def better_splits(scan: Scan, plan: Plan, base: Report, run: Settings,
                  say: Callable[[str], object]) -> tuple[Plan, Report, list[Split]] | None:
    """The best plan found by moving rules' mesh axes to other dims, its
    compiled report and the rules it changed; None when nothing compiled
    is better than ``plan``."""
    shapes = {v.path: tuple(v.shape) for v in scan.variables}
    options: dict[int, list[tuple[list[tuple[str, tuple]], list[str]]]] = {}
    swaps: dict[int, tuple[list[tuple[str, tuple]], list[str]]] = {}
    matched_of: dict[int, list[str]] = {}
    for i, rule in enumerate(plan.rules):
        matched = [p for p in scan.variable_paths if p in shapes and re.fullmatch(rule.key, p)]
        if not matched or any(len(shapes[p]) != len(shapes[matched[0]]) or len(shapes[p]) < 2
                              for p in matched):
            continue
        matched_of[i] = matched
        groups: dict[tuple, list[str]] = {}
        for p in matched:
            groups.setdefault(shapes[p], []).append(p)
        whole = alternatives(rule.axes, list(groups), plan.mesh_dict)
        tries = [(matched, axes) for axes in whole]
        if len(groups) > 1:  # a shape's own split, where the rule's cannot divide every shape
            tries += [(members, axes) for shape, members in groups.items()
                      for axes in alternatives(rule.axes, [shape], plan.mesh_dict)
                      if axes not in whole]
        options[i] = [(_replacement(scan, rule, members, matched, axes), members)
                      for members, axes in tries]
        swap = _swap(rule.axes, len(shapes[matched[0]]))
        if swap is not None:
            movable = [p for p in matched if _divides(shapes[p], swap, plan.mesh_dict)]
            if movable:
                swaps[i] = (_replacement(scan, rule, movable, matched, swap), movable)
    trials: list[dict[int, tuple[list[tuple[str, tuple]], list[str]]]] = [
        {i: option} for i, opts in options.items() for option in opts]
    ordered = sorted(swaps)
    trials += [{i: swaps[i], j: swaps[j]} for i, j in zip(ordered, ordered[1:])]
    if len(swaps) > 2:
        trials.append(dict(swaps))
    ranked: list[tuple[tuple, int]] = []
    with ranking_compiles():
        for n, trial in enumerate(trials):
            edits: Edits = {i: replacement for i, (replacement, _) in trial.items()}
            say("audit: " + "; ".join(f"{k} as {a}" for r in edits.values() for k, a in r))
            alt = analyze(scan, edited(plan, edits), settings=run)
            if alt.trace_error is None and _better(alt, base):
                ranked.append((_key(alt, trial), n))
    for _, n in sorted(ranked):  # the figures shown come from a default compile
        trial = trials[n]
        report = analyze(scan, edited(plan, {i: r for i, (r, _) in trial.items()}), settings=run)
        if report.trace_error is None and _better(report, base):
            break
    else:
        return None
    splits = [Split(plan.rules[i], matched_of[i], replacement, members)
              for i, (replacement, members) in sorted(trial.items())]
    return edited(plan, {i: r for i, (r, _) in trial.items()}), report, splits


def _key(report: Report, trial: dict) -> tuple[int, int, int]:
    """Fewest collective bytes, then least memory, then fewest edits."""
    return (report.totals.collective_bytes or 0, report.totals.bytes_per_device, len(trial))


def _swap(axes: tuple, rank: int) -> tuple | None:
    """The rule's mesh axes the other way round: two or more placed axes
    reversed among their dims, or one axis of a 2-D kernel on the other dim.

    >>> _swap(("model", "batch", None), 3), _swap(("model",), 2), _swap((None, "m", None), 3)
    (('batch', 'model', None), (None, 'model'), None)
    """
    spec = list(axes) + [None] * (rank - len(axes))
    dims = [d for d, a in enumerate(spec) if a is not None]
    if len(dims) >= 2:
        out = list(spec)
        for d, a in zip(dims, reversed([spec[d] for d in dims])):
            out[d] = a
        return tuple(out)
    if len(dims) == 1 and rank == 2:
        return tuple(reversed(spec))
    return None


def _replacement(scan: Scan, rule: Rule, members: list[str], matched: list[str],
                 axes: tuple) -> list[tuple[str, tuple]]:
    """The rules that replace ``rule``: ``axes`` for ``members``, the rule's
    own axes for the rest it matched (keys that match nothing else)."""
    if len(members) == len(matched):
        return [(rule.key, axes)]
    specs = {p: (axes if p in members else tuple(rule.axes)) for p in matched}
    return rules_for(specs, scan.variable_paths + scan.other_paths)


def alternatives(axes: tuple, shapes: list[tuple[int, ...]], mesh: dict[str, int]) -> list[tuple]:
    """The rule's mesh axes on other dims, each dividing every shape.

    >>> alternatives(("model", None), [(64, 32)], {"model": 4})
    [(None, 'model')]
    """
    rank = len(shapes[0])
    placed = [a for a in axes if a is not None]
    if not placed:
        return []
    current = tuple(list(axes) + [None] * (rank - len(axes)))[:rank]
    out = []
    for dims in itertools.permutations(range(rank), len(placed)):
        spec: list[object] = [None] * rank
        for d, a in zip(dims, placed):
            spec[d] = a
        candidate = tuple(spec)
        if candidate != current and all(_divides(s, candidate, mesh) for s in shapes):
            out.append(candidate)
    return out


def _divides(shape: tuple[int, ...], spec: tuple, mesh: dict[str, int]) -> bool:
    for dim, axis in zip(shape, spec):
        if axis is None:
            continue
        names = axis if isinstance(axis, tuple) else (axis,)
        if dim % math.prod(mesh.get(n, 1) for n in names):
            return False
    return True


def _better(alt: Report, base: Report) -> bool:
    a, b = alt.totals, base.totals
    if a.collective_bytes is None or b.collective_bytes is None:
        return False
    return (a.collective_bytes < (1 - BETTER) * b.collective_bytes
            and a.bytes_per_device <= b.bytes_per_device)


def edited(plan: Plan, edits: Edits) -> Plan:
    """``plan`` with rule ``i`` replaced by the rules ``edits[i]``."""
    rules: list[tuple[str, tuple]] = []
    for i, r in enumerate(plan.rules):
        rules += edits.get(i, [(r.key, tuple(r.axes))])
    return Plan(plan.mesh_dict, rules, plan.batch_axis)
