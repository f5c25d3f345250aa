"""Rule matching, exactly as ``keras.distribution.LayoutMap`` looks up a path.

Keras's lookup of ``layout_map[path]``:

1. if ``path`` is itself a key, that rule wins;
2. otherwise every key is tried as a regex with ``re.fullmatch``; one match
   wins, several raise ``ValueError`` (a conflict), none returns ``None``,
   and the variable is silently replicated (or the output left alone).

On top of the answer Keras gives, a :class:`Match` says which other rules
also matched, and :func:`rule_usage` says which rules match nothing,
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
import functools
import json
import math
import re
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any, cast


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


@functools.lru_cache(maxsize=65536)
def _compile(pattern: str) -> tuple[re.Pattern | None, str | None]:
    try:
        return re.compile(pattern), None
    except re.error as e:
        return None, str(e)
    except OverflowError as e:
        # re raises OverflowError, not re.error, for a repeat count such as
        # a{99999999999}; Keras's re.fullmatch raises it too.
        return None, (f"{e}: use a smaller count in {{m,n}}, or '+' or '*' for any "
                      "number of repeats")
    except RecursionError:
        # re's parser recurses once per nested group.
        return None, "groups are nested too deeply for Python's re: nest fewer groups"
    except (MemoryError, ValueError) as e:
        return None, f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def compiled(pattern: str) -> re.Pattern | None:
    """``pattern`` compiled, or None if it is not a valid regex (or was found
    to backtrack catastrophically). The one place shardviz compiles a rule
    key (cached: a plan is re-checked on every edit, and ``re``'s own cache
    holds 512 patterns).

    >>> compiled(".*kernel").fullmatch("d/kernel") is not None, compiled("(")
    (True, None)
    """
    if pattern in _BACKTRACKS:
        return None
    return _compile(pattern)[0]


def regex_error(pattern: str) -> str | None:
    """The reason ``pattern`` is not a valid regex, or None. A key that
    compiles but was found to backtrack catastrophically on a path (see
    :func:`fullmatch_within_budget`) has a reason too: Keras would hang on it.

    >>> regex_error("dense/(kernel")
    'missing ), unterminated subpattern at position 6'
    >>> regex_error("a{99999999999}")[:34]
    'the repetition number is too large'
    """
    return _compile(pattern)[1] or _BACKTRACKS.get(pattern)


# ------------------------------------------------------------ regex budget
REGEX_BUDGET = 0.5
"""CPU seconds one ``re.fullmatch`` of a rule key against one path may take.
A key that needs longer backtracks catastrophically, and Keras, which makes
the same call, would hang on it."""

PROBE_TIMEOUT = 60.0
"""Wall seconds a probe process may take in all (its start included)."""

_BACKTRACKS: dict[str, str] = {}
"""Keys found to backtrack catastrophically, with the reason."""

_QUANTIFIER = re.compile(r"[*+]|\{(\d*)(,?)(\d*)\}")
_VERBOSE = re.compile(r"\(\?[aiLmsux]*x")


def _repeats(key: str) -> tuple[int, str | None]:
    """``(unbounded, group)``: how many unbounded repeats (``*``, ``+``,
    ``{m,}``) ``key`` has, and the first group it repeats more than once
    (such as ``(a+)+``), or None. Read from the text alone.

    >>> _repeats(".*dense.*/kernel"), _repeats("(a|aa)+$"), _repeats("x(b_[0-9]+){2}")
    ((2, None), (1, '(a|aa)+'), (1, '(b_[0-9]+){2}'))
    """
    unbounded, group, opens = 0, None, []
    closed: tuple[int, int] | None = None  # the group that ends just before position i
    after_group: tuple[int, int] | None
    i, n = 0, len(key)
    while i < n:
        c, after_group, closed = key[i], closed, None
        if c == "\\":
            i += 2
        elif c == "[":  # a class: its characters are literal
            j = i + 1 + (key[i + 1:i + 2] == "^")
            j += key[j:j + 1] == "]"
            while j < n and key[j] != "]":
                j += 2 if key[j] == "\\" else 1
            i = j + 1
        elif c == "(":
            opens.append(i)
            i += 1
        elif c == ")":
            closed = (opens.pop(), i + 1) if opens else None
            i += 1
        else:
            m = _QUANTIFIER.match(key, i)
            if m is None or (c == "{" and not (m.group(1) or m.group(3))):
                i += 1
                continue
            end = m.end() + (key[m.end():m.end() + 1] in ("?", "+"))  # lazy or possessive
            if c in "*+" or (m.group(2) and not m.group(3)):
                unbounded += 1
                most = math.inf
            else:
                most = int(m.group(3) or m.group(1))
            if after_group is not None and most > 1 and group is None:
                group = key[after_group[0]:end]
            i = end
    return unbounded, group


def may_backtrack(key: str, longest: int) -> bool:
    """Whether ``key`` might take long to fullmatch a path of up to
    ``longest`` characters: it repeats a group (possibly exponential, as
    ``(a+)+``), or has so many unbounded repeats that trying every split of
    such a path is costly. A cheap reading of the text; a key it clears
    (``.*dense.*/kernel``, ``block_\\d+/(query|key|value)/kernel``) is matched
    directly.

    >>> may_backtrack(".*dense.*/kernel", 200), may_backtrack("(a+)+$", 30)
    (False, True)
    """
    if _VERBOSE.search(key):
        return bool(_QUANTIFIER.search(key))
    unbounded, group = _repeats(key)
    if group is not None:
        return True
    return unbounded > 1 and longest ** unbounded / math.factorial(unbounded) > 1e7


_PROBE = """
import json, re, signal, sys, time
key, paths, budget, total = json.loads(sys.stdin.read())
pattern = re.compile(key)
class Slow(Exception):
    pass
def stop(*_):
    raise Slow
timer = getattr(signal, "ITIMER_VIRTUAL", None)
if timer is not None:
    signal.signal(signal.SIGVTALRM, stop)
hits, start = [], time.process_time()
for i, path in enumerate(paths):
    try:
        if timer is not None:
            signal.setitimer(timer, budget)
        found = pattern.fullmatch(path) is not None
        if timer is not None:
            signal.setitimer(timer, 0)
    except Slow:
        found = None
    if found is None or time.process_time() - start > total:
        print(json.dumps({"slow": i}))
        break
    if found:
        hits.append(i)
else:
    print(json.dumps({"hits": hits}))
"""


def fullmatch_within_budget(key: str, paths: Sequence[str],
                            budget: float = REGEX_BUDGET) -> frozenset[int] | str | None:
    """The indices of the ``paths`` that ``key`` fullmatches, found in a
    child process that gives each path ``budget`` CPU seconds; or, when one
    takes longer, why the key is refused (it is also kept for
    :func:`regex_error`); or None when no child process can be started.

    Python's ``re`` cannot be stopped from another thread, so the matching
    runs in a separate interpreter (the same ``re``, so the same answers as
    Keras's ``re.fullmatch``).
    """
    if key in _BACKTRACKS:
        return _BACKTRACKS[key]
    if not sys.executable:
        return None
    payload = json.dumps([key, list(paths), budget, 10 * budget])
    slow: int | None = None
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", _PROBE], input=payload,
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT)
    except subprocess.TimeoutExpired:
        slow = -1
    except OSError:
        return None
    else:
        try:
            answer = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            return None
        if "hits" in answer:
            return frozenset(answer["hits"])
        slow = int(answer["slow"])
    where = f"the path {paths[slow]!r}" if 0 <= slow < len(paths) else "the model's paths"
    reason = (f"it backtracks catastrophically: re.fullmatch against {where} ran past "
              f"shardviz's budget of {budget:g} s, and Keras makes the same call, so it would "
              f"hang there. {_rewrite_advice(key)}")
    while len(_BACKTRACKS) >= 1024:
        _BACKTRACKS.pop(next(iter(_BACKTRACKS)))
    _BACKTRACKS[key] = reason
    return reason


def _rewrite_advice(key: str) -> str:
    unbounded, group = _repeats(key)
    if group is not None:
        return (f"The group {group!r} is repeated, and what is inside it can match the same "
                "text in more than one way (as in '(a+)+', '(a|aa)+' or '(.*)*'): repeat once "
                "instead ('a+' for '(a+)+', '.*' for '(.*)*'), or make the alternatives "
                "exclusive (e.g. '(query|key|value)')")
    return (f"Its {unbounded} unbounded repeats (such as '.*') can each take any part of the "
            "path: use fewer, and put literal text between them (e.g. '.*block_\\d+/kernel')")


def _regex_invalid(key: str) -> bool:
    return regex_error(key) is not None


class PathIndex:
    """Finds the paths a rule that matches nothing probably meant, fast.

    A hint is computed once per key and kept, so that after an edit only the
    edited rule's hint is new. Paths a key finds with ``re.search`` (it
    matches a part but not the whole path) come first; otherwise the closest
    by spelling, among the paths that share the most words with the key.

    >>> index = PathIndex(["sequential/d1/kernel", "sequential/d1/bias"])
    >>> index.near_misses("d1/kernel"), index.suggest_key("d1/kernel")
    (['sequential/d1/kernel'], '.*d1/kernel')
    """

    CANDIDATES = 64
    """Paths compared by spelling, at most, per key."""

    def __init__(self, paths: Sequence[str]):
        self.paths = tuple(paths)
        self._words: dict[str, list[int]] | None = None
        self._misses: dict[tuple[str, int], list[str]] = {}
        self._keys: dict[str, str | None] = {}
        self.problems: dict = {}
        """Problems about keys that match nothing, kept per key by the checks."""

    @staticmethod
    def words(text: str) -> set[str]:
        return {w.lower() for w in re.findall(r"[A-Za-z]+|\d+", text)}

    def _by_word(self) -> dict[str, list[int]]:
        if self._words is None:
            index: dict[str, list[int]] = {}
            for i, path in enumerate(self.paths):
                for w in self.words(path):
                    index.setdefault(w, []).append(i)
            self._words = index
        return self._words

    def near_misses(self, key: str, limit: int = 3) -> list[str]:
        cached = self._misses.get((key, limit))
        if cached is not None:
            return cached
        pattern = compiled(key)
        # re.search tries every start: a key that may backtrack is not run here.
        search = pattern.search if pattern is not None and not may_backtrack(
            key, max(map(len, self.paths), default=0)) else None
        found = []
        if search is not None:
            for p in self.paths:
                if search(p):
                    found.append(p)
                    if len(found) == limit:
                        break
        if not found:
            import difflib

            by_word = self._by_word()
            shared: dict[int, int] = {}
            for w in self.words(key):
                for i in by_word.get(w, ()):
                    shared[i] = shared.get(i, 0) + 1
            best = sorted(shared, key=lambda i: (-shared[i], i))[: self.CANDIDATES]
            found = difflib.get_close_matches(key, [self.paths[i] for i in best], n=limit,
                                              cutoff=0.6)
        self._misses[(key, limit)] = found
        return found

    def suggest_key(self, key: str) -> str | None:
        """A key that would match what ``key`` finds only as a substring."""
        if key not in self._keys:
            self._keys[key] = self._suggest(key)
        return self._keys[key]

    def _suggest(self, key: str) -> str | None:
        misses = self.near_misses(key)
        if not misses:
            return None
        for cand in (f".*{key}", f".*{key}.*", f"{key}.*"):
            pattern = compiled(cand)
            if pattern is None:
                return None
            if any(pattern.fullmatch(p) for p in misses):
                return cand
        return None


def near_misses(key: str, paths: Sequence[str], limit: int = 3) -> list[str]:
    """Paths a rule probably meant (see :class:`PathIndex`).

    >>> near_misses("d1/kernel", ["sequential/d1/kernel", "sequential/d1/bias"])
    ['sequential/d1/kernel']
    """
    return PathIndex(paths).near_misses(key, limit)


def suggest_key(key: str, paths: Sequence[str]) -> str | None:
    """A key that would match what ``key`` finds only as a substring.

    >>> suggest_key("d1/kernel", ["sequential/d1/kernel"])
    '.*d1/kernel'
    """
    return PathIndex(paths).suggest_key(key)
