"""The Variables tab: every variable's rule, layout and bytes per device."""

from __future__ import annotations

import ipywidgets as widgets

from ...render.html import styled, variables_html
from ..tab import Tab


class VariablesTab(Tab):
    """The current report's variables table."""

    title = "Variables"

    def build(self) -> widgets.Widget:
        self.table = widgets.HTML()
        self.table.add_class("shardviz-variables")
        return self.table

    def show(self) -> None:
        self.table.value = styled(variables_html(self.state.report.variables,
                                                self.state.report.problem_list))
