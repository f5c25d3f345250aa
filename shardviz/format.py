"""How shardviz writes numbers, specs and counts in messages and tables.

These are used both by the checks (whose messages name byte counts) and by
every renderer, so they sit below both.

>>> human_bytes(1536), format_spec((None, "model")), plural(1, "warning"), plural(3, "warning")
('1.5 KiB', "P(None, 'model')", '1 warning', '3 warnings')
"""

from __future__ import annotations


def human_bytes(n: float) -> str:
    """``1536`` as ``'1.5 KiB'``.

    >>> human_bytes(3 * 2**30)
    '3.0 GiB'
    """
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def format_spec(spec) -> str:
    """``(None, 'model')`` as ``P(None, 'model')``; fully replicated as ``P()``.

    >>> format_spec((None, "model")), format_spec((None, None))
    ("P(None, 'model')", 'P()')
    """
    if spec is None:
        return "—"
    if all(a is None for a in spec):
        return "P()"
    return "P(" + ", ".join(repr(a) for a in spec) + ")"


def plural(n: int, word: str, words: str | None = None) -> str:
    """``n`` and the word, in the singular for 1.

    >>> plural(1, "collective"), plural(0, "collective"), plural(2, "axis", "axes")
    ('1 collective', '0 collectives', '2 axes')
    """
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def human_seconds(s: float | None) -> str:
    """``0.0123`` as ``'12.3 ms'``; None as ``'—'``.

    >>> human_seconds(2.5), human_seconds(0.0123), human_seconds(4e-6), human_seconds(None)
    ('2.50 s', '12.3 ms', '4.0 µs', '—')
    """
    if s is None or s != s:
        return "—"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.1f} µs"


def format_mesh(mesh, times: str = " × ") -> str:
    """A mesh as its axes and sizes, the one way shardviz writes it in
    titles and tables (error messages show the mesh as a dict, to copy).

    >>> format_mesh({"batch": 2, "model": 4})
    'batch=2 × model=4'
    >>> format_mesh((("batch", 2),), times=" x ")
    'batch=2'
    """
    items = mesh.items() if hasattr(mesh, "items") else mesh
    return times.join(f"{name}={size}" for name, size in items)
