"""What every shardviz widget shares: guarded callbacks and small pieces.

Widget callbacks never print and never raise. Anything they would write
(an exception, a warning from Keras or JAX) is shown inside the app, so that
a notebook holding an Explorer has stable outputs.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import io
import warnings

from ..errors import ShardvizError
from ..render.palette import STATUS_COLOURS


class Guard:
    """Runs callbacks; shows their errors and warnings in ``show(html)``."""

    def __init__(self, show):
        self.show = show
        self.warnings: list[str] = []

    @contextlib.contextmanager
    def __call__(self, what: str = ""):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield
            except ShardvizError as e:
                self.show(error_html(e.message, e.hint))
            except Exception as e:  # a widget must never die from a bad edit
                self.show(error_html(f"{what} failed: {type(e).__name__}: {e}"))
        for w in caught:
            text = f"{w.category.__name__}: {w.message}"
            if text not in self.warnings:
                self.warnings.append(text)
        del self.warnings[:-20]


def error_html(message: str, hint: str = "") -> str:
    text = (f'<span class="shardviz-error" style="color:{STATUS_COLOURS["error"]}">'
            f'{html.escape(message)}</span>')
    if hint:
        text += f'<br><span style="color:#555">{html.escape(hint)}</span>'
    return text


def note_html(message: str, colour: str = "#555") -> str:
    return f'<span style="color:{colour}">{html.escape(message)}</span>'


def show_png(image, fig, scale: int = 2) -> None:
    """Put ``fig`` into the ``widgets.Image`` at its own size in CSS pixels,
    rendered at ``scale`` times the resolution, so that it is sharp on a
    high-DPI screen and never stretched."""

    from ..render.mpl import DPI

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI * scale)
    set_if_changed(image, "width", str(int(round(fig.get_figwidth() * DPI))))
    image.value = buf.getvalue()



def set_if_changed(widget, name: str, value):
    """Assign a trait only when it differs (each assignment is a message)."""
    if getattr(widget, name) != value:
        setattr(widget, name, value)


class Debouncer:
    """Runs an edit once typing pauses: each call for a key replaces the
    pending one, which runs ``delay`` seconds after the last call. In a
    kernel that runs an asyncio loop (Jupyter's) the wait is on that loop;
    without one (plain Python, tests) the edit runs at once.
    """

    def __init__(self, delay: float = 0.3):
        self.delay = delay
        self._pending: dict = {}

    def __call__(self, key, fn) -> None:

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        old = self._pending.pop(key, None)
        if old is not None:
            old.cancel()
        if loop is None or self.delay <= 0:
            fn()
            return

        def fire():
            self._pending.pop(key, None)
            fn()

        self._pending[key] = loop.call_later(self.delay, fire)
