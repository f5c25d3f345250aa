"""``shardviz sweep``: one rule set over every mesh shape of N devices."""

from __future__ import annotations

import argparse
from typing import Any

from ..format import human_bytes, human_seconds
from ..hub.presets import model_of
from .options import (
    add_builder,
    add_inputs,
    add_outputs,
    add_plan,
    add_target,
    build_plan,
    check_outputs,
    inputs_of,
    parse_rule,
)
from .running import UsageError, running, use_devices, write_file

EXIT_CODES = """exit codes:
  0  the rules work on at least one mesh shape
  1  they fail on every mesh shape
  2  a usage error"""


def add_parser(subparsers: Any, common: dict[str, Any]) -> None:
    parser = subparsers.add_parser(
        "sweep", help="run one rule set over every mesh shape of N devices",
        description="On which mesh shapes does a rule set work, and what does each cost?",
        epilog=EXIT_CODES, **common)
    add_builder(parser)
    add_plan(parser, mesh=False, batch_help="default: the first mesh axis, which is `batch` "
             "unless the rules name it otherwise")
    add_target(parser, "the device count")
    add_inputs(parser, "compile every mesh with these inputs")
    add_outputs(parser, "png", quiet="the table")


def run(args: argparse.Namespace) -> int:
    from ..planner import sweep

    if args.devices is None or args.devices < 1:
        raise UsageError("give --devices N, the device count to sweep mesh shapes over")
    rules = [parse_rule(r) for r in args.rule or []]
    if not rules and not args.plan:
        raise UsageError("give the rules to sweep: --rule KEY=AXES (repeatable) or --plan plan.json")
    if args.plan:
        rules = [(r.key, r.axes) for r in build_plan(args).rules]
    check_outputs(args)
    use_devices(args.devices if (args.inputs and not args.target) else None)
    builder = model_of(args.builder)
    with running(args.quiet, f"analysing the rules on every mesh of {args.devices} devices"):
        frame = sweep(builder, rules, devices=args.devices, target=args.target,
                      inputs=inputs_of(args.inputs), batch_axis=args.batch_axis)
    print_sweep(frame, args.quiet)
    if args.png:
        from ..render.pictures import show_sweep

        figure = show_sweep(frame)
        write_file(args.png, "--png", lambda f: figure.savefig(f, format="png"))
    return 1 if frame["errors"].gt(0).all() else 0


def print_sweep(frame: Any, quiet: bool) -> None:
    """The sweep's table, and unless ``quiet`` the first error on each mesh
    where the rules fail."""
    missing = lambda x: x is None or x != x  # noqa: E731 (None or NaN)
    shown = frame.copy()
    shown["bytes_per_device"] = shown["bytes_per_device"].map(human_bytes)
    shown["collective_bytes"] = shown["collective_bytes"].map(
        lambda b: "—" if missing(b) else human_bytes(int(b)))
    shown["fits"] = shown["fits"].map(lambda f: "—" if missing(f) else ("yes" if f else "no"))
    shown["seconds"] = shown["seconds"].map(lambda t: "—" if missing(t) else human_seconds(t))
    print(shown.drop(columns=["first_error"]).to_string(index=False))
    failing = frame[frame["errors"] > 0]
    if len(failing) and not quiet:
        print("\nThe first error on each mesh where the rules fail:")
        for mesh, message in zip(failing["mesh"], failing["first_error"]):
            print(f"  {mesh}: {message}")
