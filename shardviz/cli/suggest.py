"""``shardviz suggest``: plans for a model, best first, and the best one
written out."""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap
from typing import Any

from ..format import format_spec, human_bytes
from ..hub.presets import model_of
from .options import (
    add_builder,
    add_inputs,
    add_outputs,
    add_target,
    check_outputs,
    inputs_of,
    parse_bytes,
    read_plan,
)
from .running import UsageError, running, use_devices, write_file

EXIT_CODES = """exit codes:
  0  plans were found (the best is written with --plan-out)
  1  no plan fits the budget or the target
  2  a usage error"""


def add_parser(subparsers: Any, common: dict[str, Any]) -> None:
    parser = subparsers.add_parser(
        "suggest", help="suggest plans for a model, best first",
        description="Recognise the model's structure (column and row Dense pairs, attention "
        "heads, embeddings) and suggest data-parallel, fully sharded, tensor-parallel and 2-D "
        "plans over every factorisation of the device count; with --inputs the best are "
        "compiled to confirm memory and collectives.", epilog=EXIT_CODES, **common)
    add_builder(parser)
    add_target(parser, "the device count to plan for (simulated when compiling)")
    add_inputs(parser, "compile the best plans with these inputs, e.g. 8x128:int32",
               train_step=True, labels=True)
    plans = parser.add_argument_group("the plans")
    plans.add_argument("--budget", metavar="SIZE", help="bytes per device, e.g. 12GB")
    plans.add_argument("--top", type=int, default=5, metavar="K", help="how many (default 5)")
    plans.add_argument("--prefer", choices=("time", "communication", "memory"), default="time",
                       help="rank by the estimated step time (default; communication first "
                       "without a target), by communication, or by bytes per device")
    plans.add_argument("--with-plan", action="append", metavar="PLAN.JSON",
                       help="a plan of your own (saved with Plan.to_json()) to rank with the "
                       "candidates; repeat for more")
    add_outputs(parser, "plan-out", quiet="the table")


def run(args: argparse.Namespace) -> int:
    from ..planner import suggest

    if args.devices is not None and args.devices < 1:
        raise UsageError(f"--devices {args.devices}: give a positive device count")
    if args.top < 1:
        raise UsageError(f"--top {args.top}: give how many plans to show, at least 1")
    check_outputs(args)
    # Compiling needs the devices; without a target the CPUs are simulated.
    use_devices(args.devices if (args.inputs and not args.target) else None)
    budget = parse_bytes(args.budget, "--budget") if args.budget else None
    own = {path: read_plan(path) for path in args.with_plan or []}
    builder = model_of(args.builder)
    with running(args.quiet, "recognising the model's structure and ranking plans"):
        found = suggest(builder, devices=args.devices, target=args.target,
                        inputs=inputs_of(args.inputs), budget_bytes=budget,
                        labels=inputs_of(args.labels, "--labels"),
                        train_step=args.train_step, top=args.top, prefer=args.prefer,
                        plans=own or None)
    if not found:
        why = ""
        if found.smallest is not None:
            size, mesh, name = found.smallest
            why = f": the smallest plan ({name} on {mesh}) needs {human_bytes(size)} per device"
        print("No plan fits" + (f" within {args.budget}" if budget else "") + why + ".")
        return 1
    print_plans(found, args.quiet)
    if args.plan_out:
        text = found[0].plan.to_json().encode("utf-8")
        write_file(args.plan_out, "--plan-out", lambda f: f.write(text))
        if not args.quiet:
            print(f"\nshardviz: wrote the best plan ({found[0].name}) to {args.plan_out}",
                  file=sys.stderr)
    return 0


def print_plans(found: Any, quiet: bool) -> None:
    """The table of plans, and unless ``quiet`` each plan's rules and reasons."""
    import pandas as pd

    width = max(80, shutil.get_terminal_size((100, 40)).columns)
    table = found.table
    shown = pd.DataFrame({
        "#": range(len(table)), "plan": table["name"], "mesh": table["mesh"],
        "per device": table["bytes_per_device"].map(human_bytes),
        "communicated": table["comm_bytes"].map(human_bytes),
        "compiled": table["compiled"].map({True: "yes", False: "no (estimates)"})})
    print(shown.to_string(index=False))
    if quiet:
        return
    if found.ranking:
        print(f"({found.ranking})")
    for i, c in enumerate(found):
        print(f"\n[{i}] {c.name} on {table['mesh'][i]}")
        for note in c.notes:
            print(textwrap.fill(f"note: {note}", width, initial_indent="  ",
                                subsequent_indent="    "))
        for r in c.plan.rules:
            print(f"  {r.key!r}: {format_spec(r.axes)}")
            print(textwrap.fill(c.reasons.get(r.key, ""), width, initial_indent="    ",
                                subsequent_indent="    "))
