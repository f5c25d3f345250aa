"""Rule matching, exactly as ``keras.distribution.LayoutMap`` looks up a path.

Keras's lookup of ``layout_map[path]``:

1. if ``path`` is itself a key, that rule wins;
2. otherwise every key is tried as a regex with ``re.fullmatch``; one match
   wins, several raise ``ValueError`` (a conflict), none returns ``None``,
   and the variable is silently replicated (or the output left alone).

On top of the answer Keras gives, a :class:`Match` says which other rules
also matched, and :func:`unused_rules` lists the rules that match nothing,
the most common silent mistake.

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
import re
from collections.abc import Sequence

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
        self._index = {p: i for i, p in enumerate(self.paths)}
        self._hits: dict[str, frozenset[int] | str] = {}

    def hits(self, key: str) -> frozenset[int] | str:
        """Indices of the paths ``key`` fullmatches, or the regex error."""
        cached = self._hits.get(key)
        if cached is None:
            try:
                fullmatch = re.compile(key).fullmatch
            except re.error as e:
                cached = str(e)
            else:
                cached = frozenset(i for i, p in enumerate(self.paths) if fullmatch(p))
            self._hits[key] = cached
        return cached

    def match(self, keys: Sequence[str]) -> list[Match]:
        """One :class:`Match` per path, in path order."""
        keys = list(keys)
        first = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        candidates = [[] for _ in self.paths]
        errors = []
        for i, key in enumerate(keys):
            hits = self.hits(key)
            if isinstance(hits, str):
                errors.append((i, key, hits))
                continue
            if first[key] != i:
                continue  # a duplicate key; Keras refuses it at insertion
            for p in hits:
                candidates[p].append(i)
        out = []
        for p, path in enumerate(self.paths):
            cands = tuple(candidates[p])
            exact = first.get(path)
            if exact is not None:
                all_c = tuple(sorted(set(cands) | {exact}))
                out.append(Match(path, "exact", exact, all_c))
            elif errors:
                # Keras tries every key with re.fullmatch; an invalid one raises.
                i, key, msg = errors[0]
                out.append(Match(path, "error", None, cands, f"rule {i} {key!r}: {msg}"))
            elif len(cands) > 1:
                out.append(Match(path, "conflict", None, cands))
            elif cands:
                out.append(Match(path, "regex", cands[0], cands))
            else:
                out.append(Match(path, "none", None, ()))
        return out


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
    usage = [{"index": i, "key": k, "matches": 0, "wins": 0, "status": "unused"}
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
    try:
        re.compile(key)
    except re.error:
        return True
    return False


def near_misses(key: str, paths: Sequence[str], limit: int = 3) -> list[str]:
    """Paths a rule probably meant: those it finds with ``re.search`` (it
    matches a part but not the whole path), else the closest by spelling.

    >>> near_misses("d1/kernel", ["sequential/d1/kernel", "sequential/d1/bias"])
    ['sequential/d1/kernel']
    """
    try:
        search = re.compile(key).search
    except re.error:
        search = None
    found = [p for p in paths if search and search(p)][:limit]
    if found:
        return found
    import difflib

    return difflib.get_close_matches(key, list(paths), n=limit, cutoff=0.6)


def suggest_key(key: str, paths: Sequence[str]) -> str | None:
    """A key that would match what ``key`` finds only as a substring.

    >>> suggest_key("d1/kernel", ["sequential/d1/kernel"])
    '.*d1/kernel'
    """
    misses = near_misses(key, paths)
    if not misses:
        return None
    candidates = [f".*{key}", f".*{key}.*", f"{key}.*"]
    for cand in candidates:
        try:
            if any(re.fullmatch(cand, p) for p in misses):
                return cand
        except re.error:
            return None
    return None
