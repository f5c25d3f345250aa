"""The Explorer's tabs, one module each, all behind :class:`~shardviz.widgets.tab.Tab`.

``TAB_CLASSES`` lists them in the order the tab bar shows them; the Explorer makes
one of each.

>>> from shardviz import Explorer, examples
>>> app = Explorer(examples.mlp, plan=examples.megatron_plan())
>>> [tab.title for tab in app.tab_list]
['Tensor', 'Variables', 'Problems', 'Memory', 'Communication', 'Suggest', 'Fit', 'Export']
>>> app.tab(VariablesTab).table is app.variables_table
True
"""

from __future__ import annotations

from ..tab import Tab
from .communication import CommunicationTab
from .export import ExportTab
from .fit import FitTab
from .memory import MemoryTab
from .problems import ProblemsTab
from .suggest import SuggestTab
from .tensor import TensorTab
from .variables import VariablesTab

TAB_CLASSES: tuple[type[Tab], ...] = (TensorTab, VariablesTab, ProblemsTab, MemoryTab,
                                CommunicationTab, SuggestTab, FitTab, ExportTab)

__all__ = ["TAB_CLASSES", "CommunicationTab", "ExportTab", "FitTab", "MemoryTab", "ProblemsTab",
           "SuggestTab", "TensorTab", "VariablesTab"]
