"""What fills a device at the compiled program's peak: ``report.peak`` and
``report.timeline`` read the compiler's own buffer assignment (the dump XLA
writes for the compile), never an estimate. The arguments' rows must be the
variables' and slots' own shards, the rows must add up to the compiler's
stated peak, a refused program has one too, and a planted model whose
full-vocabulary logits dominate names them first."""

import os
import tempfile

import keras
import needs
import numpy as np
import pytest

import shardviz
from shardviz import Plan, examples
from shardviz.report.peak_frames import OTHER_ABOVE, peak_source
from shardviz.trace import buffer_dump

TOKENS = np.zeros((8, 16), "int32")


def _llama_train_step(**kw):
    return shardviz.analyze(lambda: examples.llama(), examples.llama_plan(), inputs=TOKENS,
                            train_step=True, **kw)


def _arguments_are_their_variables(report):
    """Each row of an argument (not a copy of one) is that variable's or
    slot's shard: its bytes equal the report's own bytes per device."""
    variables = dict(zip(report.variables.path, report.variables.bytes_per_device))
    slots = dict(zip(report.optimizer_variables.path,
                     report.optimizer_variables.bytes_per_device))
    checked = 0
    for row in report.peak[report.peak.buffer.str.startswith("param")].itertuples():
        if row.op.startswith(("state[0]", "tv[")):
            assert row.role == "weight" and row.bytes == variables[row.layer], row
            checked += 1
        elif row.op.startswith("state[2]"):
            assert row.role == "optimizer state" and row.bytes == slots[row.layer], row
            checked += 1
    return checked


@needs.tpu
def test_the_train_steps_peak_on_a_tpu_is_the_compilers_buffer_assignment():
    report = _llama_train_step(target="v5e:2x4")
    source = peak_source(report)
    assert source is not None and source.available
    peak = report.peak
    assert int(peak.bytes.sum()) == source.buffer_peak.total  # the compiler's stated peak
    assert peak.bytes.is_monotonic_decreasing
    assert {"weight", "optimizer state", "gradient", "label"} <= set(peak.role)
    assert _arguments_are_their_variables(report) >= 10
    assert (peak.layer[peak.role == "gradient"] != "").all()  # each gradient names its layer
    assert "the compiler's own peak (memory_analysis)" in report.peak_note
    timeline = report.timeline
    assert set(timeline.role) <= set(peak.role) | {"activation", "logits and loss", "workspace"}
    assert timeline.position.max() < source.buffer_peak.length


def test_a_forward_pass_on_the_simulated_devices_has_its_peak_too():
    report = shardviz.analyze(lambda: examples.llama(), examples.llama_plan(), inputs=TOKENS)
    source = peak_source(report)
    assert source is not None and source.available, report.peak_note
    assert int(report.peak.bytes.sum()) == source.buffer_peak.total
    assert {"weight", "input"} <= set(report.peak.role)
    assert "gradient" not in set(report.peak.role)
    assert _arguments_are_their_variables(report) >= 5


def test_full_vocabulary_logits_that_dominate_are_named_first():
    def build():
        tokens = keras.Input((64,), dtype="int32")
        x = keras.layers.Embedding(1000, 32, name="embed")(tokens)
        model = keras.Model(tokens, keras.layers.Dense(50_000, name="lm_head")(x))
        model.compile(optimizer="adam",
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    import jax

    ids = jax.ShapeDtypeStruct((8, 64), "int32")
    report = shardviz.analyze(build, Plan({"batch": 8}, {}), inputs=ids, labels=ids,
                              train_step=True)
    assert report.trace_error is None, report.trace_error
    top = report.peak.iloc[0]
    assert top.role == "logits and loss" and top.bytes == 64 * 50_000 * 4, top.to_dict()
    logits = report.peak[report.peak.role == "logits and loss"]
    assert {"lm_head", "compile_loss/sparse_categorical_crossentropy"} & set(logits.layer)
    by_role = report.peak.groupby("role").bytes.sum().sort_values(ascending=False)
    assert by_role.index[0] == "logits and loss"
    # The lever no setting can pull is said, not compiled: a loss that never holds them all.
    advice = shardviz.levers(report, build, top=0).set_index("lever")
    assert advice.loc["chunked loss", "note"].startswith("not compiled: the logits")
    assert advice.loc["chunked loss"].isna()[["bytes", "saved"]].all()


@needs.tpu
def test_a_program_the_compiler_refuses_has_its_peak_too():
    from test_targets import _huge

    report = shardviz.analyze(_huge(), Plan({"batch": 1}, {}), inputs=(8, 32768),
                              target="v5e:1x1", train_step=True)
    assert report.fits is False
    assert len(report.peak) and report.peak.bytes.sum() > 8 * 2**30, report.peak_note
    assert "optimizer state" in set(report.peak.role)


def test_without_a_dump_the_peak_says_why_and_every_other_figure_stays(monkeypatch):
    monkeypatch.setenv("SHARDVIZ_CACHE", "off")  # compiled here, not read from the cache
    monkeypatch.setattr(buffer_dump, "dump_options", lambda directory: {})
    report = shardviz.analyze(lambda: examples.llama(), examples.llama_plan(), inputs=TOKENS)
    assert report.peak.empty and list(report.peak.columns)[:2] == ["bytes", "role"]
    assert report.peak_note == ("No buffer assignment: the compiler wrote no live-range "
                                "file.")
    assert report.memory.iloc[0]["temp_bytes"] > 0 and report.trace_error is None


def test_a_dump_in_another_format_is_unavailable_never_an_error(tmp_path):
    assert buffer_dump.read_or_why(str(tmp_path)) == "the compiler wrote no live-range file"
    (tmp_path / "m.after_optimizations-live-range.txt").write_text("HloLiveRange (max 3):\n")
    (tmp_path / "m.after_optimizations-buffer-assignment.txt").write_text("")
    assert "another format" in buffer_dump.read_or_why(str(tmp_path))


def test_a_loops_carried_values_are_read_as_any_other(tmp_path):
    """A program with a loop (a windowed matmul, a scan) has values the
    buffer assignment marks ``(phi)``; each is live at the peak as itself."""
    path = tmp_path / "m.after_optimizations-buffer-assignment.txt"
    path.write_text(
        "BufferAssignment:\n"
        "allocation 0: size 59146240, maybe-live-out:\n"
        " value: <2968 while.10{2} (phi) @0> (size=59146240,offset=0): "
        "bf16[1805,256,64]{1,2,0:T(8,128)(2,1)}\n"
        " value: <2132 param.9 @0> (size=4096000,offset=0): bf16[4000,512]{1,0:T(8,128)(2,1)}\n")
    values = buffer_dump._read_values(str(path))
    assert set(values) == {"while.10{2}", "param.9{}"}, values
    assert values["while.10{2}"][2] == 59146240


def test_the_dumps_are_removed_and_a_full_disk_only_loses_the_peak(tmp_path, monkeypatch):
    monkeypatch.setenv("SHARDVIZ_CACHE", "off")  # compiled here, not read from the cache
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    report = shardviz.analyze(lambda: examples.llama(), examples.llama_plan(), inputs=TOKENS)
    assert len(report.peak) and not [n for n in os.listdir(tmp_path)
                                     if n.startswith("shardviz-dump-")]

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "mkdtemp", full)
    report = shardviz.analyze(lambda: examples.llama(d_model=128), examples.llama_plan(),
                              inputs=TOKENS)
    assert report.peak.empty and "no temporary directory" in report.peak_note
    assert report.trace_error is None and report.memory.iloc[0]["temp_bytes"] > 0


def test_a_hundred_thousand_buffers_keep_the_frame_small():
    from shardviz.trace.buffer_dump import BufferPeak
    from shardviz.trace.peak import Roles, peak_rows

    n = 100_000
    live = [(f"fusion.{i}{{}}", n - i) for i in range(n)]
    peak = BufferPeak(position=5, length=10, total=sum(b for _, b in live), live=live,
                      values={v: ("f32[4]{0}", None, b) for v, b in live},
                      ranges={v: (0, 9) for v, _ in live})
    rows = peak_rows(peak, Roles({}, {}, [], (None, [])))
    assert len(rows) == n and sum(r["bytes"] for r in rows) == peak.total

    class Fake:
        trace = None
        trace_error = None

    from shardviz.report import peak_frames
    from shardviz.trace.peak import PeakSource

    fake = Fake()
    fake.trace_error = type("E", (), {"peak_source": PeakSource(peak, {}, [], (None, []))})()
    frame = peak_frames.peak(fake)
    assert len(frame) == OTHER_ABOVE and int(frame.bytes.sum()) == peak.total
    assert frame.iloc[-1].role == "other"
    timeline = peak_frames.timeline_frame(fake)
    assert int(timeline.bytes.max()) == peak.total


@needs.tpu
def test_the_command_line_prints_the_peak_in_80_columns(capsys, monkeypatch):
    from shardviz.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    main(["report", "shardviz.examples:llama", "--mesh", "batch=2,model=4", "--rule",
          ".*_q/kernel=None,model,None", "--inputs", "8x16:int32", "--train-step",
          "--target", "v5e:2x4", "--peak"])
    out = capsys.readouterr().out
    shown = out[out.index("What is live at the peak"):]
    assert "By role:" in shown and "optimizer state" in shown and "adam/" in shown
    assert max(len(line) for line in shown.splitlines()) <= 80


def test_the_peak_is_drawn_and_is_among_the_reports_pictures():
    report = _llama_train_step()
    fig = report.show_peak()
    left, right = fig.axes[:2]
    assert len(left.collections) >= 3  # a band per role over the schedule
    assert [t.get_text() for t in right.get_yticklabels()]  # the largest layers, named
    assert "Memory over the program and at its peak" in dict(report.pictures())
    with pytest.raises(shardviz.ShardvizError, match="No picture of the peak"):
        shardviz.analyze(examples.mlp(), examples.megatron_plan()).show_peak()


def test_the_html_report_holds_the_peak():
    page = _llama_train_step()._repr_html_()
    assert "<summary>What is live at the peak</summary>" in page
    assert "<th>role</th>" in page and "optimizer state" in page


@needs.tpu
def test_the_peak_is_the_chips_own_buffer_for_buffer():
    """The chip's compile of the step ``model.fit`` ran
    (bench/records/chip/peak_record.py) and shardviz's compile here, with the
    same libtpu, hold the same buffers at the peak, to the byte: the same
    kinds of instruction (their numbers differ with what was traced before)
    with the same sizes, at the same position, adding up to the same total."""
    import importlib.metadata
    import pathlib
    import re
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "bench" / "records" / "chip"))
    import compare_peak

    chip, report = compare_peak.compared("dict_model_fit_b4")
    ours = peak_source(report).buffer_peak
    if chip["versions"]["libtpu"] != f"libtpu=={importlib.metadata.version('libtpu')}":
        assert ours.total == pytest.approx(chip["total"], rel=0.05)
        return
    assert ours.total == chip["total"] and ours.position == chip["position"]
    def kinds(live):
        return sorted((re.sub(r"\.\d+", "", name), size) for name, size in live)

    assert kinds(chip["live"]) == kinds(ours.live)
    assert report.fits is chip["ran"] is True
