"""The Memory tab: each device's bytes, against the target's capacity."""

from __future__ import annotations

import ipywidgets as widgets

from ...render.palette import STATUS_COLOURS
from ..common import note_html, show_png
from ..tab import Tab


class MemoryTab(Tab):
    """The memory picture of the last forward pass, or of the variables
    alone before one has run."""

    title = "Memory"

    def build(self) -> widgets.Widget:
        self.note = widgets.HTML()
        self.picture = widgets.Image(format="png")
        return widgets.VBox([self.note, self.picture])

    def show(self) -> None:
        state = self.state
        source = state.traced if state.traced is not None else state.report
        stale = state.traced is not None and not state.fresh
        self.note.value = note_html(
            "Stale: from the last forward pass, under an older plan." if stale else
            ("Variables only; run the forward pass for activations and temporaries."
             if state.traced is None else ""), STATUS_COLOURS["warning"])
        show_png(self.picture, source.show_memory())
