"""``shardviz fit``: the largest batch a slice fits, or the smallest slice
that fits a batch, for the train step ``model.fit`` runs with the fine-tune's
settings (LoRA, dtype policy, quantization, remat, optimizer)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..hub.presets import model_of
from .options import add_builder, add_plan, add_tuning, build_plan, inputs_of, tuning_of
from .running import UsageError, check_writable, running, write_file

EXIT_CODES = """exit codes:
  0  a batch (or a slice) fits
  1  nothing fits: not the smallest batch on the slice, or no slice sold
  2  a usage error"""


def add_parser(subparsers: Any, common: dict[str, Any]) -> None:
    parser = subparsers.add_parser(
        "fit", help="the largest batch a slice fits, or the smallest slice for a batch",
        description="Will this fine-tune fit, with what batch, on how many chips? With a slice "
        "(--target v5e:2x4): the largest global batch whose train step the TPU compiler fits, "
        "for each --remat mode. With a chip family (--target v5e) and --batch: the smallest "
        "slice sold that fits it. Each answer is compiled, and so is the next batch (or the "
        "next smaller slice), which is refused.", epilog=EXIT_CODES, **common)
    add_builder(parser)
    group = parser.add_argument_group("the question")
    group.add_argument("--target", required=True, metavar="SLICE_OR_FAMILY",
                       help="a slice (v5e:2x4, v5litepod-8) for the largest batch, or a chip "
                       "family (v5e, v5p, v6e, v4) for the smallest slice")
    group.add_argument("--batch", type=int, metavar="N", help="the global batch (smallest slice)")
    group.add_argument("--seq", type=int, metavar="N",
                       help="the sequence length of a token model")
    group.add_argument("--inputs", action="append", metavar="SHAPE",
                       help="the shapes of one batch, for other models, e.g. 1x1024 (the "
                       "first dim becomes each batch tried)")
    group.add_argument("--labels", action="append", metavar="SHAPE",
                       help="the labels of one batch, like --inputs")
    group.add_argument("--max-compiles", type=int, default=12, metavar="N",
                       help="the most compiles for each remat mode (default 12)")
    group.add_argument("--precision", type=float, default=0.0, metavar="FRACTION",
                       help="stop within this fraction of the largest batch, e.g. 0.01 "
                       "(default 0: the exact batch)")
    add_tuning(parser, several_remat=True)
    add_plan(parser, batch_help="default: the first mesh axis; without a plan every variable "
             "is split over one batch axis of all devices")
    parser.add_argument("--html", metavar="PATH",
                        help="also write the answer, with the report of the train step at it, "
                        "as one HTML file")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the answer")


def run(args: argparse.Namespace) -> int:
    from ..planner import fit

    plan = build_plan(args) if (args.plan or args.mesh) else None
    if args.rule and plan is None:
        raise UsageError("--rule needs --mesh (or give --plan)")
    if args.html:  # before the search, which may take minutes
        check_writable(args.html, "--html")
    builder = model_of(args.builder)
    progress = None if args.quiet else True
    with running(args.quiet, f"finding what fits on {args.target}"):
        answer = fit(builder, plan, target=args.target, batch=args.batch, seq=args.seq,
                     inputs=inputs_of(args.inputs), labels=inputs_of(args.labels, "--labels"),
                     max_compiles=args.max_compiles, precision=args.precision,
                     progress=progress, **tuning_of(args))
    print(answer)
    if args.html:
        from ..render.fit_view import html_file

        pictures = answer.report.pictures() if answer.report is not None else []
        page = html_file(answer, pictures, f"shardviz fit: {args.builder}").encode("utf-8")
        write_file(args.html, "--html", lambda f: f.write(page))
        if not args.quiet:
            print(f"shardviz: wrote {args.html}", file=sys.stderr)
    return 0 if answer.answers.batch.notna().any() else 1
