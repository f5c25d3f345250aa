"""One frozen value for an analysis's settings: analyze builds it and keeps it
on the Report, and every composer that analyses again (why, suggest, sweep,
fit, audit, layout_map_for) passes it on whole, changing only what it decides
itself. A setting added to Settings needs a sample below, and is then checked
in every composer."""

import dataclasses

import pytest

import shardviz

shardviz.simulate_devices(8)

from shardviz import Settings, examples  # noqa: E402
from shardviz.errors import ShardvizError  # noqa: E402
from shardviz.report import report as report_module  # noqa: E402

LINES: list[str] = []

# Every setting at a value other than its default, valid together for examples.mlp
# on two nodes of four simulated GPUs (compiled for the simulated CPUs: fast).
SAMPLE = Settings(
    inputs=(8, 16), labels=(8, 16), mode="abstract", train_step=True, optimizer="sgd",
    progress=LINES.append, replicated_threshold="3MB", abstract_mesh=False, target="h100:4",
    slices=2, dcn_axes=("batch",), processes=2, dtype="bfloat16", lora_rank=2,
    lora_layers=("up",), quantize="int8", remat="full")

NOT_SAMPLED = {
    # batch= and seq= are the other way to give the inputs (a token model's own, at a
    # batch and length): a model takes one or the other, and inputs= is sampled.
    "batch", "seq",
}

PLAN = examples.megatron_plan(batch=4, model=2)


def test_the_sample_sets_every_setting_but_the_other_way_to_give_inputs():
    names = {f.name for f in dataclasses.fields(Settings)}
    assert set(SAMPLE.changed()) == names - NOT_SAMPLED


@pytest.fixture
def made(monkeypatch):
    """The settings of every Report made while the test runs."""
    seen: list[Settings] = []
    init = report_module.Report.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        seen.append(self.settings)

    monkeypatch.setattr(report_module.Report, "__init__", spy)
    return seen


def check(seen: list[Settings], own: set[str]) -> None:
    """Every report made carries every sampled setting but those the composer
    decides itself (``own``)."""
    assert seen, "no analysis was made"
    for settings in seen:
        for name, value in SAMPLE.changed().items():
            if name not in own:
                assert getattr(settings, name) == value, (name, settings)


LAYOUTS_ONLY = {"inputs", "labels", "train_step"}  # a layout check before any compile


def test_analyze_keeps_the_settings_it_was_given_and_keywords_replace_them(made):
    report = shardviz.analyze(examples.mlp, PLAN, settings=SAMPLE)
    assert report.settings == SAMPLE and report.trace is not None
    assert report.arguments["replicated_threshold"] == 3 * 10**6  # resolved: bytes
    # A keyword beside settings replaces its value where it differs from its default;
    # a value is set back to its default with replace().
    again = shardviz.analyze(examples.mlp, PLAN, settings=SAMPLE.replace(train_step=False),
                             replicated_threshold="5MB")
    assert again.settings == SAMPLE.replace(train_step=False, replicated_threshold="5MB")
    check(made, own={"train_step", "replicated_threshold"})


def test_why_carries_the_settings(made):
    report = shardviz.analyze(examples.mlp, PLAN, settings=SAMPLE.replace(train_step=False,
                                                                          labels=None))
    made.clear()
    report.why(0)
    # why decides the mode and says nothing per stage; it lays candidates out first.
    check(made, own={"mode", "progress", "train_step", "labels"} | LAYOUTS_ONLY)
    assert any(s.inputs == SAMPLE.inputs for s in made)


def test_suggest_carries_the_settings(made):
    shardviz.suggest(examples.mlp, top=1, compile_top=1, settings=SAMPLE)
    check(made, own=LAYOUTS_ONLY)
    assert any(s == SAMPLE for s in made)  # the compiled candidate: every setting


def test_sweep_carries_the_settings(made):
    shardviz.sweep(examples.mlp, PLAN, meshes=[{"batch": 4, "model": 2}], settings=SAMPLE)
    check(made, own=set())


def test_fit_carries_the_settings(made):
    shardviz.fit(examples.mlp, PLAN, settings=SAMPLE, max_compiles=2)
    # fit compiles train steps at the batches it tries, and says its own lines.
    check(made, own={"inputs", "labels", "train_step", "progress", "remat"})
    assert all(s.remat == "full" for s in made)


def test_fit_reads_a_settings_list_of_layers_as_one_remat_mode(made):
    # In analyze (and so in report.settings) a remat list names layers; fit's own
    # remat= list compares modes. Settings handed to fit keep analyze's meaning.
    answer = shardviz.fit(examples.mlp, PLAN, settings=SAMPLE.replace(remat=["up"]),
                          max_compiles=2)
    assert len(answer.answers) == 1
    assert made and all(s.tuning.remat == ("up",) for s in made)


def test_audit_carries_the_settings(made):
    shardviz.audit(examples.mlp, PLAN, settings=SAMPLE)
    check(made, own=LAYOUTS_ONLY)
    assert any(s == SAMPLE for s in made)


def test_layout_map_for_carries_the_settings(made):
    shardviz.layout_map_for(examples.mlp, {"batch": 4, "model": 2}, settings=SAMPLE)
    check(made, own=LAYOUTS_ONLY)
    assert any(s == SAMPLE for s in made)


def test_a_setting_that_does_not_exist_is_named():
    with pytest.raises(ShardvizError, match="(?s)no setting 'taget'.*Did you mean 'target'"):
        SAMPLE.replace(taget="v5e:2x4")


def test_a_lone_dcn_axis_name_is_one_axis_not_its_letters():
    assert Settings(dcn_axes="batch").dcn_axes == ("batch",)
    assert Settings(dcn_axes=["batch"]) == Settings(dcn_axes=("batch",))
    with pytest.raises(ShardvizError, match="dcn_axes=5 is not an axis name"):
        Settings(dcn_axes=5)
    report = shardviz.analyze(examples.mlp(), examples.megatron_plan(), target="v5e:2x2",
                              slices=2, dcn_axes="batch")
    assert report.settings.dcn_axes == ("batch",) and report.arguments["dcn_axes"] == ("batch",)
    assert not report.errors
