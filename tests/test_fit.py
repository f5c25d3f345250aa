"""shardviz.fit: the largest batch a slice fits and the smallest slice that fits
a batch, for the train step model.fit runs, found with few compiles of the TPU
compiler. Each answer is checked where it matters: the batch returned fits
within the compiler's capacity, and the next one is refused."""


import needs
import pytest

import shardviz
from shardviz import Plan, ShardvizError, examples
from shardviz.planner.batch_search import MAX_BATCH
from shardviz.planner.fit_search import _plan_for

shardviz.simulate_devices(8)
import keras  # noqa: E402


def wide(width=2**16, hidden=1024):
    """A model whose activations grow fast with the batch."""
    inputs = keras.Input((width,))
    x = keras.layers.Dense(hidden, name="up")(inputs)
    outputs = keras.layers.Dense(width, name="down")(x)
    model = keras.Model(inputs, outputs, name="wide")
    model.compile(optimizer="adam", loss="mse")
    return model


tpu = needs.tpu


@pytest.fixture(scope="module")
def wide_on_one_chip():
    """The exact search for ``wide`` on one v5e chip, made once for the tests that read it."""
    return shardviz.fit(wide, target="v5e:1x1", inputs=(1, 2**16), labels=(1, 2**16))


@tpu
def test_the_largest_batch_fits_and_the_next_is_refused(wide_on_one_chip):
    answer = wide_on_one_chip
    (row,) = answer.answers.to_dict("records")
    batch = row["batch"]
    assert 1 < batch < MAX_BATCH and row["next"] == f"batch {batch + 1}"
    # The compiler decides at the edge: its check passes programs a few KiB over the
    # capacity its refusals state, so the verdicts are its compiles, not a sum of bytes.
    c = answer.compiles.set_index("batch")
    assert c.loc[batch, "fits"] and not c.loc[batch + 1, "fits"]
    assert row["bytes_per_device"] > 0.99 * row["capacity_bytes"]
    assert row["next_bytes_per_device"] >= row["capacity_bytes"]
    assert answer.compile_count == len(answer.compiles) <= 12
    # the two compiles either side, asked again
    at = shardviz.analyze(wide, Plan({"batch": 1}), inputs=(batch, 2**16),
                          labels=(batch, 2**16), train_step=True, target="v5e:1x1")
    over = shardviz.analyze(wide, Plan({"batch": 1}), inputs=(batch + 1, 2**16),
                            labels=(batch + 1, 2**16), train_step=True, target="v5e:1x1")
    assert at.totals.fits and not over.totals.fits
    assert answer.report is not None and answer.report.totals.fits
    assert f"batch {batch} on v5e:1x1" in str(answer)
    assert "<table" in answer._repr_html_()
    # Within 1%: fewer compiles, and the gap said plainly.
    rough = shardviz.fit(wide, target="v5e:1x1", inputs=(1, 2**16), labels=(1, 2**16),
                         precision=0.01)
    (near,) = rough.answers.to_dict("records")
    assert near["batch"] <= batch < int(near["next"].split()[1])
    assert rough.compile_count < answer.compile_count or near["batch"] == batch


@tpu
def test_remat_modes_are_compared_on_the_same_slice():
    build = examples.transformer_block
    answer = shardviz.fit(build, target="v5e:1x1", inputs=(1, 16, 64), remat=[None, "full"],
                          max_compiles=2)
    rows = answer.answers.set_index(answer.answers.remat.fillna("none"))
    assert list(rows.index) == ["none", "full"]
    assert set(answer.compiles.remat.fillna("none")) == {"none", "full"}


@tpu
def test_the_smallest_slice_is_the_first_sold_that_fits():
    big = lambda: wide(width=2**16, hidden=2**14)  # noqa: E731  8 GiB of float32 weights
    answer = shardviz.fit(big, target="v5e", batch=16, inputs=(1, 2**16), labels=(1, 2**16))
    (row,) = answer.answers.to_dict("records")
    assert row["target"] == "v5e:2x2" and row["batch"] == 16
    assert row["next"] == "v5e:1x1" and row["next_bytes_per_device"] > row["capacity_bytes"]
    assert row["bytes_per_device"] <= row["capacity_bytes"]
    c = answer.compiles
    assert c[c.target == "v5e:1x1"].fits.tolist() == [False]
    assert answer.compile_count <= 4


@pytest.mark.parametrize("kw, words", [
    (dict(target="v5e", batch=0), "batch=0 is not a positive"),
    (dict(target="v5e"), "for which batch"),
    (dict(target="h100"), "not sold in slices"),
    (dict(target="v5e:3x3"), "3x3"),
    (dict(target="v5e:1x1", seq=0), "seq=0 is not a positive"),
    (dict(target="v5e:1x1", remat=[]), "remat=[] asks for no remat mode"),
    (dict(target="v5e:1x1", precision=1.5), "precision=1.5 is not a fraction"),
    (dict(target="v5e:1x1", max_compiles=1), "max_compiles=1 leaves no room"),
    (dict(target="v5e:1x1", batch=32), "fit finds the largest batch itself"),
    (dict(target="v5e:1x1", seq=8), "seq=8 and inputs= are both given"),
    (dict(target="v5e:1x1", labels="y"), "labels= holds str"),
    (dict(target="v5e:1x1", remat=[("up", "nope")]), "'nope', which no layer of model"),
])
def test_bad_questions_say_what_to_change(kw, words):
    with pytest.raises(ShardvizError) as info:
        shardviz.fit(wide, inputs=(1, 2**16), **kw)
    assert words in str(info.value) and info.value.hint


@tpu
def test_a_batch_no_slice_sold_holds_ends_the_search_with_that_answer():
    # Even the largest slice refuses it: the search says so, and stops.
    answer = shardviz.fit(wide, target="v5e", batch=2**24, inputs=(1, 2**16),
                          labels=(1, 2**16), max_compiles=3)
    (row,) = answer.answers.to_dict("records")
    assert row["next"] == f"no v5e slice sold fits batch {2**24}"
    assert answer.compile_count <= 3 and "nothing fits" in str(answer)


@tpu
def test_one_lora_layer_may_be_named_alone():
    answer = shardviz.fit(examples.mlp, target="v5e:1x1", inputs=(1, 16), labels=(1, 16),
                          lora_rank=2, lora_layers="up", max_compiles=2)
    assert answer.tuning.lora_layers == ("up",)


def test_a_plan_grows_its_batch_axis_to_fill_a_slice():
    from shardviz.model.scan import scan

    plan = _plan_for(Plan({"batch": 2, "model": 2}), scan(examples.mlp), 8)
    assert plan.mesh_dict == {"batch": 4, "model": 2}
    with pytest.raises(ShardvizError, match="do not divide"):
        _plan_for(Plan({"batch": 1, "model": 3}), scan(examples.mlp), 8)


@tpu
def test_the_command_line_answers_for_each_remat_mode(tmp_path):
    import subprocess
    import sys

    page = tmp_path / "fit.html"
    out = subprocess.run(
        [sys.executable, "-m", "shardviz", "fit", "shardviz.examples:mlp", "--target",
         "v5litepod-1", "--inputs", "1x16", "--labels", "1x16", "--remat", "none", "--remat",
         "full", "-q", "--html", str(page)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "no remat: batch 1048576 on v5e:1x1" in out.stdout
    assert "full: batch 1048576 on v5e:1x1" in out.stdout
    # The HTML report: the answer's rows and compiles, then the train step's report.
    text = page.read_text()
    assert "<h2>The answer</h2>" in text and "<h2>The train step at the answer</h2>" in text
    assert text.count("1,048,576") >= 2 and "compiles</summary>" in text
    assert "data:image/png;base64," in text


def test_the_command_line_refuses_a_family_without_a_batch():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "shardviz", "fit", "shardviz.examples:mlp",
                          "--target", "v5e", "--inputs", "1x16"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "for which batch" in out.stderr
    # An --html path that cannot be written is refused before any compile.
    out = subprocess.run([sys.executable, "-m", "shardviz", "fit", "shardviz.examples:mlp",
                          "--target", "v5e:1x1", "--inputs", "1x16", "--html",
                          "/nonexistent-folder/answer.html"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "--html" in out.stderr and "compile" not in out.stderr


def test_a_slice_larger_than_the_batch_gets_a_model_axis_by_default():
    from shardviz.model.scan import scan

    plan = _plan_for(None, scan(examples.transformer_block), 32, batch=8)
    assert plan.mesh_dict == {"batch": 8, "model": 4}
    assert any("model" in r.axes for r in plan.rules)
    assert _plan_for(None, scan(examples.mlp), 8, batch=16).mesh_dict == {"batch": 8}


def test_after_a_refusal_the_search_jumps_to_the_chips_that_could_hold_it():
    from types import SimpleNamespace

    from shardviz.errors import OutOfMemory
    from shardviz.planner.fit_search import _next_slice

    def refused(needed, said=True):
        error = OutOfMemory("refused", needed=needed if said else None, available=None)
        return SimpleNamespace(totals=SimpleNamespace(bytes_per_device=needed, fits=False),
                               trace_error=error)

    slices = [(f"s{n}", None, n) for n in (1, 4, 8, 16, 32, 64)]
    gib = 2**30
    # 66 GiB on one chip: split evenly over 16 GiB chips, at least 4.1 chips: 8.
    assert _next_slice(slices, {0: refused(66 * gib)}, 0, 16 * gib) == 2
    assert _next_slice(slices, {0: refused(64 * gib)}, 0, 16 * gib) == 1  # exactly 4
    # 20 GiB on 8 chips needs at least 10 of 16 GiB: 16 chips.
    assert _next_slice(slices, {2: refused(20 * gib)}, 2, 16 * gib) == 3
    assert _next_slice(slices, {0: refused(2**40)}, 0, 16 * gib) == 5  # none: the largest
    # A refusal whose message gave no figure holds only the variables: the next slice.
    assert _next_slice(slices, {0: refused(66 * gib, said=False)}, 0, 16 * gib) == 1


def small_llama():
    """A keras-hub backbone: it takes a dict of token ids and a padding mask."""
    import keras_hub

    return keras_hub.models.LlamaBackbone(vocabulary_size=256, num_layers=2, num_query_heads=4,
                                          hidden_dim=64, intermediate_dim=128,
                                          num_key_value_heads=2, name="small_llama")


def test_analyze_takes_the_global_batch_and_sequence_length_of_a_token_model():
    pytest.importorskip("keras_hub")
    report = shardviz.analyze(small_llama, Plan({"batch": 8}), batch=16, seq=32,
                              train_step=True, labels=(16, 32, 64))
    assert report.trace_error is None
    # The model's own inputs: its dict, at the batch and the sequence length asked for.
    assert {k: (tuple(v.shape), str(v.dtype)) for k, v in report.arguments["inputs"].items()} \
        == {"token_ids": ((16, 32), "int32"), "padding_mask": ((16, 32), "int32")}
    assert report.activations["shape"].iloc[-1] == (16, 32, 64)
    with pytest.raises(ShardvizError, match="without the global batch"):
        shardviz.analyze(small_llama, Plan({"batch": 8}), seq=32)
    with pytest.raises(ShardvizError, match="leaves a dim of its inputs open"):
        shardviz.analyze(small_llama, Plan({"batch": 8}), batch=8)
    with pytest.raises(ShardvizError, match="not both"):
        shardviz.analyze(small_llama, Plan({"batch": 8}), (8, 32), batch=8, seq=32)


def test_the_report_command_takes_batch_seq_and_the_fine_tune(tmp_path):
    import subprocess
    import sys

    pytest.importorskip("keras_hub")
    (tmp_path / "hub_models.py").write_text(
        "import keras_hub\n\n"
        "def small():\n"
        "    return keras_hub.models.LlamaBackbone(vocabulary_size=256, num_layers=2,\n"
        "        num_query_heads=4, hidden_dim=64, intermediate_dim=128, num_key_value_heads=2)\n")
    out = subprocess.run(
        [sys.executable, "-m", "shardviz", "report", "hub_models:small", "--mesh", "batch=8",
         "--devices", "8", "--batch", "16", "--seq", "32", "--lora", "4", "--dtype",
         "bfloat16", "--json", str(tmp_path / "r.json")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode in (0, 1), out.stderr
    import json

    summary = json.loads((tmp_path / "r.json").read_text())
    assert summary["summary"]["tuning"] == "dtype bfloat16, LoRA rank 4"
    assert summary["trace_error"] is None
    # The model's own inputs were found, so the forward pass that finds output paths ran.
    assert "output paths failed" not in out.stdout


@tpu
def test_the_batch_fit_returns_is_the_one_the_tpu_compiler_fits_keras_own_step(wide_on_one_chip):
    """Independent of shardviz's capture: Keras's own train step, compiled by
    the TPU compiler for one v5e chip, fits at the batch fit returns and is
    refused at the next."""
    import numpy as np
    from keras_programs import compile_train_step_for_tpu

    (row,) = wide_on_one_chip.answers.to_dict("records")
    batch = int(row["batch"])
    keras.backend.clear_session()
    model = wide()
    x = np.zeros((1, 2**16), "float32")
    model.fit(x, x, batch_size=1, epochs=1, verbose=0)
    compiled = compile_train_step_for_tpu(model, (batch, 2**16), (batch, 2**16))
    m = compiled.memory_analysis()
    used = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes \
        - m.alias_size_in_bytes
    assert abs(used - row["bytes_per_device"]) <= 0.01 * used
    assert used > 0.95 * row["capacity_bytes"]  # the batch fills the chip
    with pytest.raises(Exception, match="RESOURCE_EXHAUSTED"):
        compile_train_step_for_tpu(model, (batch + 1, 2**16), (batch + 1, 2**16))
    # And the real chip: model.fit ran this model at that batch on a v5e chip, in a
    # fresh process, and was refused at the next (bench/probes/chip_edge.py).
    fresh = {r["batch"]: r for r in chip_records("v5e-1x1-edge.jsonl")
             if r["case"].startswith("wide_fit") and not r["earlier_in_process"]}
    assert fresh[batch]["ran"] and fresh[batch]["device_kind"] == "TPU v5 lite"
    assert not fresh[batch + 1]["ran"] and "RESOURCE_EXHAUSTED" in fresh[batch + 1]["error"]


def chip_records(name):
    import json
    import pathlib

    path = pathlib.Path(__file__).parent / "data" / "chip" / name
    return [json.loads(line) for line in path.read_text().splitlines()]


class BranchesOnTraining(keras.layers.Layer):
    """A layer that reads ``training`` as a Python bool, as many do."""

    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1], shape[-1]), name="w")

    def call(self, x, training=None):
        y = keras.ops.matmul(x, self.w)
        return y * 0.5 if training else y


def branching():
    inputs = keras.Input((16,))
    outputs = BranchesOnTraining(name="branchy")(keras.layers.Dense(16)(inputs))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_a_layer_that_fails_under_remat_is_named_with_what_to_change():
    report = shardviz.analyze(branching, Plan({"batch": 8}), (8, 16), labels=(8, 16),
                              train_step=True, remat="full")
    error = report.trace_error
    if error is None:  # this Keras keeps `training` a Python value under remat
        assert report.tuning.remat == "full"
        return
    assert "BranchesOnTraining layer under remat='full'" in error.message
    assert "RematScope" in error.hint and "without remat=" in error.hint
    # The same model without remat trains.
    assert shardviz.analyze(branching, Plan({"batch": 8}), (8, 16), labels=(8, 16),
                            train_step=True).trace_error is None


def test_an_answer_stopped_by_max_compiles_says_no_missing_value():
    import pandas as pd

    from shardviz.model.tuning import Tuning
    from shardviz.planner.fit_answer import ANSWER_COLUMNS, COMPILE_COLUMNS, FitAnswer

    rows = pd.DataFrame([dict(remat=None, target="v5e:2x4", mesh="batch=8", batch=1336,
                              bytes_per_device=14 * 2**30, capacity_bytes=15 * 2**30, next=None,
                              next_bytes_per_device=None, compiles=3)], columns=ANSWER_COLUMNS)
    answer = FitAnswer("largest batch", rows, pd.DataFrame(columns=COMPILE_COLUMNS), None,
                       Tuning(), notes=["no remat: stopped after 3 compiles (max_compiles)"])
    text = str(answer)
    assert "nan" not in text and "batch 1336 on v5e:2x4" in text
    assert text.splitlines()[1].endswith("per chip")


def test_an_answer_for_gpus_says_its_figures_are_estimates():
    answer = shardviz.fit(examples.mlp, target="h100:8", inputs=(1, 16), labels=(1, 16),
                          max_compiles=2)
    assert "estimates: h100:8's memory is taken from the simulated CPUs'" in str(answer)


@tpu
def test_a_model_with_nothing_to_train_is_said():
    def frozen():
        model = examples.mlp()
        for layer in model.layers:
            layer.trainable = False
        model.compile(optimizer="adam", loss="mse")
        return model

    answer = shardviz.fit(frozen, target="v5e:1x1", inputs=(1, 16), labels=(1, 16),
                          max_compiles=2)
    assert "no trainable variables: its train step updates nothing" in str(answer)
