"""A Report's explanations: ``why`` a collective is there and what removes
it (through :mod:`shardviz.explain`, imported inside each function, and a
progress line on stderr while it compiles), and why a path has its layout.

Each function takes the Report as ``self``; the Report binds it as the method
(or property) of the same name. Explanations live in the cache of
:func:`shardviz.explain.cache_of`, never on the Report.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .report import Report


def _stderr_line(line: str | None) -> None:
    """One line on stderr, rewritten in place as it changes; None ends it."""

    if line is None:
        if getattr(_stderr_line, "shown", False):
            sys.stderr.write("\n")
            sys.stderr.flush()
        _stderr_line.shown = False  # type: ignore[attr-defined]
        return
    sys.stderr.write("\r" + line[:119].ljust(getattr(_stderr_line, "width", 0)))
    sys.stderr.flush()
    _stderr_line.width = min(len(line), 119)  # type: ignore[attr-defined]
    _stderr_line.shown = True  # type: ignore[attr-defined]


def why(self: Report, which: object,
        progress: bool | Callable[[str], object] | None = None) -> Any:
    """Why collective ``which`` (an index into :attr:`collectives`, or one
    of its rows) is there, and what removes it: an
    :class:`~shardviz.explain.Explanation` with ``text``, ``rules``,
    ``source`` and a ``fix`` plan (or None, with the reason). Finding
    the fix compiles a few counterfactual plans (on a train step, their
    forward passes); the result is kept, and so is each plan compiled,
    for the other collectives' explanations. While it compiles, one
    line on stderr says which plan it is trying: on a terminal by
    default, always with ``progress=True``, never with ``False``; a
    callable (``print``, say) hears each line instead. Interrupting it
    (Ctrl-C) leaves the report as it was."""
    from ..explain import cache_of, collective_row, explain_collective

    index, _ = collective_row(self, which)
    explained = cache_of(self).explanations
    if index not in explained:
        if progress is None:

            progress = sys.stderr.isatty()
        say = _stderr_line if progress is True else progress or None
        try:
            explained[index] = explain_collective(self, index, progress=say)
        finally:
            if say is _stderr_line:
                _stderr_line(None)
    return explained[index]


def explanations(self: Report) -> list:
    """:meth:`why` for every collective, in order."""
    return [self.why(i) for i in range(len(self.collectives))]


def explained(self: Report) -> dict:
    """The explanations computed so far, by collective index. They live
    in a cache of their own (:func:`shardviz.explain.cache_of`), not on the
    Report, which never changes after :func:`~shardviz.analyze`."""
    from ..explain import cache_of

    return dict(cache_of(self).explanations)


def explain(self: Report, path: str) -> str:
    """Why ``path`` has the layout it has, in a sentence or two."""
    from ..explain.path import explain_path

    self._check_path(path)
    return explain_path(self, path)
