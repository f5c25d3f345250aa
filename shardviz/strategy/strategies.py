"""The strategies :func:`~shardviz.planner.suggest` tries on every
factorisation of the device count, each a Plan with a short reason per
rule (:data:`REASONS`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..checks.gradients import grouped_inputs, split_over
from ..plan import Plan
from .meshes import factorisations
from .reason_checks import Reason
from .roles import AFTER_FUSED, roles
from .rules import rules_for
from .specs import (
    activations_dominate,
    fully_sharded_specs,
    grouped_input_specs,
    lora_specs,
    sequence_parallel_specs,
    tensor_parallel_specs,
)

if TYPE_CHECKING:
    from ..model.scan import Scan


REASONS = {
    "column": "column-parallel: {layers} split{s} the output features over `{axis}`, and the "
              "row-parallel layer after takes them as they are, so a pair costs one all-reduce "
              "instead of two all-gathers",
    "row": "row-parallel: {layers} contract{s} over features split over `{axis}`; one all-reduce "
           "adds the partial sums (the price of the pair)",
    "column-bias": "the bias of a column-parallel layer is split like its output features",
    "heads-in": "attention split by heads over `{axis}`: {heads}",
    "heads-in-bias": "the bias of a head projection is split by heads, like its kernel",
    "heads-out": "the output projection takes the heads as they are split (row-parallel): one "
                 "all-reduce per attention block",
    "experts": "expert parallel: each device holds and computes 1/{k} of the experts of "
               "{layers}, and their outputs are combined over `{axis}`",
    "experts-inner": "each expert of {layers} is split inside over `{axis}` (the experts do "
                     "not divide over it)",
    "embedding": "the embedding table is split by vocabulary over `{axis}`: each device holds "
                 "1/{k} of the rows and looks up (gathers) the tokens whose rows it holds, and "
                 "the rows found are combined over `{axis}`",
    "embedding-hidden": "the embedding table is split by hidden size over `{axis}` (its "
                        "vocabulary does not divide)",
    "sequence": "sequence-parallel: norms and residual adds work on a slice of the sequence "
                "split over `{axis}`, so their activations take less memory, at the price of "
                "gathering the sequence before each tensor-parallel block (the compiled "
                "candidate shows that cost)",
    "grouped-input": "the input of {layers}, grouped convolution{s}, is split by channels over "
                     "`{axis}`: otherwise XLA sums a grouped convolution's kernel gradient over "
                     "the copies of the batch on `{axis}` too, and the train step's gradient "
                     "comes out {k} times too large (wrong-gradient; measured in Keras's own "
                     "train step by bench/probes/depthwise_gradient.py)",
    "lora": "LoRA factors follow their kernel's split (A its input dims, B its output dim), so "
            "the low-rank path adds no communication",
    "other": "{layers} split{s} over `{axis}`; what it does could not be read from its shape, "
             "so the compiled candidate is the one to judge it by",
    "fsdp": "fully sharded over `{axis}`: each device keeps 1/{k} of every large variable, and "
            "XLA brings a layer's weights together (or combines its partial results) over "
            "`{axis}` where the layer runs",
}


def candidate_plans(scan: Scan, n: int, sequence: bool = True
                ) -> list[tuple[str, Plan, dict[str, str]]]:
    """Every strategy on every factorisation of ``n``; sequence-parallel
    variants only with ``sequence`` (they differ from tensor parallel only in
    activation memory, which only a compile measures)."""
    paths = list(scan.variable_paths)
    layer_of = {v.path: v.layer for v in scan.variables}
    role_sets = {v: {r.path: r for r in roles(scan, v)} for v in AFTER_FUSED}
    role_of = role_sets["row"]
    # Both readings of a square kernel after a widening one, where they differ.
    variants = AFTER_FUSED if role_sets["column"] != role_of else ("row",)
    out: list[tuple[str, Plan, dict[str, str]]] = []
    grouped = grouped_inputs(scan)

    def plan_of(mesh: dict[str, int], specs: dict[str, tuple], kinds: dict[str, str], axis_for,
                role_of: dict = role_of):
        rules = rules_for(specs, paths + list(scan.other_paths))
        reasons = {}
        shape_of = {v.path: v.shape for v in scan.variables}
        for key, _ in rules:
            matched = [p for p in paths if re.fullmatch(key, p)]
            # A key that also matches variables without a role speaks of the one with it.
            member = next((p for p in matched if p in kinds), matched[0])
            kind = kinds.get(member, "fsdp")
            role = role_of.get(member)
            if kind == "embedding" and dict(rules)[key][0] != "model":
                kind = "embedding-hidden"
            if kind == "experts" and dict(rules)[key][0] != "model":
                kind = "experts-inner"
            axis = axis_for(kind)
            size = mesh.get(axis, 1)
            counts = {shape_of[p][role.dim] for p in matched
                      if role is not None and role.dim is not None
                      and role.kind in ("heads-in", "heads-in-bias")}
            heads = counts.pop() if len(counts) == 1 else None
            heads_text = (f"each device computes {heads // size} of the {heads} heads" if heads
                          else f"each device computes 1/{size} of each layer's heads")
            layers = sorted({layer_of[p] for p in matched})
            layers_text = (f"`{layers[0]}`" if len(layers) == 1 else
                           f"`{layers[0]}` and {len(layers) - 1} more like it")
            text = REASONS[kind].format(layers=layers_text, s="s" if len(layers) == 1 else "",
                                        axis=axis, k=size, heads=heads_text)
            gathered = kind != "fsdp" and "batch" in dict(rules)[key]
            if gathered:
                text += "; and " + REASONS["fsdp"].format(axis="batch", k=mesh.get("batch", 1))
            reasons[key] = Reason(text, kind, tuple(layers), axis, gathered)
        return Plan(mesh, rules, batch_axis="batch"), reasons

    def with_grouped(entry: tuple, model: int) -> tuple:
        """A candidate with the ``/output`` rules that split the channels of
        each grouped convolution's input over ``model``."""
        label, plan, reasons = entry
        split = {g.feed for g in split_over(plan, scan, grouped, ["model"])}
        specs = {path: spec for path, spec in grouped_input_specs(grouped, "model", model).items()
                 if path not in split}  # a column-parallel layer's output is split already
        if not specs:
            return entry
        extra = rules_for(specs, list(scan.output_paths + scan.other_paths))
        plan = plan.with_rules([(r.key, r.axes) for r in plan.rules] + extra)
        convs = {g.feed: g.name for g in grouped}
        for key, _ in extra:
            layers = sorted(convs[p] for p in specs if re.fullmatch(key, p))
            text = (f"`{layers[0]}`" if len(layers) == 1 else
                    f"`{layers[0]}` and {len(layers) - 1} more like it")
            reasons[key] = Reason(REASONS["grouped-input"].format(
                layers=text, s="" if len(layers) == 1 else "s", axis="model", k=model),
                "grouped-input", tuple(layers), "model")
        return label, plan, reasons

    for batch, model in factorisations(n):
        mesh = {"batch": batch, "model": model}
        first = len(out)
        for variant in variants if model > 1 else ("row",):
            for entry in _candidates(scan, mesh, variant, role_sets[variant], plan_of, grouped,
                                     sequence):
                if all(entry[1].rules != other[1].rules for other in out[first:]):
                    out.append(entry)
        if batch > 1 and model > 1:  # the batch is copied over `model`
            out[first:] = [with_grouped(entry, model) for entry in out[first:]]
    return out


VARIANT_LABELS = {"row": "", "column": " (square kernel after a widening one split by output)"}
"""What a candidate's label adds for each value of ``after_fused``
(:data:`~.roles.AFTER_FUSED`), where a model gives both."""


def _candidates(scan: Scan, mesh: dict[str, int], variant: str, role_of: dict, plan_of,
                grouped: list, sequence: bool) -> list[tuple[str, Plan, dict[str, str]]]:
    """The strategies on one mesh, with the roles of one ``after_fused``
    variant."""
    batch, model = mesh["batch"], mesh["model"]
    out: list[tuple[str, Plan, dict[str, str]]] = []
    tp = tensor_parallel_specs(scan, "model", model, variant) if model > 1 else {}
    kinds = {p: role_of[p].kind for p in tp}
    tp = lora_specs(scan, tp)
    kinds.update({p: "lora" for p in tp if p not in kinds})
    tp_axis = lambda kind: "batch" if kind == "fsdp" else "model"  # noqa: E731
    suffix = VARIANT_LABELS[variant]

    def add(label: str, plan: Plan, reasons: dict) -> None:
        out.append((label + suffix, plan, reasons))

    if model == 1:
        add("data parallel", *plan_of(mesh, {}, {}, tp_axis, role_of))
    elif tp or (batch > 1 and grouped_input_specs(grouped, "model", model)):
        # A model axis that splits nothing would only replicate; one that splits the
        # channels of grouped convolutions' inputs (with_grouped) does split.
        label = "tensor parallel" if batch == 1 else "data × tensor parallel"
        add(label, *plan_of(mesh, tp, kinds, tp_axis, role_of))
    if batch > 1:
        fs = fully_sharded_specs(scan, "batch", batch, tp)
        if fs != tp:
            label = "fully sharded" if model == 1 else "fully sharded × tensor parallel"
            add(label, *plan_of(mesh, fs, kinds, tp_axis, role_of))
    if sequence and model > 1 and tp and activations_dominate(scan, model):
        sp = sequence_parallel_specs(scan, model)
        if batch > 1:  # a grouped convolution's input keeps its channels split instead
            feeds = grouped_input_specs(grouped, "model", model)
            sp = {path: spec for path, spec in sp.items() if path not in feeds}
        if sp:
            plan, reasons = plan_of(mesh, tp, kinds, tp_axis, role_of)
            extra = rules_for(sp, list(scan.output_paths + scan.other_paths))
            plan = plan.with_rules([(r.key, r.axes) for r in plan.rules] + extra)
            for key, _ in extra:
                reasons[key] = REASONS["sequence"].format(axis="model")
            label = ("tensor × sequence parallel" if batch == 1
                     else "data × tensor × sequence parallel")
            add(label, plan, reasons)
    return out
