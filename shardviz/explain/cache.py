"""What explaining a report has computed, kept beside the report for as long
as it lives: explanations by row, and each counterfactual plan's report."""

from __future__ import annotations

import dataclasses
import threading
import weakref
from typing import TYPE_CHECKING, Any

from ..errors import ShardvizError
from ..plan import Plan
from .explanation import Explanation

if TYPE_CHECKING:
    from ..report import Report, Settings


@dataclasses.dataclass
class Cache:
    """What explaining a report's collectives has computed: the
    explanations by row, and each counterfactual plan's report."""

    explanations: dict[int, Explanation] = dataclasses.field(default_factory=dict)
    counterfactuals: dict[Any, Report] = dataclasses.field(default_factory=dict)


_CACHES: weakref.WeakKeyDictionary[Report, Cache] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def cache_of(report: Report) -> Cache:
    """The explanation cache of ``report``, kept beside it (not on it) for
    as long as the report lives."""
    with _CACHES_LOCK:
        cache = _CACHES.get(report)
        if cache is None:
            cache = _CACHES[report] = Cache()
        return cache


def analysed(report: Report, plan: Plan, settings: Settings) -> Report:
    """``plan`` analysed with ``report``'s scan and ``settings``, kept on the
    report so that explaining its other collectives does not compile it again."""
    analyze = report._reanalyse
    if analyze is None:
        raise ShardvizError(
            "This report was not made by shardviz.analyze, so why() cannot analyse other "
            "plans to find a fix.", hint="Call explain_collective(report, i, search=False), "
            "or analyse the model with shardviz.analyze.")
    key = (plan, tuple((k, repr(v)) for k, v in settings.as_dict().items()))
    cache = cache_of(report).counterfactuals
    if key not in cache:
        cache[key] = analyze(report.scan, plan, settings=settings)
    return cache[key]
