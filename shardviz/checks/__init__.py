"""Checks: the silent mistakes in a plan, as :class:`~shardviz.errors.Problem` records.

Each check says what is wrong, where (path, rule), and what to change.
Checks only read the scan, the plan and the computed layouts.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import Problem
from ..format import format_spec, human_bytes, plural
from ..layout.assign import OutputLayout, VariableLayout
from ..layout.geometry import MeshModel
from ..layout.match import Match, regex_error, rule_usage
from ..model.scan import Scan
from ..plan import Plan

DEFAULT_REPLICATED_THRESHOLD = 16 * 2**20
"""Variables at least this large (bytes) left fully replicated are flagged."""


def variable_problems(plan: Plan, layouts: list[VariableLayout], mesh: MeshModel,
                      replicated_threshold: int) -> list[Problem]:
    """The problems of each variable's layout. A layout is kept across
    re-analyses while its match and axes stay the same, and so are its
    problems (they name only its own path, rule keys and shapes)."""
    problems = []
    for vl in layouts:
        cached = vl.problems
        if cached is None or cached[0] != replicated_threshold:
            cached = (replicated_threshold, _problems_of(vl, plan, mesh, replicated_threshold))
            vl.problems = cached
        problems += cached[1]
    return problems


def _problems_of(vl: VariableLayout, plan: Plan, mesh: MeshModel,
                 replicated_threshold: int) -> list[Problem]:
    problems = []
    path, m = vl.info.path, vl.match
    rule = plan.rules[m.rule].key if m.rule is not None else None
    if m.how == "conflict":
        keys = [plan.rules[i].key for i in m.candidates]
        problems.append(Problem(
            "error", "conflict",
            f"Variable {path!r} matches {len(keys)} rules {keys}; Keras raises "
            "ValueError ('matches multiple layout specification keys') when it "
            "creates this variable.",
            hint=f"Make the keys more specific so only one fullmatches {path!r}, or add "
            f"the exact key {path!r}, which wins over every regex.",
            path=path,
        ))
        return problems
    error = vl.error
    if error is None:
        if vl.source == "rule" and len(vl.axes) < len(vl.info.shape):
            problems.append(Problem(
                "warning", "rank-mismatch",
                f"Rule {rule!r} gives {len(vl.axes)} entries {tuple(vl.axes)!r} for "
                f"{path!r} of rank {len(vl.info.shape)} {vl.info.shape}; Keras silently "
                f"pads it to {format_spec(vl.geometry.spec)}.",
                hint=f"Write all {len(vl.info.shape)} entries so the layout says what it "
                f"means, e.g. {vl.geometry.spec!r}.",
                path=path, rule=rule,
            ))
        problems += replicated_large([vl], plan, mesh, replicated_threshold)
        return problems
    if error.kind in ("unknown-axis", "duplicate-axis", "invalid-regex"):
        return problems  # reported once per rule by Plan.check
    where = f"rule {rule!r}" if vl.source == "rule" else "its own layout"
    problems.append(Problem(
        "error", error.kind,
        f"Variable {path!r} {vl.info.shape}: {where} {tuple(vl.axes)!r} cannot be "
        f"applied: {error.message}.",
        hint=error.hint[:1].upper() + error.hint[1:] + ".",
        path=path, rule=rule,
    ))
    return problems


def replicated_large(layouts, plan: Plan, mesh: MeshModel, threshold: int) -> list[Problem]:
    """A ``replicated-large`` warning for each variable of at least
    ``threshold`` bytes that every device holds whole."""
    problems = []
    for vl in layouts:
        g = vl.geometry
        if vl.error is not None or mesh.size == 1 or g.replicas != mesh.size or g.bytes < threshold:
            continue
        rule = plan.rules[vl.match.rule].key if vl.match.rule is not None else None
        problems.append(Problem(
            "warning", "replicated-large",
            f"Variable {vl.info.path!r} {vl.info.shape} ({human_bytes(g.bytes)}) is "
            f"fully replicated on all {mesh.size} devices"
            + (" because no rule matches it." if vl.source == "none" else "."),
            hint="Add a rule that shards one of its dims over a mesh axis whose size "
            f"divides it (mesh: {dict(mesh.mesh)}).",
            path=vl.info.path, rule=rule,
        ))
    return problems


def output_problems(plan: Plan, outputs: list[OutputLayout]) -> list[Problem]:
    problems = []
    for ol in outputs:
        m, path, info = ol.match, ol.info.path, ol.info
        if m.how == "conflict":
            keys = [plan.rules[i].key for i in m.candidates]
            problems.append(Problem(
                "error", "conflict",
                f"Output {path!r} of layer {info.layer!r} matches {len(keys)} rules "
                f"{keys}; Keras raises ValueError when the layer is called.",
                hint=f"Make the keys more specific, or add the exact key {path!r}.",
                path=path, layer=info.layer,
            ))
            continue
        if ol.axes is None:
            continue
        assert m.rule is not None  # an output has axes only when a rule wins it
        rule = plan.rules[m.rule].key
        if info.symbolic_structure:
            n = len(info.shapes)
            problems.append(Problem(
                "error", "multi-output-rule",
                f"Rule {rule!r} constrains the output of layer {info.layer!r} "
                f"({info.layer_class}), which returns {n} tensors. Keras applies an /output "
                "layout with distribute_tensor, which passes a single symbolic tensor through "
                "but hands a list of them to jax.device_put: building this model inside the "
                "distribution's scope raises ValueError ('Triggering __jax_array__() during "
                "abstractification').",
                hint="Drop the rule, or constrain the outputs of the layers that consume "
                f"{info.layer!r}'s outputs instead.",
                path=path, rule=rule, layer=info.layer,
            ))
        shapes = [shape for call in (info.call_shapes or (info.shapes,)) for shape in call]
        if shapes:
            rank = min(len(shape) for shape in shapes)
            if len(ol.axes) > rank:
                problems.append(Problem(
                    "error", "rank-mismatch",
                    f"Rule {rule!r} gives {len(ol.axes)} entries {tuple(ol.axes)!r} for the "
                    f"output of layer {info.layer!r}, which has rank {rank}; the "
                    "forward pass fails when Keras applies it.",
                    hint=f"Give exactly {rank} entries.",
                    path=path, rule=rule, layer=info.layer,
                ))
        distinct = list(dict.fromkeys(info.call_shapes))
        if len(distinct) > 1:
            calls = "; ".join(f"call {i}: {', '.join(map(str, shapes))}"
                              for i, shapes in enumerate(info.call_shapes))
            problems.append(Problem(
                "warning", "reused-layer",
                f"Rule {rule!r} constrains all {len(info.call_shapes)} calls of layer "
                f"{info.layer!r}, which return different shapes ({calls}). Keras looks up "
                f"one path, {path!r}, for every call, so the rule cannot tell them apart.",
                hint="Check report.activations (one row per call) that every call gets the "
                "layout you mean; if not, constrain the layers that consume one call instead.",
                path=path, rule=rule, layer=info.layer,
            ))
    return problems


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


def mesh_problems(plan: Plan, mesh: MeshModel, device_count: int) -> list[Problem]:
    if plan.mesh_size > device_count:
        return [Problem(
            "info", "mesh-size",
            f"The mesh {plan.mesh_dict} needs {plan.mesh_size} devices but {device_count} "
            "exist; layouts and memory are computed on an abstract mesh, but nothing "
            "can run on it here.",
            hint=f"To run the forward pass, restart and call "
            f"shardviz.simulate_devices({plan.mesh_size}) before any JAX operation.",
        )]
    if plan.mesh_size < device_count:
        return [Problem(
            "info", "mesh-size",
            f"The mesh {plan.mesh_dict} uses {plan.mesh_size} of the {device_count} devices; "
            "the others stay idle.",
            hint=f"Grow the mesh to {device_count} devices to use them all.",
        )]
    return []


def scan_problems(scan: Scan, layouts: list[VariableLayout]) -> list[Problem]:
    pinned = [vl for vl in layouts if vl.source == "own"]
    if not pinned:
        return []
    return [Problem(
        "info", "pinned-layout",
        f"{plural(len(pinned), 'variable')}, e.g. {pinned[0].info.path!r}, carry their own layout, "
        "which Keras uses instead of any rule.",
        hint="Pass a builder instead of a built model to see a fresh build, or "
        "remove the layout from the variable.",
        path=pinned[0].info.path,
    )]


def activation_problems(plan: Plan, traced) -> list[Problem]:
    """Requested output layouts that XLA did not honour, or honours only by
    padding uneven shards."""
    problems = []
    for a in traced.activations:
        if a.requested is None:
            continue
        want, got = format_spec(a.requested_spec), format_spec(a.actual_spec)
        where = f"the output of layer {a.layer!r} {a.shape}"
        inside, whole = a.honored_inside, a.honored
        if inside and whole and not a.uneven:
            continue
        if a.uneven:
            d, n, axis, k = a.uneven[0]
            fix = (f"Make dim {d} a multiple of {k} (for the batch, the batch size), or shard it "
                   "over an axis that divides it.")
            head = (f"Rule {a.rule!r} asks {want} for {where}, but dim {d} has size {n}, which "
                    f"axis {axis!r} of size {k} does not divide; in eager mode Keras raises "
                    "IndivisibleError here.")
            if inside and whole:
                problems.append(Problem(
                    "warning", "indivisible",
                    head + f" Under jit XLA accepts it silently and pads the shards to "
                    f"{a.shard_shape}.", hint=fix, path=a.path, rule=a.rule, layer=a.layer))
            elif inside:
                problems.append(Problem(
                    "error", "dropped-constraint",
                    head + f" Under jit XLA pads it to uneven shards {a.shard_shape} inside the "
                    f"pass, and silently returns it as {format_spec(a.returned_spec)}.",
                    hint=fix, path=a.path, rule=a.rule, layer=a.layer))
            else:
                problems.append(Problem(
                    "error", "dropped-constraint",
                    head + f" Under jit XLA silently dropped it: the output is {got}.",
                    hint=fix, path=a.path, rule=a.rule, layer=a.layer))
            continue
        returned = f" and returns it as {format_spec(a.returned_spec)}" if not whole and inside \
            else ""
        problems.append(Problem(
            "error", "dropped-constraint",
            f"Rule {a.rule!r} asks {want} for {where}, but XLA gave it {got}{returned}.",
            hint="XLA overrode the constraint; check the layouts of the tensors around it, or "
            "constrain the next layer's output instead.",
            path=a.path, rule=a.rule, layer=a.layer,
        ))
    return problems


def memory_parts(variable_bytes_per_device: int, trace) -> dict[str, int]:
    """Bytes per device by what holds them (see ``Report.memory_parts``)."""
    parts = {"variables": variable_bytes_per_device}
    if trace is None:
        return parts
    optimizer = sum(o.bytes_per_device for o in trace.optimizer_variables)
    if optimizer:
        parts["optimizer state"] = optimizer
    mem = trace.memory
    inputs = (mem["argument_bytes"] + mem.get("unread_bytes", 0) - variable_bytes_per_device
              - optimizer)
    if inputs > 0:
        parts["inputs"] = inputs
    outputs = mem["output_bytes"] - mem["alias_bytes"]
    if outputs > 0:
        parts["outputs"] = outputs
    parts["temporaries"] = mem["temp_bytes"]
    return parts


def needed_bytes(variable_bytes_per_device: int, trace) -> int:
    """The bytes one device needs: the compiled program's arguments, outputs
    and temporaries less what it aliases, plus the arguments it never reads
    (which live on the device all the same), or, with no compiled program,
    the variables alone (a lower bound)."""
    if trace is None:
        return variable_bytes_per_device
    m = trace.memory
    return (m["argument_bytes"] + m.get("unread_bytes", 0) + m["output_bytes"]
            + m["temp_bytes"] - m["alias_bytes"])


def fit_problems(target, layouts: list[VariableLayout], trace, mesh: MeshModel) -> list[Problem]:
    """A ``does-not-fit`` error when a chip of ``target`` needs more memory
    than it has: by the compiled program's own memory analysis, or, without
    a forward pass, by the variables alone."""
    capacity = mesh.capacity_bytes
    if capacity is None:
        return []
    per_device = sum(vl.geometry.bytes_per_device for vl in layouts)
    needed = needed_bytes(per_device, trace)
    if needed <= capacity:
        return []
    parts = memory_parts(per_device, trace)
    return [_does_not_fit(target, needed, capacity, parts, layouts, mesh,
                          estimated=target.estimated)]


def out_of_memory_problem(error, target, layouts: list[VariableLayout],
                          mesh: MeshModel) -> Problem:
    """The compiler's own out-of-memory refusal as a ``does-not-fit`` error."""
    needed, available = error.needed, error.available
    per_device = sum(vl.geometry.bytes_per_device for vl in layouts)
    what = (f"needs {human_bytes(needed)} per chip, and the {target.hardware.name} compiler "
            f"allows {human_bytes(available)}" if needed and available else
            "needs more memory per chip than the compiler allows")
    return Problem(
        "error", "does-not-fit",
        f"{error.message[:-1]} on {target.label}: it {what}. The variables alone take "
        f"{human_bytes(per_device)} per chip. The compiler says: {error.detail}",
        hint=_fit_hint(target, needed or per_device, available or mesh.capacity_bytes or 1,
                       layouts, mesh))


def _does_not_fit(target, needed: int, capacity: int, parts: dict[str, int],
                  layouts: list[VariableLayout], mesh: MeshModel, estimated: bool) -> Problem:
    ranked = sorted(parts.items(), key=lambda kv: -kv[1])
    contributors = ", ".join(f"{name} {human_bytes(b)}" for name, b in ranked if b > 0)
    source = ("estimated from the simulated devices' compiled program"
              if target.estimated else f"by {target.compiler}'s memory analysis")
    if all(name == "variables" for name in parts):
        source = "by the variables alone (no forward pass)"
    return Problem(
        "error", "does-not-fit",
        f"Each chip of {target.label} needs {human_bytes(needed)}, {source}"
        f"{' (an estimate)' if estimated else ''}, but may use {human_bytes(capacity)}: "
        f"{contributors}.",
        hint=_fit_hint(target, needed, capacity, layouts, mesh))


def _fit_hint(target, needed: int, capacity: int, layouts: list[VariableLayout],
              mesh: MeshModel) -> str:
    """What to shard first (the variable whose copies cost the most), and
    about how many chips the whole would need."""
    replicated = sorted((vl for vl in layouts if vl.error is None and vl.geometry.replicas > 1),
                        key=lambda vl: -vl.geometry.bytes_per_device * (vl.geometry.replicas - 1)
                        / vl.geometry.replicas)
    hint = ""
    if replicated and replicated[0].geometry.bytes_per_device > 0.05 * needed:
        vl = replicated[0]
        axes = ", ".join(repr(a) for a in vl.geometry.replicated_over)
        hint = (f"Shard {vl.info.path!r} ({human_bytes(vl.geometry.bytes_per_device)} per chip, "
                f"copied over {axes}): a rule that splits it over those axes frees the most. ")
    chips = -(-needed * mesh.size // capacity)
    hint += (f"Otherwise plan for about {chips} chips ({target.hardware.name} with "
             f"{human_bytes(capacity)} each), if the largest parts shard with the mesh.")
    return hint
