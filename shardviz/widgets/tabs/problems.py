"""The Problems tab: what Keras would refuse or do unexpectedly, and what to change."""

from __future__ import annotations

import ipywidgets as widgets

from ...render.html import problems_html, styled
from ...render.palette import STATUS_COLOURS
from ..common import note_html
from ..tab import Tab


class ProblemsTab(Tab):
    """The current report's problems, or a line saying there are none."""

    title = "Problems"

    def build(self) -> widgets.Widget:
        self.table = widgets.HTML()
        return self.table

    def show(self) -> None:
        report = self.state.report
        if report.problem_list:
            self.table.value = styled(problems_html(report.problem_list))
        else:
            self.table.value = note_html("No problems: Keras will lay this out as shown.",
                                         STATUS_COLOURS["ok"])
