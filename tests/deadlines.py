"""A deadline for tests of code that could hang: it raises instead."""

from __future__ import annotations

import contextlib
import signal


class Expired(BaseException):
    """A deadline passed (not an Exception, so that no guard swallows it)."""


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise :class:`Expired` after ``seconds``: Python's re checks for
    signals while it matches, so even a backtracking match is stopped."""
    def expire(*_):
        raise Expired(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
