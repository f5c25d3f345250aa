"""``shardviz verify``: run a plan on N local processes and check every shard
each holds."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import ShardvizError
from ..hub.presets import model_of
from .options import (
    SHAPE,
    add_builder,
    add_inputs,
    add_outputs,
    add_plan,
    build_plan,
    inputs_of,
    parse_inputs,
)
from .running import UsageError, running

EXIT_CODES = """exit codes:
  0  every shard on every host agrees with shardviz, and the gathered output
     (with --train-step, the step's loss and updated variables) matches a
     single-process run
  1  a disagreement, a worker that crashed or failed, or a run past --timeout
     (one line each)
  2  a usage error, a plan that Keras refuses (Keras's message), or a builder
     that builds different weights in each process"""


def add_parser(subparsers: Any, common: dict[str, Any]) -> None:
    parser = subparsers.add_parser(
        "verify", help="run a plan on N local processes and check every shard",
        description="Start N local processes on 127.0.0.1, each with its share of the simulated "
        "devices, as N hosts of JAX's multi-process runtime. Each runs the plan's exported "
        "multi-host code and a jitted forward pass (with --train-step, one model.fit step too); "
        "every shard each host holds is compared with shardviz's prediction, and the gathered "
        "output (and the step's loss and updated variables) with a single-process run.",
        epilog=EXIT_CODES, **common)
    add_builder(parser)
    add_plan(parser)
    group = add_inputs(parser, "the global batch, e.g. 8x64; repeat for several inputs")
    group.add_argument("--train-step", action="store_true",
                       help="also run one model.fit step (the model's own train step; SGD and "
                       "mean squared error if the builder did not compile the model) on every "
                       "process, and compare its loss and every updated variable with one "
                       "process")
    group.add_argument("--labels", metavar=SHAPE,
                       help="with --train-step: the labels' shape, e.g. 8x10 (default: the "
                       "output's shape, float32)")
    hosts = parser.add_argument_group("the processes")
    hosts.add_argument("--processes", type=int, metavar="N", help="how many local processes")
    hosts.add_argument("--timeout", type=float, default=180.0, metavar="SECONDS",
                       help="stop after this long, the model built here and the processes' "
                       "run included, with every process started (default 180)")
    add_outputs(parser, quiet="the verdict")


def run(args: argparse.Namespace) -> int:
    from ..multihost import TimedOut, check_timeout, verify

    if args.processes is None:
        raise UsageError("give --processes N, the number of local processes (hosts) to start")
    if args.processes < 1:
        raise UsageError(f"--processes {args.processes}: give at least 1 process")
    if not args.inputs:
        raise UsageError("give --inputs, the global batch, e.g. --inputs 8x64")
    if args.labels and not args.train_step:
        raise UsageError("--labels is for the train step: add --train-step")
    try:
        check_timeout(args.timeout, "--timeout ")
    except ShardvizError as e:
        raise UsageError.of(e) from None
    plan = build_plan(args)
    inputs = inputs_of(args.inputs)
    model_of(args.builder)  # a usage error now, not in every worker
    try:
        with running(args.quiet, passing=(TimedOut,)) as progress:
            result = verify(args.builder, plan, processes=args.processes, inputs=inputs,
                            timeout=args.timeout, train_step=args.train_step,
                            labels=parse_inputs(args.labels, "--labels") if args.labels
                            else None, progress=progress)
    except TimedOut as e:
        print(f"FAIL {' '.join(e.message.split())} (hint: {' '.join(e.hint.split())})")
        return 1
    print(str(result).splitlines()[0])
    if result.agree:
        if not args.quiet:
            print(hosts_table(result.hosts).to_string(index=False))
        return 0
    for line in result.disagreements:
        print("DISAGREE " + line)
    for line in result.failures:
        print("FAIL " + line)
    return 1


def hosts_table(hosts):
    """What each process holds, for a person: bytes in units, and the rows
    of the global batch as ``start:stop`` slices.

    >>> import pandas as pd
    >>> print(hosts_table(pd.DataFrame({"process": [0], "devices": [(0, 1)],
    ...     "variable_bytes": [20736], "batch_rows": [((0, 4),)],
    ...     "cross_host_collectives": [1], "cross_host_bytes": [2048]})).to_string(index=False))
     process devices variable_bytes batch_rows  cross_host_collectives cross_host_bytes
           0  (0, 1)       20.2 KiB        0:4                       1          2.0 KiB
    """
    from ..format import human_bytes

    table = hosts[["process", "devices", "variable_bytes", "batch_rows",
                   "cross_host_collectives", "cross_host_bytes"]].copy()
    for column in ("variable_bytes", "cross_host_bytes"):
        table[column] = table[column].map(human_bytes)
    table["batch_rows"] = table["batch_rows"].map(
        lambda spans: "-" if spans is None else ", ".join(f"{a}:{b}" for a, b in spans))
    return table
