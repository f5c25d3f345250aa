"""Checks of layer-output rules: as Keras will apply them (conflicts,
multi-output layers, ranks, reused layers), and as XLA laid the outputs out
in the traced pass (constraints dropped or padded)."""

from __future__ import annotations

from ..errors import Problem
from ..format import format_spec
from ..layout.assign import OutputLayout
from ..plan import Plan


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
