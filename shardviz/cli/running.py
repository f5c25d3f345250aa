"""Running a command: progress on stderr, one-line usage errors, output files.

Every command does its work inside :func:`running`, which shows progress,
turns a ``ShardvizError`` into a :class:`UsageError` (exit code 2) and stops
the progress on every way out.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

from ..errors import ShardvizError


class UsageError(Exception):
    """A one-line error for the user; exit code 2.

    >>> print(UsageError("--top 0: give at least 1", hint="e.g. --top 5").line())
    shardviz: error: --top 0: give at least 1 (hint: e.g. --top 5)
    """

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message, self.hint = message, hint

    @classmethod
    def of(cls, error: ShardvizError, prefix: str = "") -> UsageError:
        return cls(prefix + error.message, error.hint)

    def line(self) -> str:
        text = " ".join(self.message.split())
        if self.hint:
            text += f" (hint: {' '.join(self.hint.split())})"
        return f"shardviz: error: {text}"


class Progress:
    """Stage messages on stderr (a spinner on a terminal), unless quiet."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.start = time.perf_counter()
        self.status: Any = None
        if not quiet and sys.stderr.isatty():
            from rich.console import Console

            self.status = Console(stderr=True).status("starting…")
            self.status.start()

    def __call__(self, stage: str) -> None:
        if self.quiet:
            return
        message = f"{stage}…"
        if self.status is not None:
            self.status.update(message)
        else:
            print(f"shardviz: {message} ({time.perf_counter() - self.start:.1f} s)", file=sys.stderr)

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()


@contextlib.contextmanager
def running(quiet: bool, stage: str | None = None,
            passing: tuple[type[ShardvizError], ...] = ()) -> Iterator[Progress]:
    """Show ``stage``, and the stages the block reports to the Progress it
    gets, on stderr. A ``ShardvizError`` the block raises leaves as a
    :class:`UsageError` (those of the kinds in ``passing`` as they are); the
    progress stops on every way out.

    >>> try:
    ...     with running(quiet=True, stage="analysing"):
    ...         raise ShardvizError("the mesh has no axis 'x'", hint="Name an axis it has.")
    ... except UsageError as e:
    ...     print(e.line())
    shardviz: error: the mesh has no axis 'x' (hint: Name an axis it has.)
    """
    progress = Progress(quiet)
    try:
        if stage:
            progress(stage)
        yield progress
    except passing:
        raise
    except ShardvizError as e:
        raise UsageError.of(e) from None
    finally:
        progress.stop()


def use_devices(simulate: int | None) -> None:
    """Simulate ``simulate`` CPU devices, or, with None, keep JAX on the CPU."""
    from ..devices import cpu_only, simulate_devices

    if simulate is None:
        cpu_only()
        return
    try:
        simulate_devices(simulate)
    except ShardvizError as e:
        raise UsageError.of(e, f"--devices {simulate}: ") from None


def check_writable(path: str, flag: str) -> None:
    """Refuse an output path that is a directory, in a folder that does not
    exist, or that cannot be opened for writing."""
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} is a directory", hint="Give a file name.")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"{flag} {path!r}: the folder {folder!r} does not exist",
                         hint="Create it first, or write elsewhere.")
    exists = os.path.exists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as e:
        raise UsageError(f"{flag} {path!r} cannot be written: {e.strerror}") from None
    if not exists:
        try:
            os.remove(path)
        except OSError:
            pass


def write_file(path: str, flag: str, write: Callable[[IO[bytes]], object]) -> None:
    """Write an output file with ``write(file)``; a failure (a full disk, a
    device that refuses data) is a one-line usage error."""
    try:
        with open(path, "wb") as f:
            write(f)
    except OSError as e:
        raise UsageError(f"{flag} {path!r} could not be written: {e.strerror or e}",
                         hint="Write it elsewhere.") from None
