"""Checks of the rules themselves: rules that match nothing or never win,
with a hint from the paths they probably meant, and the short feedback an
editor shows beside each rule."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import Problem
from ..format import plural
from ..matching.match import Match, regex_error, rule_usage
from ..model.scan import Scan
from ..plan import Plan


def rule_problems(plan: Plan, scan: Scan, var_layouts, out_layouts) -> tuple[list[Problem], list[dict]]:
    """Unused and shadowed rules, and the per-rule usage table."""
    matches = [vl.match for vl in var_layouts] + [ol.match for ol in out_layouts]
    usage = rule_usage(plan.rule_keys, matches)
    problems = []
    seen_keys = set()
    for u, rule in zip(usage, plan.rules):
        key = rule.key
        if key in seen_keys:
            continue  # a duplicate key: reported by Plan.check
        seen_keys.add(key)
        if u["status"] == "unused":
            if rule.is_output and scan.outputs_source == "none":
                problems.append(Problem(
                    "info", "unused-rule",
                    f"Rule {key!r} is for layer outputs, but the model's output paths are "
                    "unknown, so it could not be checked.",
                    hint="Pass `inputs=` so shardviz can trace a forward pass.", rule=key,
                ))
                continue
            problems.append(_unused_rule(scan, rule))
        elif u["status"] == "shadowed":
            problems.append(Problem(
                "warning", "unused-rule",
                f"Rule {key!r} matches {plural(u['matches'], 'path')}, but an exact key takes "
                "each of them, so it never applies.",
                hint="Remove it, or remove the exact keys if this rule should win.", rule=key,
            ))
    return problems, usage


def rule_feedback(plan: Plan, var_layouts, out_layouts, usage,
                  ranks_of: Callable[[str], list[int]] | None = None) -> list[dict]:
    """For each rule, what an editor shows beside it: ``level`` (``"ok"``,
    ``"warn"`` or ``"error"``), a short ``feedback`` text ("✓ 2 paths, rank
    2", "matches nothing", "conflicts with rule 1 on 'd/kernel'"), and
    ``ranks``, the ranks of the tensors it matches (``ranks_of(key)``, when
    given, answers that from a cache).

    >>> from shardviz.model.scan import Scan, VariableInfo
    >>> from shardviz.layout.geometry import mesh_model
    >>> from shardviz.layout.assign import variable_layouts
    >>> info = VariableInfo("d/kernel", (4, 8), "float32", True)
    >>> scan = Scan(None, "functional", (info,), (), "none")
    >>> plan = Plan({"model": 2}, {"d/kernel": (None, "model"), "x": ("model",)})
    >>> layouts = variable_layouts(scan, plan, mesh_model(plan.mesh, True))
    >>> _, usage = rule_problems(plan, scan, layouts, [])
    >>> [(f["level"], f["feedback"]) for f in rule_feedback(plan, layouts, [], usage)]
    [('ok', '✓ 1 path, rank 2'), ('warn', 'matches nothing')]
    """
    n = len(plan.rules)
    conflicts: list[dict] = [{} for _ in range(n)]
    for m in [vl.match for vl in var_layouts if vl.match.how == "conflict"] + [
            ol.match for ol in out_layouts if ol.match.how == "conflict"]:
        for i in m.candidates:
            for k in m.candidates:
                if k != i:
                    conflicts[i].setdefault(k, m.path)
    if ranks_of is None:
        ranks: list[set] = [set() for _ in range(n)]
        tensors: list[tuple[Match, int | None]] = [(vl.match, len(vl.info.shape))
                                                   for vl in var_layouts]
        tensors += [(ol.match, len(ol.info.shapes[0]) if ol.info.shapes else None)
                    for ol in out_layouts]
        for m, rank in tensors:
            for i in m.candidates:
                if rank is not None:
                    ranks[i].add(rank)
    else:
        ranks = [set(ranks_of(rule.key)) for rule in plan.rules]
    names = set(plan.axis_names)
    first_of: dict[str, int] = {}
    out = []
    for i, (rule, u) in enumerate(zip(plan.rules, usage)):
        first = first_of.setdefault(rule.key, i)
        rs = sorted(ranks[i])
        rank = rs[0] if len(rs) == 1 else (max(rs) if rs else None)
        error = regex_error(rule.key)
        unknown = [a for a in rule.axes if a is not None and a not in names]
        level = "error"
        if error:
            text = f"invalid regex: {error}"
        elif first != i:
            text = f"same key as rule {first}"
        elif unknown:
            text = f"unknown axis {unknown[0]!r}; mesh axes: {sorted(names)}"
        elif conflicts[i]:
            k = min(conflicts[i])
            text = f"conflicts with rule {k} on {conflicts[i][k]!r}"
        else:
            level = "warn"
            if u["status"] == "blocked":
                text = f"matches {u['matches']}, but an invalid rule makes Keras fail"
            elif u["status"] == "unused":
                text, rs = "matches nothing", []
            elif u["status"] == "shadowed":
                text = f"matches {u['matches']}, but exact keys win"
            else:
                text = f"✓ {plural(u['wins'], 'path')}"
                if rank is not None:
                    text += f", rank {rank}" if len(rs) == 1 else f", ranks {rs}"
                    if len(rule.axes) != rank and len(rs) == 1:
                        text += f" (rule has {len(rule.axes)} entries)"
                level = "ok" if len(rule.axes) == (rank or len(rule.axes)) else "warn"
        out.append({"level": level, "feedback": text, "ranks": tuple(rs)})
    return out


def _unused_rule(scan: Scan, rule) -> Problem:
    """The problem of a rule that matches nothing, with a hint from the
    paths it probably meant; made once per key for a scan."""
    cache = scan.path_index.problems
    problem = cache.get(rule.key)
    if problem is not None:
        return problem
    key = rule.key
    misses = scan.path_index.near_misses(key)
    better = scan.path_index.suggest_key(key) if misses else None
    hint = "Keras matches a key against the whole path (re.fullmatch)."
    if better:
        hint += f" Did you mean {better!r}? It matches {misses[0]!r}."
    elif misses:
        hint += f" The closest paths are {misses}."
    else:
        hint += " Check the paths in report.variables (and report.outputs)."
    what = "output path" if rule.is_output else "variable or output path"
    problem = cache[key] = Problem(
        "warning", "unused-rule",
        f"Rule {key!r} matches no {what}, so it does nothing; whatever it was "
        "meant for stays replicated.",
        hint=hint, rule=key,
    )
    return problem
