"""The one protocol behind every Explorer tab.

A tab is a title, a widget, and how to fill that widget from the Explorer's
state. The Explorer keeps its tabs as objects: when the plan or the forward
pass changes, it calls every tab's :meth:`Tab.refresh`, marks them all stale
and calls :meth:`Tab.show` on the visible one; another tab is shown when it
is selected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import ipywidgets as widgets

from .state import ExplorerState


@dataclass(frozen=True)
class TabContext:
    """What a tab may use of the Explorer: its state and three callbacks."""

    state: ExplorerState
    guarded: Callable[[Callable[[], object]], None]
    """Run a callback, showing what it raises or warns inside the app."""
    propose: Callable[..., str | None]
    """Apply ``edit(plan) -> plan`` as one edit: None, or the HTML of why it
    was refused (``raise_errors=True`` raises instead)."""
    show_error: Callable[[str], None]
    """Show HTML in the app's error line ("" clears it)."""


class Tab:
    """One page of the Explorer.

    A subclass sets ``title``, builds its widgets in :meth:`build` and fills
    them in :meth:`show`, reading ``self.app.state``. It never reaches into
    the Explorer or another tab.
    """

    title: ClassVar[str] = ""

    def __init__(self, app: TabContext) -> None:
        self.app = app
        self.widget: widgets.Widget = self.build()

    @property
    def state(self) -> ExplorerState:
        return self.app.state

    def build(self) -> widgets.Widget:
        """Make the tab's widgets; return the one the tab bar shows."""
        raise NotImplementedError

    def show(self) -> None:
        """Fill the widgets from the current state (the tab is visible)."""
        raise NotImplementedError

    def refresh(self) -> None:
        """Follow a new plan or pass while hidden too (by default, nothing)."""
