"""Matching agrees with keras.distribution.LayoutMap on every lookup."""

import re

import keras
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardviz.matching.match import RuleMatcher, match_path, near_misses, rule_usage, suggest_key

kd = keras.distribution
MESH = kd.DeviceMesh((8,), ("model",), [f"cpu:{i}" for i in range(8)])

SEGMENTS = ["d1", "d2", "dense", "dense_1", "block_0", "block_1", "seq", "my_model",
            "kernel", "bias", "output", "attn", "query"]
paths = st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=4).map("/".join)
PIECES = SEGMENTS + [".*", ".+", "/", "d\\d", "(kernel|bias)", "[a-z_]+", "block_\\d+", "\\w+", ".",
                     "("]  # "(" alone makes an invalid regex
keys = st.lists(st.sampled_from(PIECES), min_size=1, max_size=5).map("".join)


def keras_lookup(rule_keys, path):
    """What Keras's LayoutMap returns: the winning key, 'conflict', or None."""
    layout_map = kd.LayoutMap(MESH)
    layouts = {}
    for key in rule_keys:
        layouts[key] = layout_map[key] = kd.TensorLayout(("model",))
    try:
        found = layout_map[path]
    except re.error:
        return "error"
    except ValueError as e:
        assert "matches multiple layout specification keys" in str(e)
        return "conflict"
    if found is None:
        return None
    return next(k for k, v in layouts.items() if v is found)


def ours(rule_keys, path):
    m = match_path(rule_keys, path)
    if m.how in ("conflict", "error"):
        return m.how
    return None if m.rule is None else rule_keys[m.rule]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rule_keys=st.lists(keys, min_size=0, max_size=6, unique=True),
       path_list=st.lists(paths, min_size=1, max_size=6))
def test_matching_agrees_with_keras_layout_map(rule_keys, path_list):
    matcher = RuleMatcher(path_list)
    matches = matcher.match(rule_keys)
    for path, m in zip(path_list, matches):
        expected = keras_lookup(rule_keys, path)
        got = m.how if m.how in ("conflict", "error") else (
            None if m.rule is None else rule_keys[m.rule])
        assert got == expected, (rule_keys, path, m)
        assert got == ours(rule_keys, path)


@settings(max_examples=200, deadline=None)
@given(rule_keys=st.lists(keys, min_size=1, max_size=5, unique=True), path=paths)
def test_exact_key_wins_even_when_regexes_also_match(rule_keys, path):
    rule_keys = rule_keys + [path] if path not in rule_keys else rule_keys
    assert keras_lookup(rule_keys, path) == path
    m = match_path(rule_keys, path)
    assert m.how == "exact" and rule_keys[m.rule] == path


def test_fullmatch_not_search():
    assert match_path(["d1/kernel"], "sequential/d1/kernel").how == "none"
    assert keras_lookup(["d1/kernel"], "sequential/d1/kernel") is None


def test_invalid_regex_is_an_error_for_every_non_exact_lookup():
    m = match_path(["ok", "("], "other")
    assert m.how == "error" and "'('" in m.error
    layout_map = kd.LayoutMap(MESH)
    layout_map["ok"] = ("model",)
    layout_map["("] = ("model",)  # Keras accepts the key...
    with pytest.raises(re.error):
        layout_map["other"]  # ...and fails at lookup
    assert layout_map["ok"] is not None
    assert match_path(["ok", "("], "ok").how == "exact"


def test_candidates_and_also():
    m = match_path(["d1/kernel", ".*kernel", "d1/.*"], "d1/kernel")
    assert (m.how, m.rule, m.candidates, m.also) == ("exact", 0, (0, 1, 2), (1, 2))
    c = match_path([".*kernel", "d1/.*"], "d1/kernel")
    assert (c.how, c.rule, c.candidates) == ("conflict", None, (0, 1))


def test_cache_is_per_key():
    matcher = RuleMatcher(["a/kernel", "b/kernel"])
    matcher.match([".*kernel", "a/.*"])
    hits = matcher._hits[".*kernel"]
    matcher.match([".*kernel", "b/.*"])
    assert matcher._hits[".*kernel"] is hits and "b/.*" in matcher._hits


def test_rule_usage_statuses():
    keys = ["a/kernel", ".*a.*", "nothing", "(", ".*kernel", "b/.*"]
    ms = RuleMatcher(["a/kernel", "b/kernel"]).match(keys)
    # '(' is invalid, so every non-exact lookup errors in Keras
    assert [m.how for m in ms] == ["exact", "error"]
    statuses = [u["status"] for u in rule_usage(keys, ms)]
    assert statuses[3] == "invalid" and statuses[2] == "unused"
    keys = ["a/kernel", ".*a.*", "nothing", ".*kernel", "b/.*"]
    ms = RuleMatcher(["a/kernel", "b/kernel"]).match(keys)
    assert [u["status"] for u in rule_usage(keys, ms)] == [
        "used", "shadowed", "unused", "conflicted", "conflicted"]


def test_near_misses_and_suggestions():
    paths = ["sequential/d1/kernel", "sequential/d1/bias", "sequential/d2/kernel"]
    assert near_misses("d1/kernel", paths) == ["sequential/d1/kernel"]
    assert suggest_key("d1/kernel", paths) == ".*d1/kernel"
    assert near_misses("sequentail/d1/kernel", paths)[0] == "sequential/d1/kernel"
    assert suggest_key("zzz", paths) is None
