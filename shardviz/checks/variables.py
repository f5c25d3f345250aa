"""Checks of each variable's layout: conflicts, padded ranks, layouts that
cannot apply, large replicated variables, and layouts pinned on variables."""

from __future__ import annotations

from ..errors import Problem
from ..format import format_spec, human_bytes, plural
from ..layout.assign import VariableLayout
from ..layout.geometry import MeshModel
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
    packed = packed_int4_kernels(vl.info.path for vl in layouts)
    for vl in layouts:
        cached = vl.problems
        if cached is None or cached[0] != replicated_threshold:
            cached = (replicated_threshold, _problems_of(vl, plan, mesh, replicated_threshold,
                                                         vl.info.path in packed))
            vl.problems = cached
        problems += cached[1]
    return problems


def packed_int4_kernels(paths) -> set[str]:
    """The kernels Keras's int4 quantization stores packed (two 4-bit values
    a byte) and flattened to 2-D: those beside a ``kernel_zero``.

    >>> sorted(packed_int4_kernels(["d/kernel", "d/kernel_scale", "d/kernel_zero", "e/kernel"]))
    ['d/kernel']
    """
    paths = set(paths)
    return {p for p in paths if p.endswith("kernel") and f"{p}_zero" in paths}


def _problems_of(vl: VariableLayout, plan: Plan, mesh: MeshModel,
                 replicated_threshold: int, packed_int4: bool = False) -> list[Problem]:
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
    message = (f"Variable {path!r} {vl.info.shape}: {where} {tuple(vl.axes)!r} cannot be "
               f"applied: {error.message}.")
    hint = error.hint[:1].upper() + error.hint[1:] + "."
    if packed_int4 and error.kind == "rank-mismatch":
        message += (" int4 quantization stores this kernel packed (two 4-bit values a "
                    "byte) and flattened to 2-D, so the rule written for the float kernel "
                    "no longer fits the kernel model.quantize('int4') creates.")
        hint = ("Give the packed kernel 2 entries (the input dimension, then the packed "
                f"output columns): e.g. the exact key {path!r} with (None, 'model') where "
                "the columns divide. An exact key wins over every regex.")
    problems.append(Problem("error", error.kind, message, hint=hint, path=path, rule=rule))
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


LORA_FACTORS = ("lora_kernel_a", "lora_kernel_b")
"""The variables ``enable_lora`` adds beside a kernel: ``kernel`` is about
``kernel + lora_kernel_a @ lora_kernel_b``."""


def lora_problems(layouts: list[VariableLayout]) -> list[Problem]:
    """One ``lora-unmatched`` note when LoRA factors of split kernels match
    no rule: Keras replicates them, and the rule that follows the kernel's
    split (A its input dims, B its output dim) is named."""
    by_path = {vl.info.path: vl for vl in layouts}
    loose = []
    for vl in layouts:
        head, _, leaf = vl.info.path.rpartition("/")
        if leaf not in LORA_FACTORS or vl.source != "none":
            continue
        kernel = by_path.get(f"{head}/kernel")
        if kernel is None or kernel.error is not None:
            continue
        spec = tuple(kernel.geometry.spec)
        follows = spec[:-1] + (None,) if leaf == "lora_kernel_a" else (None, spec[-1])
        if any(axis is not None for axis in follows):  # the kernel's split reaches it
            loose.append((vl.info.path, spec, follows))
    if not loose:
        return []
    path, spec, follows = loose[0]
    return [Problem(
        "info", "lora-unmatched",
        f"{plural(len(loose), 'LoRA variable')} of split kernels, e.g. {path!r} (its kernel "
        f"is {format_spec(spec)}), match no rule, so Keras replicates them: every device "
        "keeps and updates the whole low-rank factor, and XLA gathers or reduces around it.",
        hint=f"Split each factor as its kernel is: A like the kernel's input dims, B like "
        f"its output dim, e.g. {path!r}: {follows!r}; shardviz.suggest writes these rules.",
        path=path,
    )]


def scan_problems(scan: Scan, layouts: list[VariableLayout]) -> list[Problem]:
    problems = lora_problems(layouts)
    pinned = [vl for vl in layouts if vl.source == "own"]
    if not pinned:
        return problems
    return problems + [Problem(
        "info", "pinned-layout",
        f"{plural(len(pinned), 'variable')}, e.g. {pinned[0].info.path!r}, carry their own layout, "
        "which Keras uses instead of any rule.",
        hint="Pass a builder instead of a built model to see a fresh build, or "
        "remove the layout from the variable.",
        path=pinned[0].info.path,
    )]
