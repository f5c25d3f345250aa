"""What XLA logs while it compiles, captured and attributed.

XLA's partitioner writes its warnings from C++ to the process's stderr (fd
2), where Python cannot see them and a notebook user may never look: most
notably "[SPMD] Involuntary full rematerialization", which means it could
not move a tensor from one layout to another efficiently, replicated it
whole on every device, and split it again. :func:`capturing_stderr` holds
fd 2 for the length of a compile and keeps the lines that matter;
:func:`reshard_warnings` reads them, and :func:`reshard_problems` turns each
into a Problem with its layer, its source line and the rules whose layouts
meet there. Every other line goes on to stderr as it is written.

>>> line = ("W1203 spmd_partitioner.cc:656] [SPMD] Involuntary full rematerialization. The "
...         "compiler cannot go from sharding {mesh['batch'=2,'model'=4], [{'batch'}, {}]} to "
...         "{mesh['batch'=2,'model'=4], [{}, {'model'}]} efficiently for HLO operation "
...         '%param = f32[4,8]{1,0} parameter(0), metadata={op_name="jit(f)/x/reshape" '
...         "stack_frame_id=3}. As the last resort, SPMD will replicate the tensor.")
>>> (w,) = reshard_warnings([line])
>>> w.source_layout, w.target_layout, w.op_name, w.frame_id
("P('batch')", "P(None, 'model')", 'jit(f)/x/reshape', 3)
"""

from __future__ import annotations

import dataclasses
import re
import sys

from ..devices import filtering_stderr

_RESHARD = re.compile(
    r"Involuntary full rematerialization\.\s*The compiler (?:cannot|was not able to) go from "
    r"sharding (?P<src>\{.*?\}) to (?P<dst>\{.*?\})\s+(?:efficiently|without doing a full "
    r"rematerialization of the tensor) for HLO operation:?\s*(?P<op>.*)$")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_FRAME_ID = re.compile(r"stack_frame_id=(\d+)")


@dataclasses.dataclass(frozen=True)
class ReshardWarning:
    """One "involuntary full rematerialization" from XLA's partitioner."""

    source_layout: str
    """The layout the tensor has, as a PartitionSpec where XLA's text
    names mesh axes, else XLA's own sharding text."""
    target_layout: str
    """The layout it is asked to take."""
    op_name: str
    frame_id: int
    line: str
    """XLA's whole line."""


def capturing_stderr():
    """Collect XLA's resharding lines written to fd 2 while the block runs;
    every other line goes on to stderr as it arrives (see
    :func:`~shardviz.devices.filtering_stderr`)."""
    return filtering_stderr(lambda line: _RESHARD.search(line) is not None)


def pass_on(lines: list[str]) -> None:
    """Write lines shardviz took but does not report back to stderr."""
    if lines:
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()


def _layout(text: str) -> str:
    """XLA's sharding text, as a PartitionSpec when it names mesh axes."""
    m = re.fullmatch(r"\{mesh\[[^\]]*\],\s*\[(?P<dims>.*)\]\}", text.strip())
    if not m:
        return text
    dims = re.findall(r"\{([^}]*)\}", m.group("dims"))
    entries = []
    for d in dims:
        names = [n.strip().strip("'\"") for n in d.split(",") if n.strip()]
        entries.append(None if not names else names[0] if len(names) == 1 else tuple(names))
    while entries and entries[-1] is None:
        entries.pop()
    return "P(" + ", ".join(repr(e) for e in entries) + ")"


def reshard_warnings(lines: list[str]) -> list[ReshardWarning]:
    """The involuntary-rematerialization warnings among XLA's log lines."""
    out = []
    for line in lines:
        m = _RESHARD.search(line)
        if not m:
            continue
        op = m.group("op")
        op_name = _OP_NAME.search(op)
        frame = _FRAME_ID.search(op)
        out.append(ReshardWarning(_layout(m.group("src")), _layout(m.group("dst")),
                                  op_name.group(1) if op_name else "",
                                  int(frame.group(1)) if frame else 0, line.strip()))
    return out


def split_log(lines: list[str]) -> tuple[list[ReshardWarning], list[str]]:
    """``(warnings shardviz reports, lines to pass on)``."""
    warnings = reshard_warnings(lines)
    taken = {w.line for w in warnings}
    return warnings, [line for line in lines if line.strip() not in taken]
