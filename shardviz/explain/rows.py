"""Which collective ``why()`` means: an index or a row of
``report.collectives``, checked against the report, with messages that name
what was given."""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..errors import ShardvizError

if TYPE_CHECKING:
    from ..report import Report


def collective_row(report: Report, which: object) -> tuple[int, Any]:
    frame = report.collectives
    if len(frame) == 0:
        raise ShardvizError(
            "This report has no collectives to explain"
            + (" (its forward pass did not run)." if report.trace is None else "."),
            hint="Analyse with inputs=... so that the pass is compiled, then call why(i) "
            "with an index into report.collectives.")
    if isinstance(which, pd.DataFrame):
        raise ShardvizError(
            f"why() takes one collective, and this is a table of {len(which)} rows.",
            hint="Pass an index (report.why(0)) or one row (report.collectives.iloc[0]).")
    row_given = hasattr(which, "name") and hasattr(which, "get") \
        and not isinstance(which, (int, str))
    index = which.name if row_given else which  # type: ignore[attr-defined]

    if isinstance(index, bool) or not isinstance(index, numbers.Integral) \
            or not -len(frame) <= int(index) < len(frame):
        raise ShardvizError(
            f"why({_short(which)}): there is no collective {_short(index)}; this report has "
            f"{len(frame)} (rows 0 to {len(frame) - 1} of report.collectives).",
            hint="Pass an index into report.collectives, or one of its rows.")
    i = int(index) % len(frame)
    if row_given and not _same_row(which, frame.iloc[i]):
        mine = frame.iloc[i]
        raise ShardvizError(
            f"why(row): this row is not row {i} of this report's collectives (that is the "
            f"{mine['kind']} {mine['name']!r} at `{mine['layer']}`; the row given is the "
            f"{which.get('kind')} {which.get('name')!r} at `{which.get('layer')}`): it "  # type: ignore[attr-defined]
            "comes from another report.",
            hint="Call why() on the report whose collectives the row came from "
            "(other_report.why(row)), or pass an index into this report's collectives.")
    return i, frame.iloc[i]


_ROW_KEYS = ("kind", "name", "layer", "pass", "op_name", "bytes_per_device")


def _same_row(given, mine) -> bool:
    """Whether a row handed to why() is this report's row (same collective)."""
    try:
        return all(given.get(k) == mine[k] for k in _ROW_KEYS)
    except (TypeError, ValueError):
        return False


def _short(value: object) -> str:
    """A value for a one-line message: ints as they are, the rest quoted and cut."""

    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(value)
    text = " ".join(str(value).split())
    return repr(text if len(text) <= 40 else text[:39] + "…")
