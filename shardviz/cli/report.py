"""``shardviz report``: analyse a model under a plan, print the tables and
problems, write HTML and JSON, and check the CI guards."""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import Any

from ..errors import SEVERITIES
from ..hub.presets import model_of
from .options import (
    add_builder,
    add_guards,
    add_inputs,
    add_outputs,
    add_plan,
    add_target,
    add_tuning,
    build_plan,
    check_outputs,
    inputs_of,
    parse_bytes,
    parse_fail_on,
    tuning_of,
)
from .running import UsageError, running, use_devices, write_file

EXIT_CODES = """exit codes:
  0  no error in the report, and no guard failed
  1  the report holds an error (Keras would refuse the plan, or the forward pass
     failed), or a guard failed; --fail-on never ignores the report's errors
  2  a usage error: a bad option, a missing builder, an unreadable plan file,
     an output file that cannot be written"""


def add_parser(subparsers: Any, common: dict[str, Any]) -> None:
    parser = subparsers.add_parser(
        "report", help="analyse a model builder under a plan",
        description="Analyse a model (or a zero-argument builder of one) under a plan, print the "
        "tables and problems, and check guards.", epilog=EXIT_CODES, **common)
    add_builder(parser)
    add_plan(parser)
    run_options = add_inputs(parser, "e.g. 8x128:int32; repeat for several inputs",
                             train_step=True, labels=True)
    run_options.add_argument("--batch", type=int, metavar="N",
                             help="with --seq, instead of --inputs: the global batch of a token "
                             "model's own inputs")
    run_options.add_argument("--seq", type=int, metavar="N",
                             help="the sequence length of a token model (with --batch)")
    run_options.add_argument("--run", action="store_true",
                             help="also execute the pass (by default it is lowered and compiled "
                             "only, allocating nothing)")
    run_options.add_argument("--explain", action="store_true",
                             help="explain each collective: its source line, the layouts and "
                             "rules behind it, and a fix found by recompiling the changes it "
                             "suggests")
    run_options.add_argument("--peak", action="store_true",
                             help="what is live at the compiled program's peak, by role and "
                             "by layer, from the compiler's own buffer assignment")
    run_options.add_argument("--times", action="store_true",
                             help="where the step's time goes: each operation of the compiled "
                             "program timed on the target, by kind and by layer (estimates)")
    run_options.add_argument("--levers", action="store_true",
                             help="the changes that would most reduce the bytes the compiler "
                             "checks (remat, batch, sequence, LoRA, optimizer, dtype), each "
                             "compiled")
    add_target(parser, "simulate N CPU devices", slices=True)
    add_tuning(parser)
    add_guards(parser)
    add_outputs(parser, "html", "json", quiet="the summary line", verbose=True)


def run(args: argparse.Namespace) -> int:
    check_outputs(args)
    use_devices(args.devices)
    plan = build_plan(args)
    inputs = inputs_of(args.inputs)
    labels = inputs_of(args.labels, "--labels")
    if labels and not args.train_step:
        raise UsageError("--labels are the y of a train step; add --train-step")
    fail_on = parse_fail_on(args.fail_on) if args.fail_on else set()
    max_replicated = parse_bytes(args.max_replicated_bytes) if args.max_replicated_bytes else None
    builder = model_of(args.builder)
    with running(args.quiet, "scanning the model") as progress:
        from ..analysis import analyze

        report = analyze(builder, plan, inputs, mode="concrete" if args.run else "abstract",
                         train_step=args.train_step, labels=labels, progress=progress,
                         target=args.target, slices=args.slices,
                         dcn_axes=(args.dcn_axis,) if args.dcn_axis else None,
                         batch=args.batch, seq=args.seq, **tuning_of(args))
    print_report(report, args)
    if args.peak:
        from ..render.peak_view import text

        width = max(80, shutil.get_terminal_size((80, 40)).columns)
        print("\nWhat is live at the peak\n" + text(report.peak, report.peak_note, width))
    if args.times:
        from ..render.time_view import note as time_note
        from ..render.time_view import text as times_text

        width = max(80, shutil.get_terminal_size((80, 40)).columns)
        print("\nWhere the step's time goes\n" + times_text(report.op_times,
                                                           time_note(report), width))
    if args.levers:
        print_levers(report, builder, args)
    if args.explain:
        print_explanations(report, args)
    write_outputs(report, args, f"shardviz report: {args.builder}")
    failures = guard_failures(report, fail_on, max_replicated)
    for line in failures:
        print(line)
    return 1 if failures else 0


def guard_failures(report: Any, fail_on: set[str], max_replicated: int | None) -> list[str]:
    """One ``FAIL`` line per problem that fails the run. By default every
    error fails it; ``fail_on`` adds kinds and severities, ``{"never"}``
    fails nothing."""
    if "never" in fail_on:
        return []
    fail_on = fail_on | {"error"}
    lines = []
    severities = [s for s in SEVERITIES if s in fail_on]
    for p in report.problem_list:
        if p.kind in fail_on or any(p.at_least(s) for s in severities):
            where = p.path or p.rule or p.layer or "-"
            lines.append(f"FAIL {p.kind} {where}: {' '.join(p.message.split())}")
    if max_replicated is not None:
        for p in report.replicated_large(max_replicated):
            lines.append(f"FAIL replicated-large {p.path}: {p.message}")
    return lines


def print_report(report: Any, args: argparse.Namespace) -> None:
    """The report's tables, or with --quiet its summary line."""
    from ..render.text import report_text, summary_line

    if args.quiet:
        print(summary_line(report))
        return
    width = max(80, shutil.get_terminal_size((120, 40)).columns)
    print(report_text(report, width=width, max_rows=None if args.verbose else 40))


def print_levers(report: Any, builder: Any, args: argparse.Namespace) -> None:
    """``--levers``: each change that would reduce the bytes, compiled."""
    from ..planner.levers import describe, levers

    if report.pass_name is None:
        print("\nNo levers: no pass was compiled" + (" (pass --inputs)." if not args.inputs
                                                   else "."))
        return
    with running(args.quiet, "compiling the levers") as progress:
        frame = levers(report, builder, progress=progress)
    print("\nLevers, each compiled (the bytes the compiler checks, per device)")
    print(describe(frame))


def print_explanations(report: Any, args: argparse.Namespace) -> None:
    """``--explain``: why each collective is there, and its fix."""
    n = len(report.collectives)
    if report.pass_mode is None:
        print("\nNo collectives to explain: the forward pass did not run"
              + (" (pass --inputs)." if not args.inputs else "."))
        return
    if n == 0:
        print("\nNo collectives to explain: the pass communicates nothing.")
        return
    with running(args.quiet) as progress:
        for i in range(n):
            progress(f"explaining collective {i + 1} of {n} (compiling the changes it suggests)")
            report.why(i, progress=lambda line, i=i: progress(
                f"collective {i + 1} of {n}: {line.split(': ', 1)[-1]}"))
    if args.quiet:
        return
    width = max(60, shutil.get_terminal_size((100, 40)).columns - 1)
    print("\nWhy each collective is there")
    for why in report.explanations():
        print()
        print(why.text_block(width))


def write_outputs(report: Any, args: argparse.Namespace, title: str) -> None:
    """--html and --json, each with a line on stderr unless quiet."""
    from ..render.export import report_html_file
    from ..report.serialize import report_to_json

    if args.html:
        page = report_html_file(report, report.pictures(), title).encode("utf-8")
        write_file(args.html, "--html", lambda f: f.write(page))
        if not args.quiet:
            print(f"shardviz: wrote {args.html}", file=sys.stderr)
    if getattr(args, "json", None):
        data = report_to_json(report).encode("utf-8")
        write_file(args.json, "--json", lambda f: f.write(data))
        if not args.quiet:
            print(f"shardviz: wrote {args.json}", file=sys.stderr)
