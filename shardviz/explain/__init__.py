"""Why a collective is there, and what removes it.

:func:`explain_collective` (``report.why(i)``) reads one row of
``report.collectives``: the op where the layouts meet (its *site*), the
variables and activations that meet there, their layouts and the rules that
set them. It says in words what XLA communicates and why, then looks for a
fix by counterfactual: each local change the layouts suggest (move a
variable's split to another dimension, split a producer the same way, drop
a rule) is re-analysed with the real compiler, and the best change that
removes or shrinks this collective without adding communication is the
``fix``. Every figure in a fix comes from its own compiled program.

>>> import shardviz
>>> from shardviz import Plan, examples
>>> plan = Plan({"batch": 2, "model": 4}, {".*up/kernel": (None, "model"),
...                                        ".*down/kernel": (None, "model")})
>>> report = shardviz.analyze(examples.mlp, plan, inputs=(8, 16))
>>> why = report.why(0)
>>> why.kind, why.layer, why.rules
('all-gather', 'down', ('.*down/kernel', '.*up/kernel'))
>>> why.fix.rules[1].key, why.fix.rules[1].axes
('.*down/kernel', ('model', None))
"""

from __future__ import annotations

import dataclasses
import html
import re
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..errors import ShardvizError
from ..format import format_spec, human_bytes
from ..plan import Plan
from ..trace.sources import short_file

if TYPE_CHECKING:
    from ..report import Report

NO_RULE = "no rule: the default replicated layout"
MAX_CANDIDATES = 8
"""The most counterfactual plans compiled for one explanation."""


@dataclasses.dataclass(frozen=True)
class Meeting:
    """One operand at the site: a variable or an activation, its layout, and
    the rule that set it."""

    name: str
    kind: str
    """``"variable"``, ``"activation"``, ``"input"``, ``"internal"``, or
    ``"result"``: the site's own output, when an /output rule constrains it."""
    shape: tuple
    """Empty when unknown (a value inside an enclosing layer's call)."""
    spec: tuple | None
    rule: str | None
    """The rule key that set the layout; None when none did."""
    via: tuple = ()
    """For an activation no /output rule sets: ``(variable, rule, rule index)``
    of the producing layer's split variables, whose layouts XLA propagated."""
    rule_index: int | None = None
    """The position of ``rule`` in the plan, as the rule editor numbers it."""

    def describe(self) -> str:
        shape = f" {self.shape}" if self.shape else ""
        if self.spec is None:
            return f"`{self.name}`{shape}"
        layout = format_spec(self.spec)
        if self.kind == "result":
            return (f"{_rule(str(self.rule), self.rule_index)} asks its result "
                    f"`{self.name}`{shape} to be {layout}")
        if self.rule:
            how = f"by {_rule(self.rule, self.rule_index)}"
        elif self.kind == "variable":
            how = f"({NO_RULE})"
        elif self.kind == "input":
            how = "(the batch layout Keras gives inputs)"

        elif self.via:
            how = ("(no /output rule: XLA propagated it from "
                   + " and ".join(f"`{v}` ({_rule(r, i)})" for v, r, i in self.via) + ")")
        else:
            how = "(no /output rule: XLA chose it by propagation)"
        return f"`{self.name}`{shape} is {layout} {how}"


@dataclasses.dataclass
class Tried:
    """One counterfactual plan and what the compiler made of it."""

    change: str
    plan: Plan
    outcome: str
    comm_bytes: int | None = None
    """Collective bytes per device over the whole program, or None if it
    did not compile."""
    bytes_per_device: int | None = None
    """Variable bytes per device."""
    removes: bool = False
    """Whether this collective is gone or smaller."""
    report: Any = dataclasses.field(default=None, repr=False)


@dataclasses.dataclass
class Explanation:
    """What one collective communicates, why, and what removes it.

    Displays itself in notebooks (HTML) and terminals (``print``)."""

    index: int
    kind: str
    layer: str
    site: str
    source: str
    source_from: str
    text: str
    """What is communicated and why, in plain words."""
    rules: tuple[str, ...]
    """The rule keys involved."""
    meetings: tuple[Meeting, ...]
    fix: Plan | None
    """A plan that removes or shrinks this collective, or None."""
    fix_change: str = ""
    fix_cost: str = ""
    """What the fix costs elsewhere, or why there is none."""
    fix_report: Any = dataclasses.field(default=None, repr=False)
    tried: tuple[Tried, ...] = ()

    def __str__(self) -> str:
        return self.text_block()

    def text_block(self, width: int = 88) -> str:
        """The explanation as plain text, wrapped to ``width`` columns."""
        lines = [f"Collective {self.index}: {self.kind} at {self.layer or '?'}",
                 f"  source: {short_file(self.source) if self.source else 'unknown'}"
                 + (f" (from {self.source_from})" if self.source_from not in ("", "itself")
                    else ""),
                 "", *_wrap(self.text, width), ""]
        if self.fix is not None:
            lines += _wrap(f"Fix: {self.fix_change}", width) + _wrap(self.fix_cost, width)
        else:
            lines += ["No local fix.", *_wrap(self.fix_cost, width)]
        if self.tried:
            lines += ["", "Tried:"]
            for t in self.tried:
                wrapped = _wrap(f"{t.change}: {t.outcome}", width - 4)
                lines += ["  - " + wrapped[0]] + ["    " + w for w in wrapped[1:]]
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))

    def _repr_html_(self) -> str:
        esc = html.escape
        fix = (f"<p><b>Fix:</b> {_code(self.fix_change)}<br>{_code(self.fix_cost)}</p>"
               if self.fix is not None else f"<p><b>No local fix.</b> {_code(self.fix_cost)}</p>")
        tried = "".join(f"<li>{_code(t.change)}: {_code(t.outcome)}</li>" for t in self.tried)
        source = esc(short_file(self.source)) if self.source else "unknown"
        return (
            "<div class='shardviz-why' style='max-width:60em'>"
            f"<p><b>{esc(self.kind)}</b> at <code>{esc(self.layer or '?')}</code>, "
            f"<span style='color:#555'>{source}</span></p>"
            f"<p>{_code(self.text)}</p>{fix}"
            + (f"<details><summary>{len(self.tried)} changes tried</summary><ul>{tried}</ul>"
               "</details>" if self.tried else "")
            + "</div>")


def _rule(key: str, index: int | None) -> str:
    """``rule 2 `.*down/kernel```, numbered as the plan (and the editor) number it."""
    return f"rule {index} `{key}`" if index is not None else f"rule `{key}`"


def _code(text: str) -> str:
    """Markdown-ish backticks to <code>, the rest escaped."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _wrap(text: str, width: int = 88) -> list[str]:
    import textwrap

    return [line for para in text.split("\n") for line in (textwrap.wrap(para, width) or [""])]


def _row(report: Report, which: object) -> tuple[int, Any]:
    frame = report.collectives
    if len(frame) == 0:
        raise ShardvizError(
            "This report has no collectives to explain"
            + (" (its forward pass did not run)." if report.trace is None else "."),
            hint="Analyse with inputs=... so that the pass is compiled, then call why(i) "
            "with an index into report.collectives.")
    if isinstance(which, pd.DataFrame):
        raise ShardvizError(
            f"why() takes one collective, and this is a table of {len(which)} rows.",
            hint="Pass an index (report.why(0)) or one row (report.collectives.iloc[0]).")
    row_given = hasattr(which, "name") and hasattr(which, "get") \
        and not isinstance(which, (int, str))
    index = which.name if row_given else which  # type: ignore[attr-defined]
    import numbers

    if isinstance(index, bool) or not isinstance(index, numbers.Integral) \
            or not -len(frame) <= int(index) < len(frame):
        raise ShardvizError(
            f"why({_short(which)}): there is no collective {_short(index)}; this report has "
            f"{len(frame)} (rows 0 to {len(frame) - 1} of report.collectives).",
            hint="Pass an index into report.collectives, or one of its rows.")
    i = int(index) % len(frame)
    if row_given and not _same_row(which, frame.iloc[i]):
        mine = frame.iloc[i]
        raise ShardvizError(
            f"why(row): this row is not row {i} of this report's collectives (that is the "
            f"{mine['kind']} {mine['name']!r} at `{mine['layer']}`; the row given is the "
            f"{which.get('kind')} {which.get('name')!r} at `{which.get('layer')}`): it "  # type: ignore[attr-defined]
            "comes from another report.",
            hint="Call why() on the report whose collectives the row came from "
            "(other_report.why(row)), or pass an index into this report's collectives.")
    return i, frame.iloc[i]


_ROW_KEYS = ("kind", "name", "layer", "pass", "op_name", "bytes_per_device")


def _same_row(given, mine) -> bool:
    """Whether a row handed to why() is this report's row (same collective)."""
    try:
        return all(given.get(k) == mine[k] for k in _ROW_KEYS)
    except (TypeError, ValueError):
        return False


def _short(value: object) -> str:
    """A value for a one-line message: ints as they are, the rest quoted and cut."""
    import numbers

    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(value)
    text = " ".join(str(value).split())
    return repr(text if len(text) <= 40 else text[:39] + "…")


def _meetings(report: Report, operands) -> list[Meeting]:
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


def _constrained_result(report: Report, row) -> Meeting | None:
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


def _split_dims(spec: tuple | None, axes: tuple) -> list[int]:
    """Dims of ``spec`` split over any of ``axes``."""
    if spec is None:
        return []
    out = []
    for d, entry in enumerate(spec):
        names = entry if isinstance(entry, tuple) else (entry,)
        if any(str(n).split(":")[0] in axes for n in names if n):
            out.append(d)
    return out


def _contraction(row, meetings: list[Meeting]) -> tuple[Meeting, int, Meeting, int] | None:
    """For a Dense- or EinsumDense-like site: the activation operand and its
    contracted dim, and the kernel and its contracted dim. Dense contracts an
    input's last dim with dim 0 of its kernel; an einsum names its dims in
    the op (``abcd,cde->abe``)."""
    kernels = [m for m in meetings if m.kind == "variable" and m.shape and len(m.shape) >= 2]
    data = [m for m in meetings if m.kind != "variable" and m.shape]
    if len(kernels) != 1 or len(data) != 1:
        return None
    kernel, x = kernels[0], data[0]
    equation = re.search(r"([a-z]+),([a-z]+)->([a-z]+)", row["site"] or "")
    if equation:
        lhs, rhs, out = equation.groups()
        shared = [c for c in lhs if c in rhs and c not in out]
        if shared and len(lhs) == len(x.shape) and len(rhs) == len(kernel.shape):
            return x, lhs.index(shared[0]), kernel, rhs.index(shared[0])
        return None
    if str(row["site"]).endswith("dot_general") and len(kernel.shape) == 2 \
            and x.shape[-1] == kernel.shape[0]:
        return x, len(x.shape) - 1, kernel, 0
    return None


def _kernel_contracted(row, meetings: list[Meeting]) -> tuple[Meeting, list[int]] | None:
    """The kernel at the site and its contracted dims, from the einsum in
    the op's name (``abcd,cde->abe``) or, for a Dense, dim 0."""
    kernels = [m for m in meetings if m.kind == "variable" and m.shape and len(m.shape) >= 2]
    if len(kernels) != 1:
        return None
    kernel = kernels[0]
    equation = re.search(r"([a-z]+),([a-z]+)->([a-z]+)", row["site"] or "")
    if equation:
        lhs, rhs, out = equation.groups()
        if len(rhs) != len(kernel.shape):
            return None
        return kernel, [i for i, c in enumerate(rhs) if c in lhs and c not in out]
    if str(row["site"]).endswith("dot_general") and len(kernel.shape) == 2:
        return kernel, [0]
    return None


def _why_text(report: Report, row, meetings: list[Meeting]) -> tuple[str, bool]:
    """What is communicated and why, in words; and whether the collective
    is the price of splitting a contraction (row parallelism)."""
    kind, layer = row["kind"], row["layer"] or "?"
    axes = tuple(row["axes"])
    over = ", ".join(f"`{a}`" for a in axes) or "the devices"
    size = human_bytes(int(row["bytes_per_device"]))
    primitive = re.sub(r"[()]", "", str(row["site"]).rsplit("/", 1)[-1]) if row["site"] \
        else "an op"
    lines = []
    split_contraction = False
    if meetings:
        lines.append(f"At `{layer}` ({primitive}) these layouts meet: "
                     + "; ".join(m.describe() for m in meetings) + ".")
    pair = _contraction(row, meetings)
    if pair is not None:
        x, xd, kernel, kd = pair
        x_split = x.spec is not None and xd in _split_dims(x.spec, axes)
        k_split = kernel.spec is not None and kd in _split_dims(kernel.spec, axes)
        krule = _rule(kernel.rule, kernel.rule_index) if kernel.rule else NO_RULE
        if kind == "all-gather" and x_split and not k_split:
            lines.append(
                f"`{layer}` contracts dim {xd} of `{x.name}` with dim {kd} of `{kernel.name}`, "
                f"which {krule} leaves unsplit over {over} while its input arrives split "
                f"over {over}; XLA all-gathers the input ({size} per device).")
        elif kind == "all-gather" and k_split and not x_split:
            lines.append(
                f"`{layer}` contracts dim {xd} of `{x.name}` with dim {kd} of `{kernel.name}`; "
                f"{krule} splits that dim over {over} but the input arrives whole there, so "
                f"XLA all-gathers the kernel ({size} per device).")
        elif kind in ("all-reduce", "reduce-scatter") and x_split and k_split:
            split_contraction = True
            lines.append(
                f"`{layer}` contracts dim {xd} of `{x.name}` with dim {kd} of `{kernel.name}`, "
                f"and both are split over {over} ({krule}): each device holds a partial sum, "
                f"and XLA {'all-reduces' if kind == 'all-reduce' else 'reduce-scatters'} "
                f"them ({size} per device). This is the price of splitting the contraction "
                "(row parallelism): a column-parallel layer before it and a row-parallel one "
                "after pay it once per pair.")
    elif kind in ("all-reduce", "reduce-scatter"):
        kernel_dims = _kernel_contracted(row, meetings)
        if kernel_dims is not None:
            kernel, dims = kernel_dims
            split = [d for d in dims if d in _split_dims(kernel.spec, axes)]
            if split:
                split_contraction = True
                krule = _rule(kernel.rule, kernel.rule_index) if kernel.rule else NO_RULE
                lines.append(
                    f"`{layer}` contracts over dim {split[0]} of `{kernel.name}`, which {krule} "
                    f"splits over {over}: each device holds a partial sum, and XLA "
                    f"{'all-reduces' if kind == 'all-reduce' else 'reduce-scatters'} them "
                    f"({size} per device). This is the price of splitting the contraction "
                    "(row parallelism, or attention split by heads).")
    batch = report.plan.batch_axis
    if row["pass"] != "forward" and kind in ("all-reduce", "reduce-scatter") \
            and batch in axes:
        lines.append(
            f"In the {row['pass']} pass, each replica along `{batch}` computed gradients on "
            f"its own rows of the batch; XLA sums them over `{batch}` "
            f"({'all-reduce' if kind == 'all-reduce' else 'reduce-scatter'}, {size} per "
            "device). This is the price of data parallelism.")
    if len(lines) < 2:
        lines.append(_generic(kind, over, size, layer))
    return "\n".join(lines), split_contraction


def _generic(kind: str, over: str, size: str, layer: str) -> str:
    return {
        "all-gather": f"An operand split over {over} is needed whole (or split another way) at "
                      f"`{layer}`, so XLA all-gathers it ({size} per device).",
        "all-reduce": f"`{layer}` leaves a partial result on each device along {over}, and XLA "
                      f"adds them up with an all-reduce ({size} per device).",
        "reduce-scatter": f"`{layer}` leaves partial sums along {over}; XLA adds them up and "
                          f"splits the result (reduce-scatter, {size} per device).",
        "all-to-all": f"The split moves from one dimension to another over {over} at `{layer}`: "
                      f"XLA exchanges shards all-to-all ({size} per device).",
        "collective-permute": f"Shards move between devices along {over} at `{layer}`, because "
                              f"the layouts that meet there order the devices differently "
                              f"({size} per device).",
    }.get(kind, f"XLA communicates {size} per device over {over} at `{layer}`.")


def _divides(shape, spec, sizes: dict) -> bool:
    for n, entry in zip(shape, spec):
        names = entry if isinstance(entry, tuple) else (entry,)
        k = 1
        for a in names:
            if a:
                k *= sizes.get(a, 1)
        if n % k:
            return False
    return True


def _candidates(report: Report, row, meetings: list[Meeting]) -> list[tuple[str, Plan]]:
    plan = report.plan
    sizes = plan.mesh_dict
    axes = tuple(row["axes"])
    variables = report.variables.set_index("path")
    targets: list[str] = [m.name for m in meetings if m.kind == "variable"]
    # The same split on the producer: the variables of layers whose outputs meet here.
    for m in meetings:
        if m.kind == "activation":
            producer = m.name[: -len("/output")]
            targets += [p for p in variables.index
                        if variables.loc[p, "layer"] == producer and len(variables.loc[p, "shape"]) >= 2]
    out: list[tuple[str, Plan]] = []
    seen: set[Plan] = set()

    def add(change: str, candidate: Plan) -> None:
        if candidate != plan and candidate not in seen:
            seen.add(candidate)
            out.append((change, candidate))

    for path in dict.fromkeys(targets):
        row_v = variables.loc[path]
        shape, spec = tuple(row_v["shape"]), tuple(row_v["spec"])
        rule = str(row_v["rule"]) if row_v["rule"] not in (None, "<own layout>") else None
        alternatives: list[tuple[str, tuple]] = []
        if len(shape) == 2 and spec[0] != spec[1]:
            alternatives.append(("the transposed split", (spec[1], spec[0])))
        used = [e for e in spec if e is not None]
        for d in range(len(shape)):
            for entry in used:
                moved = tuple(entry if i == d else (None if e == entry else e)
                              for i, e in enumerate(spec))
                if moved != spec:
                    alternatives.append((f"split dim {d}", moved))
        if not used:
            for a in axes:
                for d in range(len(shape)):
                    alternatives.append((f"split dim {d} over {a!r}",
                                         tuple(a if i == d else None for i in range(len(shape)))))
        for label, new in alternatives:
            if not _divides(shape, new, sizes):
                continue
            new = tuple(new)
            if rule is not None:
                candidate = plan.with_rule_at(plan.rule_index(rule), axes=tuple(new))
                add(f"rule `{rule}`: {format_spec(spec)} → {format_spec(new)} ({label})",
                    candidate)
            else:
                key = re.escape(path)
                add(f"new rule `{key}`: {format_spec(new)} ({label})",
                    plan.with_rule(key, tuple(new)))
        if rule is not None:
            add(f"drop rule `{rule}` (replicate what it splits)", plan.without_rule(rule))
    for m in meetings:
        if m.kind == "activation" and m.rule:
            add(f"drop /output rule `{m.rule}`", plan.without_rule(m.rule))
    site_rule = f"{row['layer']}/output"
    for r in plan.rules:
        if r.is_output and re.fullmatch(r.key, site_rule) and not any(
                c.startswith(f"drop /output rule `{r.key}`") for c, _ in out):
            add(f"drop /output rule `{r.key}`", plan.without_rule(r.key))
    return out[:MAX_CANDIDATES]


def _at_site(c: pd.DataFrame, kind: str, layer: str) -> int:
    if not len(c):
        return 0
    return int(c[(c["kind"] == kind) & (c["layer"] == layer)]["bytes_per_device"].sum())


def _changes(before: pd.DataFrame, after: pd.DataFrame) -> str:
    """The collectives that a fix adds or removes, in words."""
    def counts(c: pd.DataFrame) -> dict:
        out: dict = {}
        for _, row in c.iterrows():
            key = (row["kind"], row["layer"])
            n, b = out.get(key, (0, 0))
            out[key] = (n + 1, b + int(row["bytes_per_device"]))
        return out

    a, b = counts(before), counts(after)
    parts = []
    for key in sorted(set(a) | set(b)):
        (na, ba), (nb, bb) = a.get(key, (0, 0)), b.get(key, (0, 0))
        if (na, ba) == (nb, bb):
            continue
        kind, layer = key
        if nb == 0:
            parts.append(f"removes the {kind} at `{layer}` ({human_bytes(ba)})")
        elif na == 0:
            parts.append(f"adds {'an' if kind[0] == 'a' else 'a'} {kind} at `{layer}` "
                         f"({human_bytes(bb)})" if nb == 1 else
                         f"adds {nb} {kind}s at `{layer}` ({human_bytes(bb)})")
        elif ba == bb:
            parts.append(f"splits the {kind} at `{layer}` ({human_bytes(ba)}) into {nb}"
                         if nb > na else f"merges the {kind}s at `{layer}` ({human_bytes(ba)}) "
                         f"into {nb}")
        else:
            parts.append(f"changes the {kind}{'s' if na > 1 else ''} at `{layer}` from "
                         f"{human_bytes(ba)} to {human_bytes(bb)}")
    return "; ".join(parts) or "leaves the collectives as they were"


def explain_collective(report: Report, which: object, *, search: bool = True,
                       progress: Callable[[str], object] | None = None) -> Explanation:
    """The :class:`Explanation` of row ``which`` of ``report.collectives``
    (an index, or a row). With ``search=False`` no counterfactual plan is
    compiled, and ``fix`` is None. ``progress(line)`` hears of each plan as
    it is compiled.

    On a train step, the plans are compared on their forward passes, where
    the collective is (a train step costs several times a forward pass to
    compile), and the explanation says so."""
    index, row = _row(report, which)
    meetings = _meetings(report, tuple(row["operands"]))
    text, split_contraction = _why_text(report, row, meetings)
    result = _constrained_result(report, row) if row["pass"] == "forward" else None
    if result is not None:
        text = (f"At `{row['layer'] or '?'}`, {result.describe()}, so XLA must produce that "
                "layout there.\n" + text)
        meetings.append(result)
    rules = tuple(sorted({m.rule for m in meetings if m.rule}
                         | {r for m in meetings for _, r, _ in m.via}))
    base = dict(index=index, kind=row["kind"], layer=row["layer"], site=row["site"],
                source=row["source"], source_from=row["source_from"], text=text, rules=rules,
                meetings=tuple(meetings))
    if not rules:
        base["text"] = text + f"\nRules involved: none ({NO_RULE})."
    if not search:
        return Explanation(**base, fix=None, fix_cost="Not searched (search=False).")
    if row["pass"] != "forward":
        return Explanation(**base, fix=None, fix_cost=(
            f"Fixes are searched for forward-pass collectives; this one is in the "
            f"{row['pass']} pass, where layer names do not identify a collective across "
            "plans. Explain the forward-pass collective at the same layer instead."))
    compared, tried = _try_all(report, row, meetings, progress)
    good = [t for t in tried if t.removes]
    if not good:
        if tried:
            reason = ("Every local change tried leaves at least as much communication (or "
                      "more bytes on every device).")
        else:
            reason = ("There is no local change to try: no rule or variable meets here, and "
                      "the layouts come from XLA's propagation. Change the layer that produces "
                      "the input (see the collectives before this one), or constrain it with "
                      "an /output rule.")
        if compared.note:
            reason = compared.note
        if split_contraction:
            reason = ("None of the local changes helps: this reduction is the price of "
                      "splitting the contraction. Removing it means replicating the kernel "
                      "(more bytes on every device) or gathering the input (more communication)."
                      " " + reason)
        return Explanation(**base, fix=None, fix_cost=reason, tried=tuple(tried))
    # Changes that keep every device's bytes come first: a fix that only
    # works by replicating is offered when nothing else removes the collective.
    before_bytes = report.variable_bytes_per_device
    best = min(good, key=lambda t: ((t.bytes_per_device or 0) > before_bytes, t.comm_bytes,
                                    t.bytes_per_device))
    what = ("Forward-pass communication per device (the train step was not recompiled: "
            "analyse the fix with train_step=True for its whole cost)"
            if compared.screened else "Communication per device")
    cost = [f"{what}: {human_bytes(compared.comm_bytes)} → "
            f"{human_bytes(best.comm_bytes or 0)}; it "
            f"{_changes(compared.collectives, best.report.collectives)}."]
    before = report.variable_bytes_per_device
    if best.bytes_per_device is not None and best.bytes_per_device != before:
        cost.append(f"Variables per device: {human_bytes(before)} → "
                    f"{human_bytes(best.bytes_per_device)}.")
    else:
        cost.append("Variables per device are unchanged.")
    return Explanation(**base, fix=best.plan, fix_change=best.change, fix_cost=" ".join(cost),
                       fix_report=best.report, tried=tuple(tried))


@dataclasses.dataclass
class _Base:
    """What the counterfactual plans are compared with: the report's own
    collectives, or on a train step those of its plan's forward pass."""

    collectives: pd.DataFrame
    comm_bytes: int
    """The collectives' bytes per device, from the report's totals."""
    variable_bytes: int
    screened: bool
    note: str = ""
    """Why no plan could be judged, when none could."""


@dataclasses.dataclass
class Cache:
    """What explaining a report's collectives has computed: the
    explanations by row, and each counterfactual plan's report."""

    explanations: dict[int, Explanation] = dataclasses.field(default_factory=dict)
    counterfactuals: dict[Any, Report] = dataclasses.field(default_factory=dict)


_CACHES: weakref.WeakKeyDictionary[Report, Cache] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def cache_of(report: Report) -> Cache:
    """The explanation cache of ``report``, kept beside it (not on it) for
    as long as the report lives."""
    with _CACHES_LOCK:
        cache = _CACHES.get(report)
        if cache is None:
            cache = _CACHES[report] = Cache()
        return cache


def _analyse(report: Report, plan: Plan, args: dict) -> Report:
    """``plan`` analysed like ``report`` with ``args``, kept on the report
    so that explaining its other collectives does not compile it again."""
    analyze = report._reanalyse
    if analyze is None:
        raise ShardvizError(
            "This report was not made by shardviz.analyze, so why() cannot analyse other "
            "plans to find a fix.", hint="Call explain_collective(report, i, search=False), "
            "or analyse the model with shardviz.analyze.")
    key = (plan, tuple(sorted((k, repr(v)) for k, v in args.items())))
    cache = cache_of(report).counterfactuals
    if key not in cache:
        cache[key] = analyze(report.scan, plan, **args)
    return cache[key]


def _try_all(report: Report, row, meetings: list[Meeting],
             progress: Callable[[str], object] | None = None) -> tuple[_Base, list[Tried]]:
    import time

    say = progress or (lambda line: None)
    args = dict(report.arguments)
    args["mode"] = "abstract"
    args["progress"] = None
    screened = bool(args.get("train_step"))
    candidates = _candidates(report, row, meetings)
    started = time.perf_counter()

    def tell(i: int, what: str) -> None:
        say(f"why({row.name}): plan {i} of {len(candidates) + screened}, "
            f"{time.perf_counter() - started:.0f} s: {what}")

    if screened:
        # The collective is in the forward pass: compare forward passes.
        args["train_step"] = False
        args.pop("labels", None)
        args.pop("optimizer", None)
        tell(1, "compiling this plan's forward pass")
        own = _analyse(report, report.plan, args)
        base = _Base(own.collectives, own.totals.collective_bytes or 0,
                     report.variable_bytes_per_device, True)
        if own.trace is None:  # compare whole train steps, then
            args = dict(report.arguments, mode="abstract", progress=None)
            base = _Base(report.collectives, report.totals.collective_bytes or 0,
                         report.variable_bytes_per_device, False)
    else:
        base = _Base(report.collectives, report.totals.collective_bytes or 0,
                     report.variable_bytes_per_device, False)
    before_site = _at_site(base.collectives, row["kind"], row["layer"])
    if base.screened and before_site == 0:
        base.note = (f"The forward pass alone has no {row['kind']} at `{row['layer']}`: the "
                     "train step needs it for what follows the model (its loss or metrics), "
                     "so forward passes cannot judge a change to it, and a train step per "
                     "change costs too much to search.")
        return base, []
    comm_before = base.comm_bytes
    out = []
    for i, (change, plan) in enumerate(candidates, start=1 + screened):
        tell(i, f"trying {change}")
        quick = _analyse(report, plan, {})
        errors = quick.errors
        if errors:
            out.append(Tried(change, plan, f"Keras refuses it: {errors[0].message}"))
            continue
        after = _analyse(report, plan, args)
        if after.trace is None:
            msg = after.trace_error.message if after.trace_error else "the pass did not run"
            out.append(Tried(change, plan, f"does not compile: {msg}"))
            continue
        comm = after.totals.collective_bytes or 0
        at_site = _at_site(after.collectives, row["kind"], row["layer"])
        # A fix removes or shrinks this collective and lowers the total
        # communication; swapping it for an equal one elsewhere is no fix.
        removes = at_site < before_site and (
            comm < comm_before
            or (comm == comm_before
                and after.variable_bytes_per_device < base.variable_bytes))
        outcome = (f"{_changes(base.collectives, after.collectives)}; "
                   f"{'forward-pass ' if base.screened else ''}communication "
                   f"{human_bytes(comm_before)} → {human_bytes(comm)} per device")
        if after.variable_bytes_per_device != base.variable_bytes:
            outcome += (f"; variables {human_bytes(base.variable_bytes)} → "
                        f"{human_bytes(after.variable_bytes_per_device)} per device")
        out.append(Tried(change, plan, outcome, comm, after.variable_bytes_per_device, removes,
                         after))
    if candidates:
        say(f"why({row.name}): {len(out)} plans tried in {time.perf_counter() - started:.0f} s")
    return base, out
