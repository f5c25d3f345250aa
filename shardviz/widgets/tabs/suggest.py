"""The Suggest tab: plans for this mesh's devices from the model's structure,
each shown as its changes to the current plan and applied as one edit."""

from __future__ import annotations

import html

import ipywidgets as widgets

from ...planner import plan_diff, suggest
from ...render import suggest_view
from ...render.html import styled
from ..common import note_html
from ..tab import Tab


class SuggestTab(Tab):
    """Plans ``shardviz.suggest`` finds, best first, and the chosen one's diff."""

    title = "Suggest"

    def build(self) -> widgets.Widget:
        W = widgets
        self.find_button = W.Button(description="Suggest plans", icon="lightbulb-o",
                               layout=W.Layout(width="160px", min_width="160px"))
        self.find_button.on_click(lambda _: self.app.guarded(self._suggest))
        self.note = W.HTML()
        self.table = W.HTML()
        self.choice = W.Dropdown(options=[("choose a plan…", None)], value=None,
                                 description="Plan", layout=W.Layout(width="460px"))
        self.choice.observe(lambda _: self.app.guarded(self._show_suggestion), "value")
        self.diff = W.HTML()
        self.apply_button = W.Button(description="Apply plan", icon="check", disabled=True,
                              tooltip="Replace the plan with this one (Undo takes it back)",
                              layout=W.Layout(width="130px", min_width="130px"))
        self.apply_button.on_click(lambda _: self.app.guarded(self._apply_suggestion))
        self._suggestions: list = []
        return W.VBox([W.HBox([self.find_button, self.note]), self.table,
                       W.HBox([self.choice, self.apply_button]), self.diff])

    def show(self) -> None:
        state = self.state
        if not self._suggestions:
            self.note.value = note_html(
                f"Plans for the {state.plan.mesh_size} devices of this mesh, from the "
                "model's structure" + (", compiled with the inputs to confirm them."
                                        if state.inputs is not None else "."))
        self._show_suggestion()

    def _suggest(self) -> None:

        state = self.state
        n = state.plan.mesh_size
        self.note.value = note_html(f"Looking for plans for {n} devices…")
        label = state.target.label
        target = label if label and label != "cpu" else None
        found = suggest(state.scan, devices=n, inputs=state.inputs, target=target,
                        train_step=state.train_step, labels=state.labels)
        self._suggestions = list(found)
        self.table.value = styled(suggest_view.html(found))
        self.note.value = note_html(
            f"{len(found)} plans for {n} devices, best first"
            + ("" if state.inputs is not None else
               " (estimated: give the Explorer inputs=... to compile them)") + ".")
        self.choice.options = [("choose a plan…", None)] + [
            (f"[{i}] {c.name} on {' × '.join(f'{a}={k}' for a, k in c.plan.mesh_dict.items())}",
             i) for i, c in enumerate(found)]
        self.choice.value = 0 if found else None

    def _show_suggestion(self) -> None:

        index = self.choice.value
        if index is None or index >= len(self._suggestions):
            self.diff.value = ""
            self.apply_button.disabled = True
            return
        chosen = self._suggestions[index]
        lines = plan_diff(self.state.plan, chosen.plan)
        reasons = "".join(f"<li><code>{html.escape(k)}</code>: {html.escape(r)}</li>"
                          for k, r in chosen.reasons.items())
        self.diff.value = styled(
            "<b>Changes to the current plan</b><pre>" + html.escape("\n".join(lines)) + "</pre>"
            + (f"<b>Why</b><ul>{reasons}</ul>" if reasons else ""))
        self.apply_button.disabled = lines == ["no change"]

    def _apply_suggestion(self) -> None:
        """Apply the chosen plan as one edit (Undo takes it back)."""
        index = self.choice.value
        if index is None or index >= len(self._suggestions):
            return
        refused = self.app.propose(lambda _: self._suggestions[index].plan)
        if refused:
            self.app.show_error(refused)
        self._show_suggestion()
