"""Rule matching, exactly as ``keras.distribution.LayoutMap`` looks up a path.

Keras's lookup of ``layout_map[path]``:

1. if ``path`` is itself a key, that rule wins;
2. otherwise every key is tried as a regex with ``re.fullmatch``; one match
   wins, several raise ``ValueError`` (a conflict), none returns ``None``,
   and the variable is silently replicated (or the output left alone).

On top of the answer Keras gives, a :class:`Match` says which other rules
also matched, and :func:`rule_usage` says which rules match nothing,
the most common silent mistake. Keys are compiled, and refused when they
backtrack catastrophically, in :mod:`.regex_budget`; the paths a key that
matches nothing probably meant are found in :mod:`.near_miss`.

>>> rules = ["d1/kernel", ".*kernel", ".*d1.*"]
>>> m = match_path(rules, "d1/kernel")
>>> m.how, m.rule, m.also
('exact', 0, (1, 2))
>>> match_path(rules, "d2/kernel").rule
1
>>> match_path(rules, "d1/bias").how
'regex'
>>> match_path(rules, "sequential/d1/kernel").how
'conflict'
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any, cast

# Re-exported: shardviz and its tests import these from here.
from .near_miss import PathIndex as PathIndex
from .near_miss import near_misses as near_misses
from .near_miss import suggest_key as suggest_key
from .regex_budget import REGEX_BUDGET as REGEX_BUDGET
from .regex_budget import compiled as compiled
from .regex_budget import fullmatch_within_budget as fullmatch_within_budget
from .regex_budget import may_backtrack as may_backtrack
from .regex_budget import regex_error as regex_error


@dataclasses.dataclass(frozen=True)
class Match:
    """How Keras resolves one path against the rules.

    Attributes:
        path: the looked-up path.
        how: ``"exact"`` (the path is a key), ``"regex"`` (one key
            fullmatches), ``"none"`` (no key matches), ``"conflict"`` (several
            keys fullmatch; Keras raises) or ``"error"`` (an invalid regex was
            reached; Keras raises ``re.error``).
        rule: the index of the winning rule, or None.
        candidates: every rule index whose key fullmatches the path (for an
            exact match, the exact key too).
        error: for ``how == "error"``, the message.
    """

    path: str
    how: str
    rule: int | None
    candidates: tuple[int, ...] = ()
    error: str | None = None

    @property
    def also(self) -> tuple[int, ...]:
        """The other rules that match but do not win."""
        return tuple(i for i in self.candidates if i != self.rule)

    @property
    def keras_raises(self) -> bool:
        return self.how in ("conflict", "error")


class RuleMatcher:
    """Matches many paths against ordered rule keys, caching per key.

    The cache is keyed by the key string, so after an edit to one rule only
    that rule's matches are recomputed.

    >>> matcher = RuleMatcher(["a/kernel", "a/bias", "b/kernel"])
    >>> [m.how for m in matcher.match([".*kernel"])]
    ['regex', 'none', 'regex']
    """

    def __init__(self, paths: Sequence[str]):
        self.paths = tuple(paths)
        self._longest = max(map(len, self.paths), default=0)
        self._index = {p: i for i, p in enumerate(self.paths)}
        self._hits: dict[str, frozenset[int] | str] = {}
        self._answers: dict[tuple, tuple] = {}
        self._last: tuple | None = None
        self._lock = threading.RLock()

    def hits(self, key: str) -> frozenset[int] | str:
        """Indices of the paths ``key`` fullmatches, or the regex error."""
        cached = self._hits.get(key)
        if cached is None:
            pattern = compiled(key)
            found = None
            if pattern is not None and may_backtrack(key, self._longest):
                found = fullmatch_within_budget(key, self.paths)
            if pattern is None or isinstance(found, str):
                cached = cast(str, regex_error(key))  # not None: refused or too slow
            elif found is not None:
                cached = found
            else:
                cached = frozenset(i for i, p in enumerate(self.paths) if pattern.fullmatch(p))
            self._hits[key] = cached
        return cached

    def match(self, keys: Sequence[str]) -> list[Match]:
        """One :class:`Match` per path, in path order (a shared list: do not
        modify it).

        The last few answers are kept: asking again for the same keys costs
        nothing, and when keys were edited in place (same number of rules)
        only the paths an old or a new key matches are resolved again.
        """
        keys = tuple(keys)
        with self._lock:
            cached = self._answers.get(keys)
            if cached is not None:
                return cached[0]
            answer = self._incremental(keys) or self._match_all(keys)
            self._answers[keys] = answer
            self._last = keys
            while len(self._answers) > 4:
                self._answers.pop(next(iter(self._answers)))
            return answer[0]

    def _incremental(self, keys: tuple):
        """Re-resolve only the paths that an edited key matched or matches."""
        last = self._last
        if last is None or len(last) != len(keys) or last not in self._answers:
            return None
        if len(set(keys)) != len(keys) or len(set(last)) != len(last):
            return None  # duplicate keys change which rule counts
        if any(isinstance(self.hits(k), str) for k in keys + last):
            return None  # an invalid regex changes every path's answer
        changed = [i for i, (a, b) in enumerate(zip(last, keys)) if a != b]
        old_out, old_cands = self._answers[last]
        cands = dict(old_cands)
        touched: set[int] = set()
        for i in changed:
            # Every key is a valid regex (checked above), so its hits are a frozenset.
            old_hits = cast(frozenset[int], self.hits(last[i]))
            new_hits = cast(frozenset[int], self.hits(keys[i]))
            touched |= old_hits | new_hits
            for key in (last[i], keys[i]):
                if key in self._index:
                    touched.add(self._index[key])
            for p in old_hits - new_hits:
                rest = tuple(j for j in cands[p] if j != i)
                if rest:
                    cands[p] = rest
                else:
                    del cands[p]
            for p in new_hits - old_hits:
                cands[p] = tuple(sorted(cands.get(p, ()) + (i,)))
        first = {k: i for i, k in enumerate(keys)}
        out = list(old_out)
        for p in touched:
            out[p] = self._resolve(p, cands.get(p, ()), first, ())
        return out, cands

    def _resolve(self, p: int, cands: tuple, first: dict,
                 errors: Sequence[tuple[int, str, str]]) -> Match:
        path = self.paths[p]
        exact = first.get(path)
        if exact is not None:
            return Match(path, "exact", exact, tuple(sorted(set(cands) | {exact})))
        if errors:
            # Keras tries every key with re.fullmatch; an invalid one raises.
            i, key, msg = errors[0]
            return Match(path, "error", None, cands, f"rule {i} {key!r}: {msg}")
        if len(cands) > 1:
            return Match(path, "conflict", None, cands)
        if cands:
            return Match(path, "regex", cands[0], cands)
        return Match(path, "none", None, ())

    def _match_all(self, keys: tuple):
        first: dict[str, int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        lists: dict[int, list[int]] = {}
        errors = []
        for i, key in enumerate(keys):
            hits = self.hits(key)
            if isinstance(hits, str):
                errors.append((i, key, hits))
                continue
            if first[key] != i:
                continue  # a duplicate key; Keras refuses it at insertion
            for p in hits:
                lists.setdefault(p, []).append(i)
        cands = {p: tuple(c) for p, c in lists.items()}
        resolve = self._resolve
        if errors:
            return [resolve(p, cands.get(p, ()), first, errors)
                    for p in range(len(self.paths))], cands
        exact = {self._index[k] for k in first if k in self._index}
        out = [Match(path, "none", None, ()) for path in self.paths]
        for p in exact.union(cands):
            out[p] = resolve(p, cands.get(p, ()), first, errors)
        return out, cands


def match_path(keys: Sequence[str], path: str) -> Match:
    """Resolve one path, as ``LayoutMap.__getitem__`` would."""
    return RuleMatcher([path]).match(keys)[0]


def rule_usage(keys: Sequence[str], matches: Sequence[Match]) -> list[dict]:
    """For each rule: how many paths it matches, how many it wins, and why
    it changes nothing if it does not.

    ``status`` is ``"used"``, ``"unused"`` (it fullmatches no path),
    ``"shadowed"`` (every path it matches is an exact key of another rule),
    ``"conflicted"`` (every path it matches also matches another rule, so
    Keras raises), ``"blocked"`` (its paths fail because another key is an
    invalid regex, which Keras hits on every lookup) or ``"invalid"`` (not a
    valid regex).

    >>> ms = RuleMatcher(["a/kernel", "b/kernel"]).match(["a/kernel", ".*a.*", "x"])
    >>> [u["status"] for u in rule_usage(["a/kernel", ".*a.*", "x"], ms)]
    ['used', 'shadowed', 'unused']
    """
    usage: list[dict[str, Any]] = [{"index": i, "key": k, "matches": 0, "wins": 0, "status": "unused"}
             for i, k in enumerate(keys)]
    for m in matches:
        for i in m.candidates:
            usage[i]["matches"] += 1
        if m.rule is not None:
            usage[m.rule]["wins"] += 1
    for u in usage:
        if _regex_invalid(u["key"]):
            u["status"] = "invalid"
        elif u["wins"]:
            u["status"] = "used"
        elif u["matches"]:
            mine = [m for m in matches if u["index"] in m.candidates]
            if any(m.how == "error" for m in mine):
                u["status"] = "blocked"
            elif any(m.how == "conflict" for m in mine):
                u["status"] = "conflicted"
            else:
                u["status"] = "shadowed"
    return usage


def _regex_invalid(key: str) -> bool:
    return regex_error(key) is not None
