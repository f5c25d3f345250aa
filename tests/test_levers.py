"""shardviz.levers: the changes that would make a program fit, each one
compiled. Each figure is a compile's, never an estimate: dropping the
optimizer's slots saves their bytes, remat of the layers whose activations
fill the peak saves bytes, and a change the model refuses is not compiled
and says why."""

import jax
import keras
import pytest

import shardviz
from shardviz import Plan, examples
from shardviz.planner.levers import describe


def _slots_heavy():
    tokens = keras.Input((64,), dtype="int32")
    x = keras.layers.Embedding(1000, 64, name="embed")(tokens)
    for i in range(2):
        x = keras.layers.Dense(256, activation="relu", name=f"block_{i}")(x)
    model = keras.Model(tokens, keras.layers.Dense(5000, name="lm_head")(x))
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _activations_heavy():
    x = given = keras.Input((512, 32))
    for i in range(4):
        x = keras.layers.Dense(512, activation="gelu", name=f"block_{i}")(x)
    model = keras.Model(given, keras.layers.Dense(8, name="head")(x))
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_each_lever_is_compiled_and_dropping_the_slots_saves_their_bytes():
    ids = jax.ShapeDtypeStruct((16, 64), "int32")
    report = shardviz.analyze(_slots_heavy, Plan({"batch": 8}, {}), inputs=ids, labels=ids,
                              train_step=True)
    frame = shardviz.levers(report, _slots_heavy)
    assert list(frame.columns) == ["lever", "change", "bytes", "saved", "fits", "note"]
    saved = frame.saved.dropna()
    assert saved.is_monotonic_decreasing and frame.saved.isna().tolist()[-1]  # not compiled: last
    sgd = frame.set_index("lever").loc["SGD"]
    assert sgd.saved >= 0.99 * report.memory_parts["optimizer state"]
    seq = frame.set_index("lever").loc["shorter sequence"]
    assert seq.saved != seq.saved and "expects 64" in seq.note  # the model fixes its length
    assert "SGD: " in describe(frame) and "not compiled (Input 0" in describe(frame)


def test_remat_of_the_layers_whose_activations_fill_the_peak_is_offered_and_compiled():
    report = shardviz.analyze(_activations_heavy, Plan({"batch": 8}, {}),
                              inputs=(64, 512, 32), labels=(64, 512, 8), train_step=True)
    frame = shardviz.levers(report, _activations_heavy).set_index("lever")
    remat = frame.loc["remat"]
    assert "block_" in remat.change and remat.saved > 0
    assert frame.loc["smaller batch"].saved > 0


def test_a_program_the_compiler_refuses_gets_its_levers_and_those_that_make_it_fit():
    """The question levers answer first: why does this batch not fit, and what would."""
    report = shardviz.analyze(_activations_heavy, Plan({"batch": 1}, {}), target="v5e:1x1",
                              inputs=(8192, 512, 32), labels=(8192, 512, 8), train_step=True)
    assert report.fits is False and len(report.peak)
    frame = shardviz.levers(report, _activations_heavy).set_index("lever")
    assert {"remat", "smaller batch", "bfloat16"} <= set(frame.index)
    compiled = frame[frame.note == ""]
    # Each compiled change has the bytes the compiler said it needs (remat may need more).
    assert compiled.bytes.notna().all() and (compiled.fits.notna()).all()
    smaller = frame.loc["smaller batch"]
    assert smaller.saved > 0 and smaller.bytes < report.totals.bytes_per_device and smaller.fits


def test_levers_need_a_compiled_pass():
    report = shardviz.analyze(examples.mlp(), examples.megatron_plan())
    with pytest.raises(shardviz.ShardvizError, match="needs a compiled pass"):
        shardviz.levers(report, examples.mlp)


def test_the_command_line_prints_the_levers(tmp_path, capsys):
    from shardviz.cli import main

    module = tmp_path / "heavy.py"
    module.write_text("import keras\n\n\ndef build():\n"
                      "    x = given = keras.Input((512, 32))\n"
                      "    for i in range(4):\n"
                      "        x = keras.layers.Dense(512, activation='gelu', name=f'block_{i}')(x)\n"
                      "    model = keras.Model(given, keras.layers.Dense(8, name='head')(x))\n"
                      "    model.compile(optimizer='sgd', loss='mse')\n"
                      "    return model\n")
    main(["report", f"{module}:build", "--mesh", "batch=8", "--inputs", "64x512x32",
          "--labels", "64x512x8", "--train-step", "--levers", "-q"])
    out = capsys.readouterr().out
    assert "Levers, each compiled" in out and "remat: " in out and " saved, " in out
