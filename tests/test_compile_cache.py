"""The compile cache: a second analysis of the same program reads the
compiler's figures from disk, and its Report equals the first in every frame;
a damaged, foreign or unwritable cache is never a crash and never a wrong
figure."""

import json
import os
import re
import subprocess
import sys
import textwrap
import warnings

import needs
import pytest

import shardviz
from shardviz import Plan
from shardviz.trace import compile_cache

shardviz.simulate_devices(8)
import keras  # noqa: E402

FRAMES = ("variables", "outputs", "activations", "collectives", "memory", "problems",
          "optimizer_variables", "estimate")


@pytest.fixture
def cache(tmp_path):
    """A cache of its own for one test."""
    compile_cache.configure(directory=tmp_path / "cache", enabled=True)
    yield tmp_path / "cache"
    compile_cache.configure(reset=True)


def mlp(width=64, hidden=256):
    inputs = keras.Input((width,))
    x = keras.layers.Dense(hidden, name="up")(inputs)
    outputs = keras.layers.Dense(width, name="down")(x)
    return keras.Model(inputs, outputs, name="mlp")


MEGATRON = Plan({"batch": 2, "model": 4},
                {"up/kernel": (None, "model"), "down/kernel": ("model", None)})


def records(report, name):
    frame = getattr(report, name)
    return [{k: str(v) for k, v in row.items()} for row in frame.to_dict("records")]


def assert_same_report(first, second):
    for name in FRAMES:
        assert records(first, name) == records(second, name), name
    assert first.totals == second.totals
    assert program(first.hlo_text) == program(second.hlo_text)
    assert text(first) == text(second).replace(compile_cache_words(), "")


def program(hlo_text):
    """The compiled program without the lines of its callers: the frame
    tables and source metadata name the line that asked for the analysis,
    which is no part of the program (the cache keeps the first asker's)."""
    body = hlo_text.split("\nFileNames")[0]
    return re.sub(r' source_file="[^"]*" source_line=\d+( source_end_line=\d+)?'
                  r'( source_column=\d+)?( source_end_column=\d+)?', "", body)


def text(report):
    from shardviz.render.text import report_text

    return report_text(report, width=1000)


def compile_cache_words():
    from shardviz.render.text import cache_text

    class Cached:
        from_cache = True

    return cache_text(Cached())


def entries(directory):
    return sorted((directory / "compiles").glob("*.entry"))


def twice(*args, **kwargs):
    first = shardviz.analyze(*args, **kwargs)
    second = shardviz.analyze(*args, **kwargs)
    return first, second


def test_a_second_forward_pass_reads_the_cache_and_reports_the_same(cache):
    first, second = twice(mlp, MEGATRON, inputs=(8, 64))
    assert not first.from_cache and second.from_cache
    assert "forward_compile" in first.timings and "forward_compile" not in second.timings
    assert len(second.collectives) and len(second.activations) == 2
    assert_same_report(first, second)
    assert "compile cache" in str(second) and "compile cache" not in str(first)
    assert second.summary()["from_cache"] is True
    assert len(entries(cache)) == 1


def test_layouts_over_part_of_an_axis_and_a_train_step_are_replayed_exactly(cache):
    """2 key heads on a 4-wide axis: XLA splits them over part of the axis, a
    layout no PartitionSpec names; it comes back from the cache as the same
    sharding, in a forward pass and in Keras's train step."""
    from test_truth_real_models import GQA_PLAN as plan
    from test_truth_real_models import gqa

    first, second = twice(gqa, plan, inputs=(8, 16, 64))
    assert second.from_cache and not first.from_cache
    assert first.activation("key/output").partial
    assert second.activation("key/output").actual_spec == ("batch", None, "model:(1)2", None)
    assert second.indices("key/output") == first.indices("key/output")
    assert_same_report(first, second)
    first, second = twice(gqa, plan, inputs=(8, 16, 64), labels=(8, 4, 16, 16),
                          train_step=True)
    assert second.from_cache and not first.from_cache and len(first.optimizer_variables)
    assert_same_report(first, second)


@needs.tpu
def test_a_tpu_train_step_and_a_refusal_come_back_from_the_cache(cache):
    def wide():
        inputs = keras.Input((2**14,))
        x = keras.layers.Dense(1024, name="up")(inputs)
        model = keras.Model(inputs, keras.layers.Dense(2**14, name="down")(x), name="wide")
        model.compile(optimizer="adam", loss="mse")
        return model

    one = Plan({"batch": 1})
    fits = twice(wide, one, inputs=(64, 2**14), labels=(64, 2**14), train_step=True,
                 target="v5e:1x1")
    assert fits[0].totals.fits and fits[1].from_cache
    assert_same_report(*fits)
    refused = twice(wide, one, inputs=(2**18, 2**14), labels=(2**18, 2**14), train_step=True,
                    target="v5e:1x1")
    assert refused[0].totals.fits is False and refused[1].totals.fits is False
    assert refused[1].from_cache and not refused[0].from_cache
    assert refused[0].trace_error.needed == refused[1].trace_error.needed > 0
    assert refused[0].totals == refused[1].totals
    assert "compile cache" in str(refused[1])


def test_the_cache_is_off_with_one_setting(cache):
    compile_cache.configure(enabled=False)
    first, second = twice(mlp, MEGATRON, inputs=(8, 64))
    assert not first.from_cache and not second.from_cache
    assert not (cache / "compiles").exists()


def test_the_environment_turns_it_off_and_moves_it(tmp_path, monkeypatch):
    compile_cache.configure(reset=True)
    monkeypatch.setenv("SHARDVIZ_CACHE", "off")
    assert compile_cache.store() is None
    monkeypatch.setenv("SHARDVIZ_CACHE", "on")
    monkeypatch.setenv("SHARDVIZ_CACHE_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("SHARDVIZ_CACHE_MAX", "3MB")
    s = compile_cache.settings()
    assert s.directory == tmp_path / "elsewhere" and s.max_bytes == 3_000_000
    monkeypatch.delenv("SHARDVIZ_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compile_cache.settings().directory == tmp_path / "xdg" / "shardviz"


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_a_damaged_entry_is_compiled_again_and_rewritten(cache, damage):
    first = shardviz.analyze(mlp, MEGATRON, inputs=(8, 64))
    (path,) = entries(cache)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        path.write_bytes(data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:])
    elif damage == "garbage":
        path.write_bytes(os.urandom(500))
    else:
        path.write_bytes(b"")
    again = shardviz.analyze(mlp, MEGATRON, inputs=(8, 64))
    assert not again.from_cache
    assert_same_report(first, again)
    assert path.read_bytes() == data or compile_cache._decode(path.read_bytes(), path.stem)
    third = shardviz.analyze(mlp, MEGATRON, inputs=(8, 64))
    assert third.from_cache


def test_a_whole_entry_that_does_not_decode_is_compiled_again(cache):
    """A checksum that agrees, over layouts that do not decode (written by a
    shardviz with another idea of them): a miss, and the same report."""
    first = shardviz.analyze(mlp, MEGATRON, inputs=(8, 64))
    (path,) = entries(cache)
    entry = compile_cache._decode(path.read_bytes(), path.stem)
    entry["delivered"] = [[0, ["named", [["no such axis"]]], "not base64"]]
    entry["outputs"] = [["hlo", "AAAA", [999]]]
    path.write_bytes(compile_cache._encode(entry, path.stem))
    again = shardviz.analyze(mlp, MEGATRON, inputs=(8, 64))
    assert not again.from_cache
    assert_same_report(first, again)
    assert shardviz.analyze(mlp, MEGATRON, inputs=(8, 64)).from_cache


def test_an_entry_of_another_format_or_key_is_never_read(cache):
    shardviz.analyze(mlp, MEGATRON, inputs=(8, 64))
    (path,) = entries(cache)
    magic, header, body = path.read_bytes().split(b"\n", 2)
    other = json.loads(header)
    other["format"] = compile_cache.FORMAT + 1
    path.write_bytes(b"\n".join([magic, json.dumps(other).encode(), body]))
    assert compile_cache._decode(path.read_bytes(), path.stem) is None
    assert compile_cache._decode(b"\n".join([magic, header, body]), "0" * 64) is None
    assert not shardviz.analyze(mlp, MEGATRON, inputs=(8, 64)).from_cache


def test_another_compiler_version_is_another_key(cache, monkeypatch):
    shardviz.analyze(mlp, MEGATRON, inputs=(8, 64))
    mine = compile_cache.versions()
    monkeypatch.setattr(compile_cache, "versions", lambda: {**mine, "libtpu": "0.0.1"})
    assert not shardviz.analyze(mlp, MEGATRON, inputs=(8, 64)).from_cache
    assert len(entries(cache)) == 2


def test_a_folder_that_cannot_be_written_is_said_once_and_the_analysis_goes_on(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    compile_cache.configure(reset=True)
    compile_cache.configure(directory=blocked)
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            first, second = twice(mlp, MEGATRON, inputs=(8, 64))
        cache_warnings = [w for w in said if issubclass(w.category, compile_cache.CacheWarning)]
        assert len(cache_warnings) == 1 and str(blocked) in str(cache_warnings[0].message)
        assert not first.from_cache and not second.from_cache
        assert_same_report(first, second)
    finally:
        compile_cache.configure(reset=True)


def test_a_network_file_system_turns_the_cache_off_once(tmp_path, monkeypatch):
    compile_cache.configure(reset=True)
    compile_cache.configure(directory=tmp_path / "nfs")
    monkeypatch.setattr(compile_cache, "_file_system", lambda path: "nfs4")
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            assert compile_cache.store() is None and compile_cache.store() is None
        assert [str(w.message) for w in said if "network file system" in str(w.message)]
        assert len(said) == 1
    finally:
        compile_cache.configure(reset=True)


def test_the_least_recently_used_entries_go_first(tmp_path):
    store = compile_cache.Store(tmp_path, max_bytes=10**9)
    blob = {"payload": os.urandom(3000).hex()}
    for key in ("a", "b", "c"):
        store.put(key * 64, blob)
    size = entries(tmp_path)[0].stat().st_size
    for i, key in enumerate(("a", "b", "c")):
        os.utime(store.path(key * 64), (1000 + i, 1000 + i))
    assert store.get("a" * 64) == blob  # read: now the most recent
    store.max_bytes = 3 * size
    store.put("d" * 64, blob)
    left = {p.stem[0] for p in entries(tmp_path)}
    assert left == {"a", "c", "d"}


WRITER = textwrap.dedent("""
    import os, sys
    from shardviz.trace.compile_cache import Store
    store = Store(__import__("pathlib").Path(sys.argv[1]), 10**9)
    mine = {"writer": sys.argv[2], "payload": sys.argv[2] * 200_000}
    for _ in range(40):
        store.put("k" * 64, mine)
        got = store.get("k" * 64)
        assert got is None or got["payload"] == got["writer"] * 200_000, "a torn entry"
""")


def test_two_processes_writing_one_entry_both_read_a_whole_entry(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), w],
                              stderr=subprocess.PIPE) for w in "xy"]
    try:
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err.decode()[-2000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    entry = compile_cache.Store(tmp_path, 10**9).get("k" * 64)
    assert entry["writer"] in "xy" and entry["payload"] == entry["writer"] * 200_000
    assert not list((tmp_path / "compiles").glob(".*.tmp"))


ANALYSE = textwrap.dedent("""
    import os, sys
    import shardviz
    shardviz.simulate_devices(8)
    import keras
    def mlp():
        inputs = keras.Input((64,))
        x = keras.layers.Dense(256, name="up")(inputs)
        return keras.Model(inputs, keras.layers.Dense(64, name="down")(x), name="mlp")
    plan = shardviz.Plan({"batch": 2, "model": 4},
                         {"up/kernel": (None, "model"), "down/kernel": ("model", None)})
    r = shardviz.analyze(mlp, plan, inputs=(8, 64))
    print(r.from_cache, len(r.collectives), r.totals.bytes_per_device)
""")


def test_a_new_process_reads_what_another_compiled(tmp_path):
    env = {**os.environ, "SHARDVIZ_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", ANALYSE], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    first, second = (r.stdout.split() for r in runs)
    assert first[0] == "False" and second[0] == "True" and first[1:] == second[1:]
