"""The largest-batch search on its own, against programs whose bytes are
known: exact always, and 4 compiles (2 fitting) where the bytes grow
linearly in the batch. Each compile is a call of the verdict, so the counts
are the compiles fit would make."""

from hypothesis import given, settings
from hypothesis import strategies as st

from shardviz.planner.batch_search import MAX_BATCH, Point, search_largest_batch

GIB = 2**30
CAPACITY = 16 * GIB


def program(intercept, per_example, unit, squeeze=None, state=None):
    """A verdict function: ``intercept`` bytes plus ``per_example`` a batch
    row, of which ``state`` are the variables and optimizer state (the rest
    of the intercept are temporaries that do not grow with the batch);
    ``squeeze(b, need)`` bends what the compiler reports near the edge."""
    calls = []

    def verdict(b):
        assert b % unit == 0 and b > 0
        calls.append(b)
        need = intercept + per_example * b
        checked = squeeze(b, need) if squeeze else need
        return Point(b, need <= CAPACITY, checked, intercept if state is None else state)

    return verdict, calls


def largest(state, per_example, unit):
    best = (CAPACITY - state) // per_example // unit * unit
    return best if best >= unit else None


@settings(max_examples=300, deadline=None)
@given(state=st.integers(0, 15 * GIB), per_example=st.integers(2**16, 8 * GIB),
       unit=st.sampled_from([1, 2, 4, 8, 16]), fixed_temps=st.floats(0, 7))
def test_linear_bytes_take_four_compiles_two_fitting(state, per_example, unit, fixed_temps):
    # Temporaries that do not grow with the batch are part of the intercept too:
    # up to 7 times those that grow, at the first batch compiled.
    intercept = int(state + fixed_temps * per_example * 8 * unit)
    best = largest(intercept, per_example, unit)
    verdict, calls = program(intercept, per_example, unit, state=state)
    found = search_largest_batch(verdict, unit, CAPACITY)
    assert found.fits == best
    if best is None:
        assert found.refused == unit
        return
    if best + unit > MAX_BATCH:
        return
    assert found.refused == best + unit
    fitting = [b for b in calls if b <= best]
    assert len(calls) <= 4 and len(fitting) <= 2, (calls, best)
    assert not found.notes


@settings(max_examples=200, deadline=None)
@given(state=st.integers(0, 12 * GIB), per_example=st.integers(2**20, 2 * GIB),
       unit=st.sampled_from([1, 2, 8]), bend=st.floats(0.0, 0.9), max_compiles=st.integers(2, 12))
def test_any_monotone_verdict_gives_the_exact_answer_or_says_where_it_stopped(
        state, per_example, unit, bend, max_compiles):
    # Near the edge the compiler squeezes a program: the bytes it reports for
    # one it took flatten (as for a GPT-2 fine-tune on one v5e chip).
    def squeeze(b, need):
        return need if need > CAPACITY else int(need - bend * max(0, need - 0.6 * CAPACITY))

    best = largest(state, per_example, unit)
    verdict, calls = program(state, per_example, unit, squeeze)
    found = search_largest_batch(verdict, unit, CAPACITY, max_compiles=max_compiles)
    assert len(calls) == len(set(calls)) == found.compiles <= max_compiles
    if found.refused is not None:
        assert found.fits == best and found.refused == (best or 0) + unit
    else:
        assert any("max_compiles" in n or "MAX_BATCH" in n for n in found.notes)
        assert found.fits is None or found.fits <= (best or 0)
    if found.refused is not None and best is not None and len(calls) > 4:
        assert any("not 4" in n for n in found.notes)


def test_a_refusal_that_names_no_bytes_halves_the_gap():
    def verdict(b):
        return Point(b, b <= 37, 1000 * b if b <= 37 else None)

    found = search_largest_batch(verdict, 1, 10**9)
    assert (found.fits, found.refused) == (37, 38)
    assert any("did not say" in n for n in found.notes)


def test_a_refusal_a_hair_under_the_line_is_said():
    """At the edge the compiler refuses programs a few KiB under its capacity
    (a wide Dense model on one v5e chip: batch 19297 refused, 19296 taken)."""
    def verdict(b):
        need = 2**30 + b * 2**20
        return Point(b, need <= CAPACITY - 3 * 2**20, need, 2**30)

    found = search_largest_batch(verdict, 1, CAPACITY)
    assert (found.fits, found.refused) == (15357, 15358)
    assert any("at the edge its check is not a sum of bytes" in n for n in found.notes)
