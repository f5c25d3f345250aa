"""Few, readable rule keys for a dict of layouts: :func:`rules_for` and the
key search behind it."""

from __future__ import annotations

import re
from collections.abc import Sequence


def _escape(text: str) -> str:
    return re.sub(r"([.^$*+?{}\[\]|()\\])", r"\\\1", text)


def rules_for(specs: dict[str, tuple], paths: Sequence[str]) -> list[tuple[str, tuple]]:
    """Few, readable rules that give each path in ``specs`` its layout and
    match no other path: ``.*up/kernel`` for every block's ``up`` kernel, and
    ``.*(query|key|value)/kernel`` for siblings with one layout.

    >>> rules_for({"b0/up/kernel": (None, "m"), "b1/up/kernel": (None, "m")},
    ...           ["b0/up/kernel", "b1/up/kernel", "b0/down/kernel"])
    [('.*up/kernel', (None, 'm'))]
    >>> paths = ["h/linear_0/kernel", "e_0/linear_0/kernel", "e_0/linear_1/kernel", "h/linear_1/kernel"]
    >>> rules = rules_for({p: (None, "m") for p in paths[:3]}, paths)
    >>> [sum(bool(re.fullmatch(k, p)) for k, _ in rules) for p in paths]  # once each, or never
    [1, 1, 1, 0]
    """
    def strip(spec):
        spec = list(spec)
        while spec and spec[-1] is None:
            spec.pop()
        return tuple(spec)

    groups: dict[tuple, list[str]] = {}
    for path, spec in specs.items():
        groups.setdefault(tuple(spec), []).append(path)
    out: list[tuple[str, tuple]] = []
    for spec, members in groups.items():
        if not strip(spec):
            continue
        remaining = list(members)
        while remaining:
            key, covered = _best_key(remaining, paths)
            out.append((key, spec))
            remaining = [p for p in remaining if p not in covered]
    order = {p: i for i, p in enumerate(paths)}
    out.sort(key=lambda kv: min(order.get(p, 0) for p in paths if re.fullmatch(kv[0], p)))
    return out


def _best_key(remaining: list[str], paths: Sequence[str]):
    """The key that matches the most of ``remaining`` and nothing else (not
    another layout's paths, nor those an earlier key of this layout took:
    Keras refuses a path that two keys match), the shortest among equals,
    and the paths it matches."""
    allowed = set(remaining)
    first = remaining[0]
    parts = first.split("/")
    tries = [_escape(first)]
    for k in (1, 2, 3):
        if k > len(parts):
            continue
        tail = "/".join(parts[-k:])
        prefix = ".*" if k < len(parts) else ""
        if prefix:
            tries.append(prefix + _escape(tail))
        # Numbered layers (block_0_q, block_1_q): one key for every number.
        if re.search(r"\d", tail):
            tries.append(prefix + re.sub(r"\d+", r"\\d+", _escape(tail)))
    if len(parts) >= 2:
        # Siblings: one leaf under several layers, e.g. (query|key|value)/kernel.
        leaf = parts[-1]
        siblings = sorted({p.split("/")[-2] for p in remaining
                           if "/" in p and p.split("/")[-1] == leaf})
        if len(siblings) > 1:
            tries.append(".*(" + "|".join(_escape(x) for x in siblings) + ")/" + _escape(leaf))
            generic = sorted({re.sub(r"\d+", r"\\d+", _escape(x)) for x in siblings})
            if len(generic) < len(siblings):
                tries.append(".*(" + "|".join(generic) + ")/" + _escape(leaf))
    best: tuple | None = None
    for key in tries:
        pattern = re.compile(key)
        hit = [p for p in paths if pattern.fullmatch(p)]
        covered = [p for p in hit if p in remaining]
        if not covered or not set(hit) <= allowed:
            continue
        score = (len(covered), -len(key))
        if best is None or score > best[0]:
            best = (score, key, hit)
    if best is None:
        return _escape(first), [first]
    return best[1], best[2]
