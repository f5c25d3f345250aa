"""The rule editor: an ordered table of layout rules with live feedback."""

from __future__ import annotations

import html
import re

import ipywidgets as widgets

from ..errors import ShardvizError
from ..plan import Plan
from ..render.palette import STATUS_COLOURS
from .common import Debouncer, set_if_changed

NONE = "—"


def suggestions(report, limit: int = 2000) -> list[str]:
    """Keys to offer: every path, and each path with its numbers generalised
    (``block_3_q/kernel`` gives ``block_\\d+_q/kernel``), most general first."""
    paths = list(report.rule_paths)
    general = []
    for path in paths:
        if re.search(r"\d", path):
            key = re.sub(r"\d+", r"\\d+", path)
            if key not in general:
                general.append(key)
    return (general + paths)[:limit]


def rule_feedback(report) -> list[tuple[str, str, int | None]]:
    """For each rule: ``(level, text, rank)``, read off ``report.rules``:
    level ``"ok"``, ``"warn"`` or ``"error"``, a short text for its row, and
    the rank of what it matches (the largest, if several)."""
    rules = report.rules
    return [(level, text, max(ranks) if ranks else None)
            for level, text, ranks in zip(rules["level"], rules["feedback"], rules["ranks"])]


def BUTTON():  # noqa: N802 (a layout factory, read like a constant)
    """A row button's layout: it never shrinks to "+…" beside a long row."""
    return widgets.Layout(width="32px", min_width="32px", flex="0 0 auto")


DIM_WIDTH = 100
"""Pixels per dimension dropdown; every row's dims take the widest rule's
room, so that the buttons line up across rules of different rank."""

COLOURS = {"ok": STATUS_COLOURS["ok"], "warn": STATUS_COLOURS["warning"],
           "error": STATUS_COLOURS["error"]}


class RuleEditor:
    """Edits the ordered rules of the current plan. Edits go through
    ``propose(edit)``, as in :class:`~shardviz.widgets.mesh.MeshEditor`."""

    def __init__(self, propose, debounce: float = 0.3):
        self.propose = propose
        self._debounce = Debouncer(debounce)
        self._refused: dict[int, tuple[str, str, str]] = {}
        """Row to (the key typed, why it was refused, the key the rule kept): kept
        until that field changes, and moved with its rule when rules are added,
        moved or deleted."""
        self._entered = False
        """Whether the last edit added a rule from Enter in the new-key box (a
        click on "add rule" right after it, as the box loses focus, is not
        another add)."""
        self.rows = widgets.VBox()
        self.message = widgets.HTML()
        self.new_key = widgets.Combobox(placeholder="new rule: a path or a regex, then Enter",
                                        ensure_option=False, continuous_update=False,
                                        layout=widgets.Layout(width="300px"))
        self.new_key.add_class("shardviz-new-rule-key")
        self.new_key.observe(self._new_key_entered, "value")
        add = widgets.Button(description="add rule", icon="plus", layout=widgets.Layout(width="110px"))
        add.add_class("shardviz-add-rule")
        add.on_click(self._add)
        self._syncing = False
        self._report = None
        self.box = widgets.VBox([
            widgets.HTML("<b>Layout rules</b> <span style='color:#555'>(LayoutMap keys: exact "
                         "path first, then <code>re.fullmatch</code>)</span>"),
            self.rows, widgets.HBox([self.new_key, add]), self.message,
        ])
        self.box.add_class("shardviz-rules")

    def sync(self, plan: Plan, report):
        self._syncing = True
        try:
            self._report = report
            feedback = rule_feedback(report)
            options = suggestions(report)
            set_if_changed(self.new_key, "options", tuple(options))
            self._follow_refusals(plan)
            rows = list(self.rows.children)
            if len(rows) != len(plan.rules):
                # Rows are by position: keep those that stay, so that a field's
                # typed text and focus survive another rule's arrival.
                rows = rows[:len(plan.rules)]
                rows += [self._row(i) for i in range(len(rows), len(plan.rules))]
                self.rows.children = rows
            widest = max((len(rule.axes) for rule in plan.rules), default=1)
            for i, (row, rule) in enumerate(zip(self.rows.children, plan.rules)):
                self._fill(row, i, rule, plan, feedback[i], options)
                dims = row.children[2]
                set_if_changed(dims.layout, "width", f"{DIM_WIDTH * widest}px")
                set_if_changed(dims.layout, "flex", "0 0 auto")
        finally:
            self._syncing = False

    def _follow_refusals(self, plan: Plan) -> None:
        """Move each refusal to the row of the rule it was typed over (a rule
        added, moved or deleted shifts rows); drop it when that rule is gone."""
        keys = plan.rule_keys
        moved = {}
        for i, (typed, why, kept) in self._refused.items():
            j = i if i < len(keys) and keys[i] == kept else (
                keys.index(kept) if kept in keys else None)
            if j is not None and j not in moved:
                moved[j] = (typed, why, kept)
        self._refused = moved

    def _row(self, i: int):
        index = widgets.HTML(layout=widgets.Layout(width="24px"))
        key = widgets.Combobox(ensure_option=False, continuous_update=True,
                               layout=widgets.Layout(width="250px"))
        key.add_class("shardviz-rule-key")
        key.observe(lambda change, i=i: self._key_changed(i, change), "value")
        dims = widgets.HBox()
        plus = widgets.Button(icon="plus", tooltip="add a dimension", layout=BUTTON())
        minus = widgets.Button(icon="minus", tooltip="remove the last dimension",
                               layout=BUTTON())
        up = widgets.Button(icon="arrow-up", tooltip="move up", layout=BUTTON())
        down = widgets.Button(icon="arrow-down", tooltip="move down", layout=BUTTON())
        delete = widgets.Button(icon="trash", tooltip="delete this rule", layout=BUTTON())
        delete.add_class("shardviz-delete-rule")
        plus.on_click(lambda _, i=i: self._resize(i, +1))
        minus.on_click(lambda _, i=i: self._resize(i, -1))
        up.on_click(lambda _, i=i: self._move(i, i - 1))
        down.on_click(lambda _, i=i: self._move(i, i + 1))
        delete.on_click(lambda _, i=i: self._delete(i))
        feedback = widgets.HTML(layout=widgets.Layout(width="260px"))
        feedback.add_class("shardviz-rule-feedback")
        row = widgets.HBox([index, key, dims, plus, minus, up, down, delete, feedback])
        row.add_class("shardviz-rule")
        return row

    def _fill(self, row, i, rule, plan, feedback, options):
        index, key, dims, *_, fb = row.children
        set_if_changed(index, "value", f"<code>{i}</code>")
        set_if_changed(key, "options", tuple(options))
        refused = self._refused.get(i)
        if refused is None:
            set_if_changed(key, "value", rule.key)
            key.remove_class("shardviz-refused")
        else:  # never overwrite text the user typed that was refused
            set_if_changed(key, "value", refused[0])
            key.add_class("shardviz-refused")
        choices = [(NONE, NONE)] + [(a, a) for a in plan.axis_names]
        choices += [(f"{a} (not in mesh)", a) for a in rule.axes
                    if a is not None and a not in plan.axis_names]
        if len(dims.children) != len(rule.axes):
            dropdowns = []
            for _ in range(len(rule.axes)):
                dd = widgets.Dropdown(layout=widgets.Layout(width="96px"))
                dd.add_class("shardviz-rule-dim")
                dd.observe(lambda change, i=i: self._dims_changed(i), "value")
                dropdowns.append(dd)
            dims.children = dropdowns
        for dd, axis in zip(dims.children, rule.axes):
            set_if_changed(dd, "options", tuple(dict.fromkeys(choices)))
            set_if_changed(dd, "value", NONE if axis is None else axis)
        level, text, _ = feedback
        if refused is not None:
            level, text = "error", f"not applied: the rule keeps {rule.key!r} (see below)"
        set_if_changed(fb, "value", f'<span style="color:{COLOURS[level]}" '
                                    f'class="shardviz-feedback-{level}">{html.escape(text)}</span>')

    # ---------------------------------------------------------------- edits
    def _say(self, error):
        """Show ``error``, or, with none, the refusals still standing."""
        self._entered = False
        standing = [why for _, why, _ in self._refused.values()]
        self.message.value = error if error is not None else (standing[-1] if standing else "")

    def _key_changed(self, i, change):
        if self._syncing:
            return
        typed = change["new"]
        self._debounce(("key", i), lambda: self._apply_key(i, typed))

    def _apply_key(self, i, typed):
        self._refused.pop(i, None)
        kept = self._report.plan.rule_keys[i] if self._report is not None and \
            i < len(self._report.plan.rules) else None
        error = self.propose(lambda p: p.with_rule_at(i, key=typed.strip()), merge=("key", i))
        if error is not None:
            if kept is not None:
                self._refused[i] = (typed, error, kept)
                self._mark(i)
        self._say(error)

    def _mark(self, i):
        """Show row ``i``'s refusal now (a refused edit leaves the plan, so no sync runs)."""
        if self._report is None or i >= len(self.rows.children):
            return
        plan = self._report.plan
        self._syncing = True
        try:
            self._fill(self.rows.children[i], i, plan.rules[i], plan,
                       rule_feedback(self._report)[i], tuple(self.new_key.options))
        finally:
            self._syncing = False

    def _new_key_entered(self, change):
        if not self._syncing and change["new"].strip():
            self._add(None)
            self._entered = not self.new_key.value

    def _dims_changed(self, i):
        if self._syncing:
            return
        dims = self.rows.children[i].children[2].children
        axes = tuple(None if dd.value == NONE else dd.value for dd in dims)
        self._say(self.propose(lambda p: p.with_rule_at(i, axes=axes)))

    def _resize(self, i, delta):
        def edit(p):
            axes = p.rules[i].axes
            axes = axes + (None,) if delta > 0 else axes[:-1]
            return p.with_rule_at(i, axes=axes)

        self._say(self.propose(edit))

    def _move(self, i, j):
        self._say(self.propose(lambda p: p.with_rule_moved(i, j) if 0 <= j < len(p.rules) else p))

    def _delete(self, i):
        self._say(self.propose(lambda p: p.without_rule(i)))

    def _add(self, _):
        key = self.new_key.value.strip()
        if not key and self._entered:
            self._entered = False
            return  # Enter (or leaving the box) already added it
        if not key:
            self._say(f'<span style="color:{STATUS_COLOURS["error"]}">Type a key first: a '
                      'variable path, a regex, or a layer output path ending in /output.</span>')
            return
        rank = self._rank_of(key)

        def edit(p):
            if key in p.rule_keys:
                raise ShardvizError(f"Rule {p.rule_index(key)} already has the key {key!r}.",
                                    hint="Edit that rule's axes instead.")
            return p.with_rule(key, (None,) * rank)

        error = self.propose(edit)
        if error is None:
            self._syncing = True
            self.new_key.value = ""
            self._syncing = False
        self._say(error)

    def _rank_of(self, key: str) -> int:
        """The rank a new rule for ``key`` should have: that of what it
        matches (1 when it matches nothing, or is not a valid regex)."""
        report = self._report
        ranks: list[int] = report.ranks_of(key) if report is not None else []
        return max(1, ranks[0]) if ranks else 1
