"""Rule keys as regexes: compiling them, and refusing the ones that backtrack.

Keras tries every rule key against a path with ``re.fullmatch``. Here a key
is compiled once (:func:`compiled`, :func:`regex_error`), and a key that
might backtrack catastrophically (:func:`may_backtrack`, read from its text)
is first matched in a child process under a time budget
(:func:`fullmatch_within_budget`); one that runs past it is refused as
invalid, since Keras would hang on it.
"""

from __future__ import annotations

import functools
import json
import math
import re
import subprocess
import sys
from collections.abc import Sequence


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
