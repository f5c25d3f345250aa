"""A rule key that backtracks catastrophically is refused in bounded time.

Keras looks a path up with ``re.fullmatch(key, path)``; on a key such as
``(a+)+$`` and a path of 40 ``a``s that call runs for hours, in shardviz and
in Keras alike. shardviz matches such keys under a time budget and reports
them as invalid, before a LayoutMap reaches Keras. Every call that could hang
here runs in a child process or under a deadline, so that a regression fails
instead of hanging the suite.
"""

import json
import re
import subprocess
import sys
import textwrap

import pytest
from deadlines import deadline

from shardviz import Plan
from shardviz.matching.match import RuleMatcher, may_backtrack, regex_error, rule_usage

LONG = "a" * 40
PATHS = [LONG, LONG + "/kernel", "dense/kernel", "decoder_block_10/attention/query/kernel"]
HANGING = ["(a+)+$", "(a|aa)+$", "(.*)*x", r"(\w+)*kernel"]
NORMAL = [".*dense.*/kernel", r"decoder_block_\d+/attention/(query|key|value)/kernel",
          r"(\w+/)*kernel", "(query|key|value)+", r"\(a+\)+", "[(]a+[)]+", ".*kernel"]


def in_child(code: str, timeout: float = 60) -> dict:
    """Run ``code`` (which prints one JSON line) in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("key", HANGING)
def test_a_backtracking_key_is_refused_in_bounded_time_naming_the_path(key):
    answer = in_child(f"""
        import json, time
        from shardviz.matching.match import RuleMatcher, regex_error, rule_usage
        paths, key = {PATHS!r}, {key!r}
        start = time.perf_counter()
        matches = RuleMatcher(paths).match([key, ".*kernel"])
        print(json.dumps({{"seconds": time.perf_counter() - start,
                          "how": [m.how for m in matches],
                          "errors": [m.error for m in matches],
                          "regex_error": regex_error(key),
                          "status": [u["status"] for u in rule_usage([key, ".*kernel"], matches)]}}))
    """)
    assert answer["seconds"] < 30
    assert set(answer["how"]) == {"error"}  # as for an invalid regex: Keras cannot use the map
    reason = answer["regex_error"]
    assert "backtracks catastrophically" in reason and "Keras" in reason and "hang" in reason
    assert re.search(r"against the path 'a{40}", reason)  # the path it hung on
    assert "repeat once instead" in reason  # how to rewrite it
    assert answer["errors"][0] == f"rule 0 {key!r}: {reason}"
    assert answer["status"] == ["invalid", "blocked"]


@pytest.mark.parametrize("key", NORMAL)
def test_normal_keys_are_never_called_backtracking_and_match_as_keras_does(key):
    with deadline(30):
        hits = RuleMatcher(PATHS).hits(key)
    assert hits == frozenset(i for i, p in enumerate(PATHS) if re.fullmatch(key, p))
    assert regex_error(key) is None


def test_keys_that_read_safely_are_matched_in_this_process(monkeypatch):
    def no_child(*args, **kwargs):
        raise AssertionError("a normal key started a child process")

    monkeypatch.setattr(subprocess, "run", no_child)
    paths = [f"decoder_block_{i}/attention/{part}/kernel" for i in range(200)
             for part in ("query", "key", "value")] + [f"dense_{i}/kernel" for i in range(100)]
    keys = NORMAL[:2] + [".*", r"dense_\d+/kernel", ".*block.*attention.*/kernel", "(", "x"]
    for key in keys[:5]:
        assert not may_backtrack(key, max(map(len, paths))), key
    matches = RuleMatcher(paths).match(keys)
    assert {m.how for m in matches} == {"error"}  # "(" is invalid: Keras raises on every path
    matches = RuleMatcher(paths).match(keys[:2] + [".*dense.*/kernel"])
    assert [m.how for m in matches].count("regex") == 700


def test_the_reading_of_a_key_skips_escapes_and_classes():
    assert may_backtrack("(a+)+", 10) and may_backtrack("(?:ab|a)*c", 10)
    assert may_backtrack("x(b_[0-9]+){2,}", 10) and may_backtrack("(?x) ( a + ) +", 10)
    assert not may_backtrack(r"\(a+\)+", 10) and not may_backtrack("[(]a+[)]+", 10)
    assert not may_backtrack("(kernel|bias)?", 10) and not may_backtrack("(ab){1}", 10)
    # Many unbounded repeats are costly only on long paths.
    assert not may_backtrack(".*a.*b.*c.*d", 60) and may_backtrack(".*a.*b.*c.*d", 400)


def test_an_overflowing_repeat_count_is_an_invalid_regex_not_a_crash():
    key = "a{99999999999}"
    with pytest.raises(OverflowError):  # what Keras's re.fullmatch raises
        re.fullmatch(key, "a")
    assert regex_error(key).startswith("the repetition number is too large: use a smaller count")
    matches = RuleMatcher(["a", "b/kernel"]).match([key, ".*kernel"])
    assert [m.how for m in matches] == ["error", "error"]
    assert rule_usage([key, ".*kernel"], matches)[0]["status"] == "invalid"
    problems = Plan({"model": 2}, {key: ("model",)}).check()
    assert [p.kind for p in problems] == ["invalid-regex"]
    assert "repetition number is too large" in problems[0].message
    assert "nested too deeply" in regex_error("(" * 5000 + ")" * 5000)


def test_analyze_reports_a_backtracking_key_and_never_hands_it_to_keras():
    import keras

    import shardviz

    def build():
        x = keras.Input((4,))
        return keras.Model(x, keras.layers.Dense(8, name=LONG)(x), name="m")

    plan = Plan({"batch": 1}, {"(a|aa)+$": (None,), ".*kernel": (None, "batch")})
    with deadline(120):
        report = shardviz.analyze(build, plan, inputs=(8, 4))
    problem = report.problems_of("invalid-regex")[0]
    assert problem.rule == "(a|aa)+$" and "backtracks catastrophically" in problem.message
    assert problem.severity == "error"
    assert report.trace is None and "was not run" in report.trace_error.message
    assert set(report.variables["status"]) == {"error"}
    assert report.rules.set_index("key").loc["(a|aa)+$", "status"] == "invalid"
