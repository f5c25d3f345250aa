"""The keras-hub backbones' configurations as data (shardviz/hub/data/*.json):
the files ship with the package and load, each entry is whole, and what is
loaded is exactly what the files say (tuples stay tuples, sub-models'
serialized configurations stay as written), with published values where
they were."""

import dataclasses
import json
from importlib import resources

import pytest

from shardviz import hub
from shardviz.errors import ShardvizError
from shardviz.hub import catalogue
from shardviz.hub.backbone import HubBackbone, sub

DATA = resources.files("shardviz.hub") / "data"


def raw(stem):
    """A data file as plain JSON, with no tuples made."""
    return json.loads((DATA / f"{stem}.json").read_text(encoding="utf-8"))["entries"]


def as_json(value):
    """A loaded value written back as the data files write it."""
    if isinstance(value, tuple):
        return {"__tuple__": [as_json(v) for v in value]}
    if isinstance(value, list):
        return [as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    return value


def test_the_data_files_ship_with_the_package_and_load_in_the_catalogues_order():
    shipped = {p.name for p in DATA.iterdir()}
    assert {f"{stem}.json" for stem in catalogue.FILES} | {"README.md"} <= shipped
    counts = {stem: len(catalogue.load(stem)) for stem in catalogue.FILES}
    assert counts == {"listed": 25, "text": 16, "vision": 21}
    assert tuple(e.name for e in catalogue.entries()) == hub.BACKBONES
    assert all(isinstance(e, HubBackbone) for e in catalogue.entries())


def test_every_entry_is_whole_and_its_name_unique():
    entries = catalogue.entries()
    names = [e.name for e in entries]
    assert len(names) == len(set(names)) == 62
    for e in entries:
        assert e.name.endswith("Backbone"), e.name
        assert isinstance(e.preset, str) and (e.preset or e.params is None), e.name
        assert e.params is None or (isinstance(e.params, int) and e.params > 0), e.name
        assert e.preset_config and e.reduced_config, e.name
        assert isinstance(e.preset_config, dict) and isinstance(e.reduced_config, dict)
        assert e.counted in ("trainable", "all", "rounded"), e.name
        assert set(e.lengths) <= {"preset", "reduced"}, e.name
    # Without a preset, the note says whose published configuration it is.
    assert all(e.note for e in entries if not e.preset)


@pytest.mark.parametrize("stem", catalogue.FILES)
def test_what_is_loaded_is_exactly_what_the_file_says(stem):
    """Every field, nested sub-models included, written back gives the file's JSON:
    nothing is dropped, renamed or reordered, and each ``{"__tuple__": ...}`` (and
    only those) became a tuple."""
    for entry, written in zip(catalogue.load(stem), raw(stem), strict=True):
        back = {f.name: as_json(getattr(entry, f.name)) for f in dataclasses.fields(entry)}
        notes = {k: v for k, v in written.items() if k not in back}
        assert set(notes) <= {"count_why"}, (entry.name, notes)
        assert back == {k: v for k, v in written.items() if k in back}, entry.name
        assert list(back) == [k for k in written if k in back], entry.name


def test_published_values_spot_checked():
    gemma = hub.entry("GemmaBackbone")
    assert (gemma.preset, gemma.params, gemma.counted, gemma.extra) == (
        "gemma_2b_en", 2_506_172_416, "trainable", 0)
    assert gemma.preset_config == dict(
        vocabulary_size=256000, num_layers=18, num_query_heads=8, num_key_value_heads=1,
        hidden_dim=2048, intermediate_dim=32768, head_dim=256)
    assert hub.config("GemmaBackbone", "reduced")["num_key_value_heads"] == 1

    whisper = hub.entry("WhisperBackbone")
    assert whisper.params == 37_184_256 and whisper.preset == "whisper_tiny_en"
    assert whisper.lengths["preset"]["encoder_features"] == 3000

    # Tuples are tuples where keras-hub is given one; lists stay lists.
    assert hub.config("ViTBackbone")["image_shape"] == (224, 224, 3)
    assert isinstance(hub.config("ViTBackbone")["image_shape"], tuple)
    assert hub.config("FluxBackbone")["y_shape"] == (768,)
    smol = hub.config("SmolLM3Backbone")
    assert smol["rope_layer_enabled_list"] == [True, True, True, False] * 9
    assert smol["layer_norm_epsilon"] == 1e-6 and smol["rope_theta"] == 5_000_000.0

    # Sub-models are the serialized configurations from_config builds.
    clip = hub.config("CLIPBackbone", "reduced")
    assert clip["vision_encoder"] == sub(
        "CLIPVisionEncoder", name="vision_encoder", patch_size=8, hidden_dim=128, num_layers=2,
        num_heads=8, intermediate_dim=256, image_shape=(32, 32, 3))
    sd3 = hub.entry("StableDiffusion3Backbone")
    assert sd3.part == "diffuser" and sd3.lengths == {"preset": {"context": 154}}
    assert sd3.preset_config["vae"]["module"] == "keras_hub.src.models.vae.vae_backbone"
    assert sd3.preset_config["t5"] is None
    dfine = hub.config("DFineBackbone")["backbone"]["config"]
    assert dfine["image_shape"] == (640, 640, 3)
    assert dfine["stackwise_stage_filters"][0] == [16, 16, 64, 1, 3, 3]

    # What the published counts cover.
    sam = hub.entry("SAMBackbone")
    assert (sam.counted, sam.extra) == ("all", 4_058_340)
    assert hub.entry("DFineBackbone").extra == -2
    assert hub.entry("Gemma4Backbone").counted == "rounded"
    assert hub.entry("SAM3PromptableConceptBackbone").params is None


def test_an_entry_the_loader_cannot_read_says_what_is_wrong():
    with pytest.raises(ShardvizError, match="lacks"):
        catalogue._entry({"name": "XBackbone", "preset": "x"}, "listed")
    with pytest.raises(ShardvizError, match="unknown keys.*presets"):
        catalogue._entry({"name": "XBackbone", "preset": "x", "params": 1, "preset_config": {},
                          "reduced_config": {}, "presets": "x"}, "listed")
    with pytest.raises(ShardvizError, match="not one of the hub's data files"):
        catalogue.load("audio")
