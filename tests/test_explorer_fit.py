"""The Explorer's Fit tab, driven as a user drives it: settings typed beside
the target, the Fit button clicked, the answer (or why it was refused) read
back from the tab's own widgets."""

import html

import needs
import pytest

import shardviz
from shardviz import examples
from shardviz.widgets.explorer import TABS
from shardviz.widgets.tabs import FitTab

shardviz.simulate_devices(8)
import keras  # noqa: E402

tpu = needs.tpu


def wide():
    """A model whose activations outgrow a v5e chip at a batch of a few hundred thousand."""
    inputs = keras.Input((2**12,))
    x = keras.layers.Dense(64, name="up")(inputs)
    outputs = keras.layers.Dense(2**12, name="down")(x)
    return keras.Model(inputs, outputs, name="wide")


def text(widget):
    return html.unescape(widget.value)


def fit_tab(app) -> FitTab:
    app.tabs.selected_index = TABS.index("Fit")
    return app.tab(FitTab)


@pytest.fixture
def cpu_app():
    return shardviz.Explorer(examples.mlp, inputs=(8, 16), plan=examples.megatron_plan(),
                             auto_run=False)


def test_the_fit_tab_comes_after_suggest():
    assert TABS.index("Fit") == TABS.index("Suggest") + 1


@tpu
def test_the_largest_batch_appears_with_its_compile_count(capsys):
    app = shardviz.Explorer(examples.mlp, inputs=(8, 16), target="v5e:1x1", auto_run=False)
    tab = fit_tab(app)
    assert tab.target_box.value == "v5e:1x1"                  # the Explorer's target
    tab.remat_choice.value = ("none", "full")                  # compare two modes
    tab.fit_button.click()
    answer = tab.answer
    assert answer is not None and answer.question == "largest batch"
    assert f"{answer.compile_count} compiles" in text(tab.note)
    assert "batch 8 on v5e:1x1" in text(tab.progress_log)
    shown = text(tab.answer_html)
    assert "no remat" in shown and "<td>full</td>" in shown and "1,048,576" in shown
    assert f"{answer.compile_count} compiles</summary>" in text(tab.compiles_html)
    estimate = answer.report.estimate
    assert ("Expected step time" in shown) == ("expected" in set(estimate["part"]))
    assert not tab.fit_button.disabled
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""                    # progress goes to the tab only


@tpu
def test_the_refused_next_batch_is_shown_beside_the_one_that_fits():
    app = shardviz.Explorer(wide, inputs=(8, 2**12), labels=(8, 2**12), train_step=True,
                            target="v5e:1x1", auto_run=False)
    tab = fit_tab(app)
    tab.precision_choice.value = 0.05
    tab.fit_button.click()
    (row,) = tab.answer.answers.to_dict("records")
    assert row["bytes_per_device"] <= row["capacity_bytes"] <= row["next_bytes_per_device"]
    shown = text(tab.answer_html)
    assert f"{row['batch']:,}" in shown and f"<td>{row['next']}</td>" in shown
    assert "within 5%" in shown


@tpu
def test_the_smallest_slice_of_a_family_for_a_batch(cpu_app):
    tab = fit_tab(cpu_app)
    tab.target_box.value = "v5e"
    tab.batch_box.value = "64"
    tab.dtype_box.value = "bfloat16"
    tab.fit_button.click()
    answer = tab.answer
    assert answer is not None and answer.question == "smallest slice"
    assert "The smallest slice, dtype bfloat16" in text(tab.note)
    (row,) = answer.answers.to_dict("records")
    assert row["target"] == "v5e:1x1" and row["batch"] == 64
    assert "<td>v5e:1x1</td>" in text(tab.answer_html)
    assert f"{answer.compile_count} compile" in text(tab.compiles_html)


@pytest.mark.parametrize("typed, words", [
    (dict(target_box="v5e", batch_box="8", lora_box="0"), "lora_rank=0 is not a LoRA rank"),
    (dict(target_box="v5e", batch_box="8", dtype_box="float99"),
     "dtype='float99' is not a dtype policy"),
    (dict(target_box="v5e"), "for which batch"),
    (dict(target_box="cpu"), "'cpu' is not sold in slices"),
    (dict(target_box="v5e", batch_box="many"), "batch='many' is not a positive"),
])
def test_a_bad_setting_shows_its_message_and_hint_and_keeps_what_was_typed(cpu_app, typed, words):
    tab = fit_tab(cpu_app)
    for name, value in typed.items():
        getattr(tab, name).value = value
    tab.fit_button.click()
    note = text(tab.note)
    assert words in note and "shardviz-error" in note
    assert note.count("<br>") == 1                            # the hint, under the message
    assert "Traceback" not in note and tab.answer is None
    assert all(getattr(tab, name).value == value for name, value in typed.items())
    assert not tab.fit_button.disabled and text(cpu_app.error) == ""


def test_a_built_model_with_settings_is_refused_in_the_tab():
    model = examples.mlp()
    app = shardviz.Explorer(model, inputs=(8, 16), auto_run=False)
    tab = fit_tab(app)
    tab.target_box.value = "v5e"
    tab.batch_box.value = "8"
    tab.lora_box.value = "4"
    tab.fit_button.click()
    note = text(tab.note)
    assert "changes how the model is built, and this model is built already" in note
    assert "builder" in note and tab.lora_box.value == "4"


@tpu
def test_the_tab_still_works_after_a_refusal(cpu_app):
    tab = fit_tab(cpu_app)
    tab.target_box.value = "v5e:1x1"
    tab.lora_box.value = "0"
    tab.fit_button.click()
    assert "lora_rank=0" in text(tab.note) and text(tab.answer_html) == ""
    tab.lora_box.value = "2"
    tab.fit_button.click()
    assert tab.answer is not None and "LoRA rank 2" in text(tab.note)
    assert "1,048,576" in text(tab.answer_html)


def test_the_target_follows_the_explorer_unless_another_was_typed(cpu_app):
    pytest.importorskip("libtpu")
    tab = fit_tab(cpu_app)
    assert tab.target_box.value == "cpu"
    cpu_app.target_box.value = "v5e:2x4"
    assert tab.target_box.value == "v5e:2x4"
    tab.target_box.value = "v5e"                               # typed here: it stays
    cpu_app.target_box.value = "h100:8"
    assert tab.target_box.value == "v5e"


def test_remat_choices_become_one_mode_or_a_list(cpu_app):
    tab = fit_tab(cpu_app)
    assert tab.remat() is None
    tab.remat_choice.value = ("full",)
    assert tab.remat() == "full"
    tab.larger_than_box.value = 4096
    tab.remat_choice.value = ("none", "larger_than")
    assert tab.remat() == [None, "larger_than:4096"]
    tab.seq_box.value = "128"
    settings = tab.settings()
    assert settings["seq"] == 128 and settings["inputs"] is None
