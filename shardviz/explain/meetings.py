"""The operands that meet at a collective's site, each a :class:`Meeting`
with its shape, layout and the rule (numbered as the plan numbers it) that
set it."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .explanation import Meeting

if TYPE_CHECKING:
    from ..report import Report


def meetings_of(report: Report, operands) -> list[Meeting]:
    index_of = {r.key: i for i, r in enumerate(report.plan.rules)}
    return [dataclasses.replace(m, rule_index=index_of.get(m.rule) if m.rule else None,
                                via=tuple((v, r, index_of.get(r)) for v, r in m.via))
            for m in _meetings_unnumbered(report, operands)]


def _meetings_unnumbered(report: Report, operands) -> list[Meeting]:
    variables = report.variables.set_index("path")
    activations = report.activations
    out = []
    for name in operands:
        if name in variables.index:
            row = variables.loc[name]
            rule = row["rule"] if row["rule"] not in (None, "<own layout>") else None
            out.append(Meeting(name, "variable", tuple(row["shape"]), tuple(row["spec"]), rule))
        elif name.endswith("/output") and len(activations):
            rows = activations[activations["path"] == name]
            if len(rows):
                row = rows.iloc[0]
                spec = row["actual_spec"]
                via: tuple = ()
                if not row["rule"]:
                    producer = variables[variables["layer"] == name[: -len("/output")]]
                    via = tuple((p, r) for p, r, sp in zip(producer.index, producer["rule"],
                                                           producer["spec"])
                                if r not in (None, "<own layout>") and any(e for e in sp))
                out.append(Meeting(name, "activation", tuple(row["shape"]),
                                   tuple(spec) if spec is not None else None, row["rule"], via))
            else:
                out.append(Meeting(name, "activation", (), None, None))
        elif name.startswith("input:"):
            specs = report.trace.input_specs if report.trace is not None else None
            spec = None
            if specs is not None:
                import jax

                leaves = jax.tree_util.tree_leaves(specs)
                if leaves:
                    spec = tuple(leaves[0].sharding.spec) + (None,) * (
                        len(leaves[0].shape) - len(leaves[0].sharding.spec))
                    out.append(Meeting("the model input", "input", tuple(leaves[0].shape),
                                       spec, None))
                    continue
            out.append(Meeting("the model input", "input", (), None, None))
        else:
            out.append(Meeting(name, "internal", (), None, None))
    return out


def constrained_result(report: Report, row) -> Meeting | None:
    """The site layer's own output, when an /output rule asks it a layout:
    the collective may be what XLA does to give it that layout."""
    activations = report.activations
    if not len(activations) or not row["layer"]:
        return None
    rows = activations[(activations["path"] == f"{row['layer']}/output")
                       & activations["rule"].astype(bool)]
    if not len(rows):
        return None
    a = rows.iloc[0]
    index_of = {r.key: i for i, r in enumerate(report.plan.rules)}
    return Meeting(a["path"], "result", tuple(a["shape"]), tuple(a["requested_spec"]),
                   a["rule"], rule_index=index_of.get(a["rule"]))
