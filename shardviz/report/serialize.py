"""The Report as data: a dict and JSON holding every frame of
:mod:`shardviz.report.schema` (columns, dtypes and rows), its summary, plan
and explanations, and the frames read back from that JSON.

>>> import shardviz
>>> from shardviz import examples
>>> report = shardviz.analyze(examples.mlp, examples.megatron_plan())
>>> frames = frames_from_json(report_to_json(report))
>>> frames["variables"].equals(report.variables)
True
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pandas as pd

from .. import __version__
from ..errors import ShardvizError
from . import schema

if TYPE_CHECKING:
    from .report import Report

SCHEMA = "shardviz.report"


def _plain(value: Any) -> Any:
    """JSON-ready values: tuples become lists, numpy scalars Python numbers."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    if isinstance(value, float) and value != value:  # NaN
        return None
    return value


def report_to_dict(report: Report) -> dict:
    """Everything in the report, as plain data: every frame of
    :mod:`shardviz.report.schema`, with its columns, dtypes and rows."""
    frames: dict[str, dict] = {}
    data: dict[str, Any] = {
        "format": SCHEMA, "version": 1, "shardviz": __version__,
        "summary": _plain_dict(report.summary()), "plan": report.plan.to_dict(),
        "notes": list(report.notes),
        "trace_error": report.trace_error.message if report.trace_error else None,
        "frames": frames,
    }
    if report.pass_mode is not None:
        data["trace"] = {"mode": report.pass_mode, "train_step": report.step_setup is not None,
                         "memory": report.xla_memory, "seconds": report.timings}
    data["explanations"] = [explanation_dict(e) for _, e in sorted(report.explained.items())]
    for name in schema.NAMES:
        frame = getattr(report, name)
        frames[name] = {
            "columns": list(frame.columns),
            "dtypes": {c: str(frame[c].dtype) for c in frame.columns},
            "rows": [[_plain(v) for v in row] for row in frame.itertuples(index=False)],
        }
    return data


def explanation_dict(why: Any) -> dict:
    """An :class:`~shardviz.explain.Explanation` as plain data."""
    return {"index": why.index, "kind": why.kind, "layer": why.layer, "source": why.source,
            "source_from": why.source_from, "text": why.text, "rules": list(why.rules),
            "fix": why.fix.to_dict() if why.fix is not None else None,
            "fix_change": why.fix_change, "fix_cost": why.fix_cost}


def _plain_dict(d: dict) -> dict:
    return {k: _plain_dict(v) if isinstance(v, dict) else _plain(v) for k, v in d.items()}


def report_to_json(report: Report, indent: int | None = 1) -> str:
    return json.dumps(report_to_dict(report), indent=indent)


def _tuples(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def frames_from_json(text: str) -> dict[str, pd.DataFrame]:
    """The DataFrames of a report written by :func:`report_to_json`."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ShardvizError(f"This is not JSON: {e}.",
                            hint="Pass the text that `shardviz report BUILDER --json FILE` wrote.") from None
    if not isinstance(data, dict) or data.get("format") != SCHEMA:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ShardvizError(
            f"This JSON is not a shardviz report: its format is {found!r}, "
            f"not {SCHEMA!r}.",
            hint="Pass the text that `shardviz report BUILDER --json FILE` or report_to_json wrote.")
    out = {}
    for name, frame in data["frames"].items():
        columns = frame["columns"]
        cols = {c: [_tuples(row[i]) for row in frame["rows"]] for i, c in enumerate(columns)}
        out[name] = pd.DataFrame(
            {c: pd.Series(cols[c], dtype=frame["dtypes"][c]) for c in columns}, columns=columns)
    return out
