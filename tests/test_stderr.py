"""While shardviz holds fd 2 to read XLA's and libtpu's lines, what every
other thread writes there goes on to stderr: every line, in order (but for
a line or two written at the very instant the hold ends, which one written
right after it may pass: the writer and the pump race there)."""

from __future__ import annotations

import contextlib
import os
import threading
import time

import keras

import shardviz
from shardviz import Plan


def _reshaper():
    inp = keras.Input((8,))
    h = keras.layers.Dense(16, name="dense")(inp)
    return keras.Model(inp, keras.layers.Reshape((4, 4), name="reshape")(h), name="reshaper")


RESHARDING = Plan({"batch": 2, "model": 4}, {"dense/kernel": (None, "model"),
                                            "dense/output": ("batch", None),
                                            "reshape/output": (None, None, "model")})


def _writer(stop: threading.Event, lines: list[str]) -> None:
    i = 0
    while not stop.is_set() or i < 50:
        line = f"other thread line {i}\n"
        os.write(2, line.encode())
        lines.append(line)
        i += 1
        time.sleep(0.002)


@contextlib.contextmanager
def another_thread_writing(capfd):
    """A thread writes numbered lines to fd 2 for the length of the block;
    afterwards every one of them must have reached stderr once, in order but
    for neighbours at the instant a hold ends (at most 3 places apart). Yields
    nothing; the block's stderr is left in ``capfd`` for further checks."""
    capfd.readouterr()
    stop, written = threading.Event(), []
    writer = threading.Thread(target=_writer, args=(stop, written))
    writer.start()
    try:
        yield
    finally:
        stop.set()
        writer.join()
    err = capfd.readouterr().err
    got = [line + "\n" for line in err.splitlines() if line.startswith("other thread line")]
    assert sorted(got) == sorted(written), (len(got), len(written))  # none lost or repeated
    place = {line: i for i, line in enumerate(got)}
    moved = max(abs(place[line] - i) for i, line in enumerate(written))
    assert moved <= 3, f"a line arrived {moved} places from where it was written"
    assert "Involuntary" not in err


def test_other_threads_lines_pass_through_a_compile_in_order(capfd):
    with another_thread_writing(capfd):
        for _ in range(3):
            report = shardviz.analyze(_reshaper, RESHARDING, inputs=(8, 8))
            assert report.problems_of("xla-resharding")  # XLA's line was taken



def _huge():
    x = keras.Input((32768,))
    return keras.Model(x, keras.layers.Dense(65536, name="huge")(x))


def test_other_threads_lines_pass_through_a_compile_that_fails(capfd):
    """The compiler refuses the program for memory: what was written while
    it ran still goes on."""
    with another_thread_writing(capfd):
        report = shardviz.analyze(_huge, Plan({"batch": 1}, {}), inputs=(8, 32768),
                                  target="v5e:1x1", train_step=True)
        assert report.fits is False


def test_lines_written_while_a_tpu_topology_is_described_are_kept(capfd):
    from shardviz.target.tpu import tpu_topology_devices

    tpu_topology_devices.cache_clear()
    with another_thread_writing(capfd):
        for topology in ("2x2", "2x4", "4x4"):
            tpu_topology_devices("v5e", topology)


START_UP = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    "I0000 00:00:1796608992.758910   15795 port.cc:153] oneDNN custom operations are on. You "
    "may see slightly different numerical results due to floating-point round-off errors.\n"
    "I0000 00:00:1796608992.759136   15795 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.\n")


def test_a_builders_import_keeps_library_start_up_lines_off_stderr(tmp_path, capfd,
                                                                   monkeypatch):
    """keras-hub imports TensorFlow, whose C++ start-up writes these lines
    (before any log setting is read) ahead of the command's own; the user's
    lines pass, and SHARDVIZ_VERBOSE=1 passes them all."""
    from shardviz.model.builders import load_builder

    source = (f"import os\nos.write(2, {START_UP.encode()!r})\n"
              "os.write(2, b'my own line\\n')\ndef build():\n    return None\n")
    for name in ("noisy.py", "verbose.py"):  # a file is run once while it is unchanged
        (tmp_path / name).write_text(source)
    load_builder(f"{tmp_path / 'noisy.py'}:build")
    err = capfd.readouterr().err
    assert err == "my own line\n"
    load_builder(f"{tmp_path / 'noisy.py'}:build")  # the same module, not run again
    assert capfd.readouterr().err == ""
    monkeypatch.setenv("SHARDVIZ_VERBOSE", "1")
    load_builder(f"{tmp_path / 'verbose.py'}:build")
    assert capfd.readouterr().err == START_UP + "my own line\n"


def test_a_redirect_nests_in_another_of_the_same_thread(capfd):
    from shardviz.devices import filtering_stderr

    with filtering_stderr(lambda line: line.startswith("a")) as outer:
        with filtering_stderr(lambda line: line.startswith("b")) as inner:
            os.write(2, b"a1\nb1\nc1\n")
        os.write(2, b"a2\nc2\n")
    assert (outer, inner) == (["a1", "a2"], ["b1"])
    assert capfd.readouterr().err == "c1\nc2\n"
