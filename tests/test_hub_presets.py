"""A keras-hub preset named as the model (``hub:NAME``): the catalogue's
configurations give keras-hub's published parameter counts, the preset's
task model is keras-hub's own CausalLM, a preset keras-hub can load (a local
folder, offline) is built from its own configuration, one it cannot reach
from the catalogue, and every command takes the name."""

import json
import math
import os
import subprocess
import sys

import pytest
from needs import HAVE_HUB

import shardviz

shardviz.simulate_devices(8)

from shardviz.errors import ShardvizError  # noqa: E402
from shardviz.hub import presets  # noqa: E402

pytestmark = pytest.mark.skipif(not HAVE_HUB, reason="keras-hub is not installed")

def _data():
    from importlib import resources

    return json.loads((resources.files("shardviz.hub") / "data" / "presets.json").read_text())


def _published(name):
    from keras_hub.src.utils.preset_utils import BUILTIN_PRESETS

    return BUILTIN_PRESETS[name]["metadata"]["params"]


@pytest.mark.parametrize("entry", _data()["entries"], ids=lambda e: e["preset"])
def test_each_added_configuration_has_the_published_parameter_count(entry):
    import keras

    with shardviz.devices.quiet_start_up():
        import keras_hub

    cls = getattr(keras_hub.models, entry["backbone"])

    def build():
        return cls(**entry["config"])

    scan = shardviz.scan(build)
    assert scan.built_by_shardviz  # nothing allocated
    assert isinstance(scan.model, keras.Model)
    trainable = sum(math.prod(v.shape) for v in scan.variables if v.trainable)
    assert trainable == _published(entry["preset"]), entry["preset"]
    for alias in entry["aliases"]:  # the same model, published under another name
        assert _published(alias) == _published(entry["preset"]), alias
        assert presets.listed(alias) == presets.listed(entry["preset"])


def test_each_alias_of_a_backbones_own_preset_is_published_with_its_count():
    for alias, original in _data()["aliases"].items():
        assert _published(alias) == _published(original), alias
        assert presets.listed(alias).preset == original


def test_a_name_that_is_no_preset_gets_the_nearest_names():
    with pytest.raises(ShardvizError, match="'gema2_2b_en' is not a keras-hub preset") as e:
        presets.preset_builder("hub:gema2_2b_en")
    assert "gemma2_2b_en" in e.value.hint
    with pytest.raises(ShardvizError, match="names no preset"):
        presets.preset_builder("hub:")
    # The command line says the same in one line, exit 2.
    run = subprocess.run([sys.executable, "-m", "shardviz", "fit", "hub:lama3.2_1b",
                          "--target", "v5e:1x1", "--seq", "64"], capture_output=True, text=True)
    assert run.returncode == 2, run.stderr
    assert "not a keras-hub preset" in run.stderr and "llama3.2_1b" in run.stderr
    assert "Traceback" not in run.stderr


def test_offline_a_preset_is_built_from_the_catalogue_and_says_so(monkeypatch):
    def unreachable(keras_hub, preset, item):
        raise ConnectionError("api.kaggle.com cannot be resolved")

    monkeypatch.setattr(presets, "_from_keras_hub", unreachable)
    monkeypatch.setattr(presets, "_UNREACHABLE", {})
    report = shardviz.analyze("hub:gpt2_base_en", shardviz.Plan({"batch": 8}))  # no compile
    assert report.model_name == "gpt2_causal_lm"  # the task model, as keras-hub builds it
    assert report.variables.params.sum() == _published("gpt2_base_en")
    assert any("shardviz's catalogue of published configurations" in n
               and "ConnectionError" in n for n in report.notes), report.notes


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A preset folder keras-hub's save_to_preset wrote: keras-hub loads its own
    configuration from it, with no network."""
    with shardviz.devices.quiet_start_up():
        import keras_hub

    path = str(tmp_path_factory.mktemp("preset") / "tiny_gpt2")
    keras_hub.models.GPT2Backbone(**TINY).save_to_preset(path)
    return path


TINY = dict(vocabulary_size=256, num_layers=2, num_heads=4, hidden_dim=64, intermediate_dim=128,
            max_sequence_length=128, dropout=0.0)


def tiny_causal_lm():
    """The folder's model, built by hand as a user would."""
    with shardviz.devices.quiet_start_up():
        import keras_hub

    return keras_hub.models.GPT2CausalLM(backbone=keras_hub.models.GPT2Backbone(**TINY),
                                         preprocessor=None)


def test_a_preset_folder_is_built_from_its_own_configuration_and_trains_as_its_builder(folder):
    plan = shardviz.Plan({"batch": 8})
    tune = dict(lora_rank=4, dtype="bfloat16")
    by_name = shardviz.analyze("hub:" + folder, plan, batch=8, seq=32, train_step=True, **tune)
    by_hand = shardviz.analyze(tiny_causal_lm, plan, batch=8, seq=32, train_step=True, **tune)
    assert any("keras-hub's own configuration (GPT2CausalLM" in n for n in by_name.notes)
    # The labels are the token ids, one per position, as the causal LM's fit takes them.
    assert tuple(by_name.arguments["labels"].shape) == (8, 32)
    assert str(by_name.arguments["labels"].dtype) == "int32"
    assert by_name.totals.compiled and by_name.totals == by_hand.totals
    assert by_name.variables.equals(by_hand.variables)
    assert by_name.optimizer_variables.equals(by_hand.optimizer_variables)


def test_the_command_line_takes_a_preset_as_the_model(folder, tmp_path):
    env = dict(os.environ)
    run = subprocess.run(
        [sys.executable, "-m", "shardviz", "report", "hub:" + folder, "--mesh", "batch=8",
         "--devices", "8", "--batch", "8", "--seq", "32", "--train-step", "--lora", "4", "--json",
         str(tmp_path / "r.json")], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert any("keras-hub's own configuration" in n for n in data["notes"]), data["notes"]


def test_verify_workers_load_the_same_preset():
    from shardviz.model.builders import builder_ref

    build = presets.model_of("hub:gpt2_base_en")
    assert builder_ref(build) == "hub:gpt2_base_en"
    assert builder_ref("hub:gpt2_base_en") == "hub:gpt2_base_en"


def test_the_explorer_and_suggest_take_a_preset_as_the_model(folder):
    explorer = shardviz.Explorer("hub:" + folder, auto_run=False)
    assert type(explorer.state.scan.model).__name__ == "GPT2CausalLM"
    assert any("keras-hub's own configuration" in n for n in explorer.state.scan.notes)
    answer = shardviz.suggest("hub:" + folder, devices=8)
    assert len(answer) > 0 and answer[0].plan.mesh_dict


def test_a_presets_edge_is_the_chips():
    """keras-hub's GPT-2 as a user gets it (``gpt2_base_en``'s configuration,
    keras-hub's own default compile), fine-tuned with model.fit on one v5e chip
    at sequence 1024 in mixed bfloat16: batch 20 ran and batch 21 was refused,
    needing 16.55G (tests/data/chip/v5e-1x1.jsonl, ``hub_gpt2_default``).
    ``shardviz fit hub:gpt2_base_en`` answers batch 20 (bench/bench_hub_preset.py);
    here the refused batch, named by the preset, needs what the chip said."""
    pytest.importorskip("libtpu")
    import pathlib

    records = [json.loads(x) for x in (pathlib.Path(__file__).parent / "data" / "chip" /
                                       "v5e-1x1.jsonl").read_text().splitlines() if x.strip()]
    chip = {r["batch"]: r for r in records if r["builder"] == "hub_gpt2_default"}
    assert chip[20]["ran"] and not chip[21]["ran"]
    report = shardviz.analyze("hub:gpt2_base_en", shardviz.Plan({"batch": 1}, {}),
                              target="v5e:1x1", batch=21, seq=1024, dtype="mixed_bfloat16",
                              train_step=True)
    assert report.fits is False
    needed = int(report.memory.iloc[0]["total_bytes"])
    assert abs(needed - chip[21]["required_bytes"]) <= 0.01 * 2**30, (needed, chip[21])
