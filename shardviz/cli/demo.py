"""``shardviz demo``: the built-in transformer block end to end, on 8
simulated devices, with an HTML report."""

from __future__ import annotations

import argparse
from typing import Any

from .options import add_outputs, check_outputs
from .report import print_report, write_outputs
from .running import running

EXIT_CODES = """exit codes:
  0  the report was printed and written
  2  a usage error: an output file that cannot be written"""


def add_parser(subparsers: Any, common: dict[str, Any]) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the built-in example end to end",
        description="Analyse a built-in tensor-parallel transformer block on 8 simulated devices\n"
        "and write an HTML report.", epilog=EXIT_CODES, **common)
    add_outputs(parser, "html", quiet="the summary line", verbose=True,
                html_default="demo-report.html")


def run(args: argparse.Namespace) -> int:
    from .. import examples
    from ..analysis import analyze
    from ..devices import simulate_devices

    check_outputs(args)
    simulate_devices(8)
    plan = examples.transformer_plan().with_rule("attn/output/kernel", ("model", None, None))
    with running(args.quiet, "analysing the example transformer block") as progress:
        report = analyze(examples.transformer_block, plan, (8, 16, 64), progress=progress)
    print_report(report, args)
    write_outputs(report, args, "shardviz demo: a tensor-parallel transformer block")
    if not args.quiet:
        print("\nThe demo plan has one deliberate mistake: the rule 'attn/output/kernel' matches "
              "nothing\n(the projection's kernel is 'attn/attention_output/kernel').")
        print(f"Open {args.html} for the tables and pictures.")
    return 0
