"""Checks: the silent mistakes in a plan, as :class:`~shardviz.errors.Problem` records.

Each check says what is wrong, where (path, rule), and what to change.
Checks only read the scan, the plan and the computed layouts.
"""

from __future__ import annotations

from .errors import Problem
from .geometry import MeshModel, format_spec
from .layouts import OutputLayout, VariableLayout
from .match import near_misses, rule_usage, suggest_key
from .plan import Plan
from .model_scan import Scan

DEFAULT_REPLICATED_THRESHOLD = 16 * 2**20
"""Variables at least this large (bytes) left fully replicated are flagged."""


def human_bytes(n: float) -> str:
    """``1536`` as ``'1.5 KiB'``.

    >>> human_bytes(3 * 2**30)
    '3.0 GiB'
    """
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def variable_problems(plan: Plan, layouts: list[VariableLayout], mesh: MeshModel,
                      replicated_threshold: int) -> list[Problem]:
    problems = []
    for vl in layouts:
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
            continue
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
            if (
                mesh.size > 1
                and vl.geometry.replicas == mesh.size
                and vl.geometry.bytes >= replicated_threshold
            ):
                problems.append(Problem(
                    "warning", "replicated-large",
                    f"Variable {path!r} {vl.info.shape} ({human_bytes(vl.geometry.bytes)}) is "
                    f"fully replicated on all {mesh.size} devices"
                    + (" because no rule matches it." if vl.source == "none" else "."),
                    hint="Add a rule that shards one of its dims over a mesh axis whose size "
                    f"divides it (mesh: {dict(mesh.mesh)}).",
                    path=path, rule=rule,
                ))
            continue
        if error.kind in ("unknown-axis", "duplicate-axis", "invalid-regex"):
            continue  # reported once per rule by Plan.check
        where = f"rule {rule!r}" if vl.source == "rule" else "its own layout"
        problems.append(Problem(
            "error", error.kind,
            f"Variable {path!r} {vl.info.shape}: {where} {tuple(vl.axes)!r} cannot be "
            f"applied: {error.message}.",
            hint=error.hint[:1].upper() + error.hint[1:] + ".",
            path=path, rule=rule,
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
    paths = scan.paths
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
            misses = near_misses(key, paths) if len(paths) < 20000 else []
            better = suggest_key(key, paths) if misses else None
            hint = "Keras matches a key against the whole path (re.fullmatch)."
            if better:
                hint += f" Did you mean {better!r}? It matches {misses[0]!r}."
            elif misses:
                hint += f" The closest paths are {misses}."
            else:
                hint += " Check the paths in report.variables (and report.outputs)."
            what = "output path" if rule.is_output else "variable or output path"
            problems.append(Problem(
                "warning", "unused-rule",
                f"Rule {key!r} matches no {what}, so it does nothing; whatever it was "
                "meant for stays replicated.",
                hint=hint, rule=key,
            ))
        elif u["status"] == "shadowed":
            problems.append(Problem(
                "warning", "unused-rule",
                f"Rule {key!r} matches {u['matches']} path(s), but an exact key takes "
                "each of them, so it never applies.",
                hint="Remove it, or remove the exact keys if this rule should win.", rule=key,
            ))
    return problems, usage


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
        f"{len(pinned)} variable(s), e.g. {pinned[0].info.path!r}, carry their own layout, "
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
