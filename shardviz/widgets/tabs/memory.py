"""The Memory tab: each device's bytes, against the target's capacity, and,
after a pass, what fills a device at the compiled program's peak."""

from __future__ import annotations

import ipywidgets as widgets

from ...render.palette import STATUS_COLOURS
from ..common import note_html, show_png
from ..tab import Tab


class MemoryTab(Tab):
    """The memory picture of the last forward pass, or of the variables
    alone before one has run; below it, the peak by role (the compiler's
    buffer assignment) where the pass has one."""

    title = "Memory"

    def build(self) -> widgets.Widget:
        self.note = widgets.HTML()
        self.picture = widgets.Image(format="png")
        self.peak_note = widgets.HTML()
        self.peak_picture = widgets.Image(format="png")
        self.peak_picture.layout.display = "none"
        return widgets.VBox([self.note, self.picture, self.peak_note, self.peak_picture])

    def show(self) -> None:
        state = self.state
        source = state.traced if state.traced is not None else state.report
        stale = state.traced is not None and not state.fresh
        self.note.value = note_html(
            "Stale: from the last forward pass, under an older plan." if stale else
            ("Variables only; run the forward pass for activations and temporaries."
             if state.traced is None else ""), STATUS_COLOURS["warning"])
        show_png(self.picture, source.show_memory())
        traced = state.traced
        if traced is None:
            self.peak_note.value = ""
            self.peak_picture.layout.display = "none"
            return
        self.peak_note.value = note_html(traced.peak_note, STATUS_COLOURS["info"])
        if len(traced.peak):
            show_png(self.peak_picture, traced.show_peak())
            self.peak_picture.layout.display = ""
        else:
            self.peak_picture.layout.display = "none"
