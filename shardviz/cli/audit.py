"""``shardviz audit``: what is wrong with a layout map, what each mistake
costs in compiled bytes, and each fix as an edit of a rule. The map is a
plan (``--plan``, or ``--mesh`` with ``--rule``) or a class's own
``get_layout_map`` (``--layout-map LlamaBackbone``)."""

from __future__ import annotations

import argparse
import math
from typing import Any

from ..errors import ShardvizError
from ..hub.presets import model_of
from ..model.builders import load_builder
from ..plan import Plan
from .options import (
    NAMED,
    add_builder,
    add_plan,
    build_plan,
    inputs_of,
    parse_bytes,
    parse_mesh,
)
from .running import UsageError, running, use_devices

EXIT_CODES = """exit codes:
  0  no finding
  1  findings (each with its fix)
  2  a usage error"""


def add_parser(subparsers: Any, common: dict[str, Any]) -> None:
    parser = subparsers.add_parser(
        "audit", help="a layout map's mistakes, their compiled cost, and the fixes",
        description="Audit a layout map for a model: variables left replicated (with their "
        "bytes), rules that match nothing (with the key they probably meant), splits that do "
        "not divide on some mesh shape, and splits on the wrong dimension, found by compiling "
        "the alternatives (with --inputs, --batch or --seq).", epilog=EXIT_CODES, **common)
    add_builder(parser)
    group = parser.add_argument_group("the layout map")
    group.add_argument("--layout-map", metavar="CLASS",
                       help="a class with get_layout_map(device_mesh): a keras-hub backbone's "
                       "name (LlamaBackbone) or module.path:Class")
    add_plan(parser)
    group = parser.add_argument_group("the compiled pass")
    group.add_argument("--inputs", action="append", metavar="[NAME=]SHAPE",
                       help="the inputs of the forward pass, e.g. 8x128:int32; repeat for "
                       "several inputs" + NAMED)
    group.add_argument("--batch", type=int, metavar="N", help="the global batch of a token model")
    group.add_argument("--seq", type=int, metavar="N", help="the sequence length of a token model")
    group.add_argument("--target", metavar="TARGET", help="compile for a target, e.g. v5e:2x4")
    group.add_argument("--no-compare", action="store_true",
                       help="do not compile the alternatives of each rule")
    parser.add_argument("--replicated-bytes", metavar="SIZE", default="1MiB",
                        help="the smallest variable left replicated that is a finding of its "
                        "own (default 1MiB; smaller ones are one finding when together they "
                        "are over half the model's bytes); e.g. 1 lists every one")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the findings")


def run(args: argparse.Namespace) -> int:
    from ..diagnosis import audit

    if args.layout_map and (args.plan or args.rule):
        raise UsageError("give either --layout-map or a plan (--plan, --rule), not both")
    if args.layout_map:
        layout: object = _class(args.layout_map)
        mesh = parse_mesh(args.mesh) if args.mesh else None
    elif args.plan or args.mesh:
        layout, mesh = build_plan(args), None
    else:
        raise UsageError("give the map: --layout-map CLASS, or --plan / --mesh with --rule")
    if (args.inputs or args.batch or args.seq) and not args.target:
        # The forward pass is compiled on simulated CPU devices, as many as the mesh has.
        from ..diagnosis.audit import CLASS_MESH

        main = mesh or (layout.mesh_dict if isinstance(layout, Plan) else None) or CLASS_MESH
        use_devices(math.prod(main.values()))
    floor = parse_bytes(args.replicated_bytes, "--replicated-bytes")
    builder = model_of(args.builder)
    with running(args.quiet, "auditing the layout map") as progress:
        found = audit(builder, layout, mesh=mesh, inputs=inputs_of(args.inputs),
                      batch=args.batch, seq=args.seq, target=args.target,
                      compare=not args.no_compare, progress=progress, replicated_bytes=floor)
    print(found)
    return 1 if len(found.findings) else 0


def _class(text: str) -> object:
    """``LlamaBackbone`` (keras-hub's) as a name the audit resolves, or
    ``module.path:Class`` imported here."""
    if ":" not in text:
        return text
    try:  # found as the builder is: from the working directory, or a file
        return load_builder(text)
    except ShardvizError as e:
        raise UsageError.of(e, f"--layout-map {text!r}: ") from None
