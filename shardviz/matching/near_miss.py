"""Near misses: the paths a rule that matches nothing probably meant.

:class:`PathIndex` keeps, per model, a word index of its paths and the hint
for each key it was asked about; :func:`near_misses` and :func:`suggest_key`
are its one-off forms.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from .regex_budget import compiled, may_backtrack


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
