"""The Communication tab: the collectives XLA inserted, why each is there,
and the fix ``report.why(i)`` found, applied as one edit; on a TPU target,
where the step's time goes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import ipywidgets as widgets

from ...format import human_bytes
from ...render import explanation_view
from ...render.html import collectives_html, styled
from ...render.palette import STATUS_COLOURS
from ..common import note_html, show_png
from ..tab import Tab

if TYPE_CHECKING:
    from ...explain import Explanation


class CommunicationTab(Tab):
    """The last pass's collectives, their flow picture, and why one is there."""

    title = "Communication"

    def build(self) -> widgets.Widget:
        W = widgets
        self.note = W.HTML()
        self.table = W.HTML()
        self.table.add_class("shardviz-collectives")
        self.flow_picture = W.Image(format="png")
        self.flow_picture.add_class("shardviz-flow")
        self.why_select = W.Dropdown(options=[("choose a collective…", None)], value=None,
                                     description="Why is", layout=W.Layout(width="460px"))
        self.why_select.add_class("shardviz-why-select")
        self.why_select.observe(lambda _: self.app.guarded(self._explain_selected), "value")
        self.why_html = W.HTML()
        self.why_html.add_class("shardviz-why")
        self.fix_button = W.Button(description="Apply fix", icon="wrench", disabled=True,
                                   tooltip="Apply the fix to the plan (Undo takes it back)",
                                   layout=W.Layout(width="130px", min_width="130px"))
        self.fix_button.add_class("shardviz-apply-fix")
        self.fix_button.on_click(lambda _: self.app.guarded(self._apply_fix))
        self._why: Explanation | None = None
        self.time_picture = W.Image(format="png")
        self.time_picture.add_class("shardviz-times")
        self.time_picture.layout.display = "none"
        return W.VBox([self.note, self.table, W.HBox([self.why_select, self.fix_button]),
                       self.why_html, self.flow_picture, self.time_picture])

    def show(self) -> None:
        state = self.state
        traced = state.traced
        if traced is None:
            self.note.value = note_html("Run the forward pass to see the collectives XLA inserts.")
            self.table.value = ""
            self.flow_picture.value = b""
            self.time_picture.layout.display = "none"
            return
        self.note.value = note_html(
            "Stale: from the last forward pass, under an older plan." if not state.fresh else "",
            STATUS_COLOURS["warning"])
        self.table.value = styled(collectives_html(traced.collectives, traced.target.timed))
        options = [("choose a collective…", None)] + [
            (f"#{i} {c['kind']} at {c['layer'] or '?'} ({human_bytes(c['bytes_per_device'])})", i)
            for i, c in enumerate(traced.collectives.to_dict("records"))]
        if list(self.why_select.options) != options:
            self.why_select.options = options
            self.why_select.value = None
        self._show_why()
        show_png(self.flow_picture, traced.show_flow())
        # Where the step's time goes, on a target whose operations are timed (a TPU).
        if len(traced.op_times):
            show_png(self.time_picture, traced.show_times())
            self.time_picture.layout.display = ""
        else:
            self.time_picture.layout.display = "none"

    def _explain_selected(self) -> None:
        """Explain the chosen collective (compiling the changes it suggests)."""
        index = self.why_select.value
        traced = self.state.traced
        self._why = None
        if index is not None and traced is not None:
            self.why_html.value = note_html(
                f"Explaining collective #{index}: compiling the changes its layouts suggest…")
            self._why = traced.why(index)
        self._show_why()
        if self._why is not None and traced is not None:  # the flow picture marks the fixes found
            show_png(self.flow_picture, traced.show_flow())

    def _show_why(self) -> None:
        why, traced = self._why, self.state.traced
        # An explanation of an earlier pass is not shown.
        current = traced is not None and why is not None and traced.explained.get(why.index) is why
        if why is None or not current:
            self._why = None
            self.why_html.value = note_html(
                "Choose a collective to see why XLA inserted it, and a fix." if
                traced is not None and len(traced.collectives) else "")
            self.fix_button.disabled = True
            return
        stale = not self.state.fresh
        self.why_html.value = (note_html(
            "Stale: this explains the last forward pass, which ran under an older plan; run it "
            "again to explain (and fix) the current one.", STATUS_COLOURS["warning"]) if stale else "") \
            + styled(explanation_view.html(why))
        self.fix_button.disabled = why.fix is None or stale

    def _apply_fix(self) -> None:
        """Apply the explained fix as one edit (Undo takes it back)."""
        why = self._why
        if why is None or why.fix is None or not self.state.fresh:
            return
        fix = why.fix
        refused = self.app.propose(lambda _: fix)
        if refused:
            self.app.show_error(refused)
