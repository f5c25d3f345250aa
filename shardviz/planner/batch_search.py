"""The largest batch that fits, found from few compiles: a search over the
compiler's verdicts, each point one compile (:func:`search_largest_batch`).
It knows nothing of models: :func:`~shardviz.planner.fit_search.fit` hands
it a function that compiles the train step at a batch."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..format import human_bytes

MAX_COMPILES = 12
"""The most compiles one question (one remat mode) may take."""

MAX_BATCH = 2**20
"""The largest global batch :func:`fit` looks at."""

FIRST_BATCHES = (8, 64)
"""The first batch compiled (times the batch axis's size), large enough that
the padding of a small batch does not bend the line; and the least second
batch after it fits."""


LAST_MARGIN = 0.02
"""How far under the capacity the last compile a search may make aims: the
line through points far apart bends a little near the edge."""


class OutOfCompiles(Exception):
    """The search used every compile it was allowed."""


@dataclasses.dataclass(frozen=True)
class Point:
    """One compile of the search: the batch, the compiler's verdict, and the
    bytes per chip it checked (its peak for a program it took, what it
    needed for one it refused), or None where it did not say."""

    batch: int
    fits: bool
    checked: int | None
    state: int | None = None
    """The bytes per chip that do not grow with the batch (the variables and
    the optimizer's state), where known."""


@dataclasses.dataclass
class Found:
    """The search's answer: the largest batch that fits (None: not even the
    batch axis's size) and the smallest refused above it (None: none up to
    :data:`MAX_BATCH`), with notes on how the search went."""

    fits: int | None
    refused: int | None
    compiles: int
    notes: list[str]


def search_largest_batch(verdict: Callable[[int], Point], unit: int, capacity: int,
                         max_compiles: int = MAX_COMPILES, precision: float = 0.0) -> Found:
    """The largest multiple of ``unit`` that fits, from few compiles.

    Refusals are cheap (the compiler stops early) and still say how many
    bytes the program needed; fitting compiles are the costly ones. So the
    search places its line with refusals: batch ``8 * unit``, then ``unit``
    if that is refused or, if it fits, a batch past the edge
    (:func:`_past_the_edge`), gives two points; then,
    for the batch ``g`` the line puts at the capacity, it compiles ``g +
    unit`` first (expected refused) and ``g`` after it. Where the bytes grow
    linearly in the batch that is 4 compiles, 2 of them fitting. Where the
    line misses (the compiler squeezes a program near the capacity), it
    moves along the line through the closest points on either side, halving
    the gap when the line does not close it, and says so. With one compile
    left (``max_compiles``), it compiles the guess itself, aimed a little
    under the capacity (:data:`LAST_MARGIN`).

    >>> def linear(b):  # 1 GiB, plus 0.3 GiB per example, on a 16 GiB chip
    ...     need = 2**30 + b * 3 * 2**30 // 10
    ...     return Point(b, need <= 16 * 2**30, need)
    >>> found = search_largest_batch(linear, 1, 16 * 2**30)
    >>> found.fits, found.refused, found.compiles
    (50, 51, 4)
    """
    points: dict[int, Point] = {}
    notes: list[str] = []
    predicted: dict[int, float] = {}

    def at(b: int) -> Point:
        if b not in points:
            if len(points) >= max_compiles:
                raise OutOfCompiles
            points[b] = verdict(b)
        return points[b]

    def bracket() -> tuple[int | None, int | None]:
        lo = max((b for b, p in points.items() if p.fits), default=None)
        above = [b for b, p in points.items() if not p.fits and (lo is None or b > lo)]
        return lo, min(above) if above else None

    def done(lo: int, hi: int | None) -> Found:
        if hi is not None and hi > lo + unit:
            notes.append(f"batch {lo} fits and {hi} does not; the largest lies between "
                         f"(within {precision:.0%}, the precision asked)")
        fitting = sum(p.fits for p in points.values())
        if precision == 0 and hi is not None and (len(points) > 4 or fitting > 2):
            notes.append(_why_more(points, predicted, capacity))
        return Found(lo, hi, len(points), notes)

    try:
        first = FIRST_BATCHES[0] * unit
        if not at(first).fits and not at(unit).fits:
            return Found(None, unit, len(points), notes)
        if at(first).fits:
            at(_past_the_edge(points[first], capacity, unit))
        stalled = misses = 0
        while True:
            lo, hi = bracket()
            assert lo is not None
            if hi is not None and hi - lo <= max(unit, int(precision * lo) // unit * unit):
                return done(lo, hi)
            # With one compile left, the guess itself is worth more than the batch after it,
            # and a guess a little under the line is more likely to be one that fits.
            last = len(points) + 1 >= max_compiles
            aim = int(capacity * (1 - LAST_MARGIN)) if last else capacity
            guess, expected = _line_guess(points, lo, hi, aim, unit)
            if hi is None and guess > MAX_BATCH:
                if MAX_BATCH in points:
                    notes.append(f"the largest batch looked at ({MAX_BATCH}, MAX_BATCH) fits")
                    return Found(lo, None, len(points), notes)
                guess = MAX_BATCH
            galloping = bool(misses) and hi is not None
            if hi is not None:
                if galloping and misses == 1:
                    # The compiler refused what the line put under its capacity: at the edge
                    # its check is not a byte count; the batch below is the likely answer.
                    guess, expected = hi - unit, None
                elif galloping or stalled >= 2:  # the line keeps missing: halve the gap
                    guess, expected = lo + max(1, (hi - lo) // unit // 2) * unit, None
                guess = min(max(guess, lo + unit), hi - unit)
            if expected is not None:
                predicted.setdefault(guess, expected)
            width = None if hi is None else hi - lo
            if not galloping and not last and (hi is None or guess + unit < hi) and \
                    guess + unit not in points and guess != MAX_BATCH:
                at(guess + unit)
            if guess not in points and not points.get(guess + unit, Point(0, False, None)).fits:
                point = at(guess)
                under = expected is not None and expected <= aim
                misses = misses + 1 if not point.fits and (galloping or under) else 0
            lo, hi = bracket()
            narrowed = width is not None and hi is not None and hi - (lo or 0) <= width // 2
            stalled = 0 if narrowed or width is None else stalled + 1
    except OutOfCompiles:
        lo, hi = bracket()
        notes.append(f"stopped after {max_compiles} compiles (max_compiles); the largest batch "
                     f"is {lo} or more" + (f", below {hi}" if hi is not None else ""))
        return Found(lo, None, len(points), notes)


def _past_the_edge(point: Point, capacity: int, unit: int) -> int:
    """A batch the compiler should refuse, after ``point`` fit: everything
    but the state taken to grow with the batch overstates the growth, so the
    batch where that reaches the capacity is at or under the edge; eight
    times it is past the edge unless the temporaries that do not grow with
    the batch are more than 7 times those that do at ``point``. At least
    ``FIRST_BATCHES[1] * unit``.

    >>> _past_the_edge(Point(8, True, 9 * 2**30, 2**30), 16 * 2**30, 1)  # 1 GiB a batch
    120
    >>> _past_the_edge(Point(8, True, 2 * 2**30, 2**30), 16 * 2**30, 1)  # 1/8 GiB a batch
    960
    """
    floor = FIRST_BATCHES[1] * unit
    if point.checked is None or point.state is None or point.checked <= point.state:
        return floor
    per_example = (point.checked - point.state) / point.batch
    under = (capacity - point.state) / per_example
    return min(max(floor, int(8 * under) // unit * unit), MAX_BATCH // unit * unit)


def _why_more(points: dict[int, Point], predicted: dict[int, float], capacity: int) -> str:
    """Why the search took more than 4 compiles (or more than 2 fitting)."""
    fitting = sum(p.fits for p in points.values())
    for b, p in sorted(points.items()):
        want = predicted.get(b)
        if want is not None and p.checked is not None and \
                abs(p.checked - want) > 0.01 * max(capacity, 1):
            return (f"{len(points)} compiles ({fitting} fitting), not 4: the compiler's bytes "
                    f"are not linear in the batch here (at batch {b} it "
                    f"{'used' if p.fits else 'needed'} {human_bytes(p.checked)} per chip, where "
                    f"the line through the batches before said {human_bytes(want)})")
    for b, p in sorted(points.items()):
        want = predicted.get(b)
        if want is not None and (want <= capacity) != p.fits:
            return (f"{len(points)} compiles ({fitting} fitting), not 4: the line put batch {b} "
                    f"{'under' if want <= capacity else 'over'} the capacity, by "
                    f"{human_bytes(abs(capacity - want))}, and the compiler "
                    f"{'refused' if not p.fits else 'took'} it: at the edge its check is not "
                    "a sum of bytes")
    unknown = [b for b, p in sorted(points.items()) if p.checked is None]
    if unknown:
        return (f"{len(points)} compiles ({fitting} fitting), not 4: the compiler did not say "
                f"the bytes it checked at batch {unknown[0]}, so the search halved the gap")
    return (f"{len(points)} compiles ({fitting} fitting), not 4: the first two batches were "
            "far from the edge")


def _line_guess(points: dict[int, Point], lo: int, hi: int | None, capacity: int,
                unit: int) -> tuple[int, float | None]:
    """The largest batch (a multiple of ``unit``) under ``capacity`` on the
    line through the largest fitting batch and the smallest refused one (or,
    with none refused, the two largest batches), and the bytes the line
    predicts there; the midpoint where the line cannot be drawn."""
    if hi is not None:
        pair = [points[lo], points[hi]]
    else:
        pair = sorted(points.values(), key=lambda p: p.batch)[-2:]
    (b1, m1), (b2, m2) = ((p.batch, p.checked) for p in pair)
    if m1 is None or m2 is None or b1 == b2:
        middle = lo + max(1, ((hi or 4 * lo) - lo) // unit // 2) * unit
        return middle, None
    slope = (m2 - m1) / (b2 - b1)
    if slope <= 0:
        return (MAX_BATCH + unit, None) if hi is None else (lo + unit, None)
    guess = max(unit, int((b1 + (capacity - m1) / slope) // unit) * unit)
    return guess, m1 + slope * (guess - b1)
