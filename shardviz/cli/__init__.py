"""The command line: ``shardviz COMMAND``, one module per command.

    shardviz report mypkg.models:build --mesh batch=2,model=4 \\
        --rule '.*kernel=None,model' --inputs 8x128:int32 --fail-on unused-rule,conflict

Commands and their exit codes:

* ``report``: analyse a model under a plan, print the tables and problems,
  write HTML and JSON. 0: the report holds no error and no guard failed;
  1: the report holds an error (Keras would refuse the plan, or the forward
  pass failed), or a guard (``--fail-on``, ``--max-replicated-bytes``)
  failed; ``--fail-on never`` ignores the report's errors.
* ``demo``: the built-in transformer block on 8 simulated devices, with an
  HTML report. 0: it was printed and written.
* ``suggest``: plans for a model, best first. 0: plans were found (the best
  is written with ``--plan-out``); 1: no plan fits the budget or the target.
* ``sweep``: one rule set over every mesh shape of N devices. 0: the rules
  work on at least one mesh shape; 1: they fail on every one.
* ``fit``: the largest batch a slice fits, or the smallest slice that fits a
  batch, for the fine-tune's train step. 0: a batch (or slice) fits; 1:
  nothing fits.
* ``audit``: a layout map's mistakes, their compiled cost and their fixes.
  0: no finding; 1: findings.
* ``verify``: the plan on N local processes. 0: every shard on every host
  agrees with shardviz, and the gathered output matches a single-process
  run; 1: a disagreement, a worker that crashed or failed, or a run past
  ``--timeout``; 2 also for a plan Keras refuses (Keras's message), or a
  builder that builds different weights in each process.

Every command:

* 2: a usage error (a missing builder, a malformed option, an unreadable plan
  file, an output that cannot be written, a builder that stops the command),
  always as one line with its hint;
* 130: interrupted (Ctrl-C);
* 141: stdout was closed before the output was written (a pipe into
  ``head``), quietly.

A command is a module with ``add_parser(subparsers, common)``, which declares
its options from the groups in :mod:`.options`, and ``run(args) -> int``,
which does its work inside :func:`.running.running`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .. import __version__
from ..errors import ShardvizError
from . import audit, demo, fit, report, suggest, sweep, verify
from .options import parse_bytes, parse_fail_on, parse_inputs, parse_mesh, parse_rule
from .report import guard_failures
from .running import Progress, UsageError

__all__ = ["main", "make_parser", "parse_bytes", "parse_fail_on", "parse_inputs", "parse_mesh",
           "parse_rule", "guard_failures", "Progress", "UsageError"]

COMMANDS = {"report": report, "demo": demo, "suggest": suggest, "sweep": sweep, "fit": fit,
            "audit": audit, "verify": verify}


def make_parser() -> argparse.ArgumentParser:
    """The parser of every command."""
    parser = argparse.ArgumentParser(
        prog="shardviz",
        description="See how a Keras model is laid out over a device mesh, from a terminal or CI.")
    parser.add_argument("--version", action="version", version=f"shardviz {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    # The epilogs are tables of exit codes: their lines are kept.
    common = {"formatter_class": argparse.RawDescriptionHelpFormatter}
    for command in COMMANDS.values():
        command.add_parser(subparsers, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code."""
    _replace_unencodable()
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    os.environ.setdefault("KERAS_BACKEND", "jax")
    closed = sys.stdout is None  # started with stdout closed (``>&-``)
    if closed:
        _stdout_closed()
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (until exit)
    try:
        code = COMMANDS[args.command].run(args)
        sys.stdout.flush()
        return 141 if closed else code
    except UsageError as e:
        print(e.line(), file=sys.stderr)
        return 2
    except ShardvizError as e:
        print(UsageError.of(e).line(), file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _stdout_closed()
    except KeyboardInterrupt as e:
        if type(e) is not KeyboardInterrupt:  # a subclass raised by the user's code
            return _stopped_by(e)
        print("shardviz: interrupted", file=sys.stderr)
        return 130
    except SystemExit:
        raise
    except BaseException as e:
        if isinstance(e, Exception):
            raise  # a defect in shardviz: keep its traceback
        return _stopped_by(e)


def _replace_unencodable() -> None:
    """Write characters the terminal's encoding lacks (an ASCII-only locale)
    as replacements instead of failing."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="replace")  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            pass


def _stdout_closed() -> int:
    """Stop quietly when the reader of stdout has gone (``shardviz report ... |
    head``, or stdout closed, ``>&-``): stdout is pointed at the null device,
    so that Python's own flush at exit does not fail again. Exit code 141, as
    for a program that SIGPIPE ends."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        # Fd 1 itself: when stdout was closed, no file opened later may take its place.
        os.dup2(devnull, 1 if sys.stdout is None else sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return 141


def _stopped_by(error: BaseException) -> int:
    """A BaseException that is not an Exception (a builder's own), as one
    error line."""
    detail = " ".join(str(error).split())
    print(f"shardviz: error: the command was stopped by {type(error).__name__}"
          + (f": {detail}" if detail else "") + " (hint: raise an Exception subclass to "
          "report a failure)", file=sys.stderr)
    return 2
