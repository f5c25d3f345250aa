"""Rule matching, the foundation every layer stands on: which rule key
matches a path, exactly as ``keras.distribution.LayoutMap`` looks a path up
(``re.fullmatch``, the first key in order), with nothing else of shardviz
below it.

* ``match``: :func:`match_path`, :class:`RuleMatcher` and the usage of each rule;
* ``regex_budget``: rule keys as regexes: compiled once, and refused when they backtrack;
* ``near_miss``: the paths a rule that matches nothing probably meant.
"""

from .match import Match, RuleMatcher, match_path, rule_usage
from .near_miss import PathIndex, near_misses, suggest_key
from .regex_budget import compiled, regex_error

__all__ = ["Match", "PathIndex", "RuleMatcher", "compiled", "match_path", "near_misses",
           "regex_error", "rule_usage", "suggest_key"]
