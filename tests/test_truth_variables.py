"""report.variables equals what Keras actually does on 8 simulated devices."""

import math

import jax
import numpy as np
import pytest

import shardviz
from shardviz import Plan, examples
from shardviz.layout.geometry import spec_from_sharding

BUILDERS = {
    "functional": examples.mlp,
    "sequential": examples.sequential_mlp,
    "subclassed": examples.subclassed_stack,
    "nested": examples.nested,
    "transformer": examples.transformer_block,
    "llama": examples.llama,
}

PLANS = {
    "megatron": examples.megatron_plan(),
    "column": Plan({"batch": 2, "model": 4}, {".*kernel": (None, "model"), ".*bias": ("model",)}),
    "row-8": Plan({"model": 8}, {".*kernel": ("model",)}),  # shorter than rank: padded
    "3d": Plan({"data": 2, "fsdp": 2, "model": 2},
               {".*kernel": ("fsdp", "model"), ".*(embeddings|gamma|scale)": ("model",),
                r".*(q|k|v|query|key|value)/kernel": ("fsdp", "model", None)}),
    "transformer": examples.transformer_plan(),
    "llama": examples.llama_plan(),
    "replicated": Plan.data_parallel(8),
}


def keras_truth(builder, plan):
    """Build the model under plan.to_keras() and read each variable's sharding."""
    with plan.to_keras().scope():
        model = builder()
    out = {}
    for v in model.variables:
        sharding = v.value.sharding
        out[v.path] = (spec_from_sharding(sharding, len(v.shape)),
                       tuple(sharding.shard_shape(tuple(v.shape))),
                       {d.id: idx for d, idx in sharding.devices_indices_map(tuple(v.shape)).items()})
    return out


KERAS_ERRORS = {
    "conflict": "matches multiple layout specification keys",
    "indivisible": "should evenly divide the shape",
}


@pytest.mark.parametrize("plan_name", list(PLANS))
@pytest.mark.parametrize("builder_name", list(BUILDERS))
def test_specs_and_shards_equal_keras(builder_name, plan_name):
    builder, plan = BUILDERS[builder_name], PLANS[plan_name]
    report = shardviz.analyze(builder, plan)
    if report.errors:
        # Keras must refuse the same plan for this model, for the reason given.
        first = report.errors[0].kind
        with pytest.raises(ValueError, match=KERAS_ERRORS[first]):
            keras_truth(builder, plan)
        return
    truth = keras_truth(builder, plan)
    frame = report.variables.set_index("path")
    assert set(frame.index) == set(truth)
    for path, (spec, shard_shape, indices) in truth.items():
        row = frame.loc[path]
        assert row["spec"] == spec, path
        assert row["shard_shape"] == shard_shape, path
        itemsize = np.dtype(row["dtype"]).itemsize
        assert row["bytes_per_device"] == math.prod(shard_shape) * itemsize
        assert report.geometry(path).indices() == indices, path


def test_a_plan_keras_rejects_is_reported_as_an_error():
    # '.*kernel' and 'up/.*' both fullmatch 'up/kernel'.
    plan = Plan({"batch": 2, "model": 4}, {".*kernel": (None, "model"), "up/.*": ("model",)})
    report = shardviz.analyze(examples.mlp, plan)
    conflict = report.problems_of("conflict")
    assert [p.path for p in conflict] == ["up/kernel"]
    assert "'.*kernel'" in conflict[0].message and "'up/.*'" in conflict[0].message
    with pytest.raises(ValueError, match="matches multiple layout specification keys"):
        keras_truth(examples.mlp, plan)


def test_indivisible_variable_matches_keras_error():
    plan = Plan({"batch": 1, "model": 8}, {"down/kernel": (None, "model")})  # (64, 16): ok
    assert shardviz.analyze(examples.mlp, plan).ok
    plan = Plan({"batch": 1, "model": 8}, {"down/bias": ("model",), "up/kernel": ("model", None)})
    report = shardviz.analyze(lambda: examples.mlp(d_model=12), plan)
    kinds = {(p.kind, p.path) for p in report.errors}
    assert kinds == {("indivisible", "down/bias"), ("indivisible", "up/kernel")}
    message = next(p.message for p in report.errors if p.path == "down/bias")
    assert "size 12" in message and "'model' of size 8" in message
    with pytest.raises(ValueError, match=KERAS_ERRORS["indivisible"]):
        keras_truth(lambda: examples.mlp(d_model=12), plan)


def test_longer_layout_is_an_error_shorter_is_padded():
    plan = Plan({"batch": 2, "model": 4}, {"up/kernel": (None, "model", None), "down/kernel": ("model",)})
    report = shardviz.analyze(examples.mlp, plan)
    by_kind = {(p.kind, p.severity, p.path) for p in report.problem_list if p.kind == "rank-mismatch"}
    assert by_kind == {("rank-mismatch", "error", "up/kernel"), ("rank-mismatch", "warning", "down/kernel")}
    with pytest.raises(ValueError, match="incompatible with its sharding"):
        keras_truth(examples.mlp, plan)
    ok = Plan({"batch": 2, "model": 4}, {"down/kernel": ("model",)})
    truth = keras_truth(examples.mlp, ok)
    row = shardviz.analyze(examples.mlp, ok).variables.set_index("path").loc["down/kernel"]
    assert row["spec"] == truth["down/kernel"][0] == ("model", None)


def test_optimizer_free_model_built_outside_any_distribution():
    model = examples.mlp()
    report = shardviz.analyze(model, examples.megatron_plan())
    assert report.variables.set_index("path").loc["up/kernel", "spec"] == (None, "model")


def test_variable_own_layout_wins_over_rules():
    plan = examples.megatron_plan()
    with plan.to_keras().scope():
        model = examples.mlp()
    other = Plan({"batch": 2, "model": 4}, {".*kernel": ("model", None)})
    report = shardviz.analyze(model, other)
    # The variables carry the layouts of the distribution they were built under.
    assert report.variables.set_index("path").loc["up/kernel", "spec"] == (None, "model")
    assert report.variables.set_index("path").loc["up/kernel", "match"] == "own"
    assert report.problems_of("pinned-layout")
    assert jax.device_count() == 8


def test_large_mesh_on_few_devices_uses_an_abstract_mesh():
    plan = Plan({"data": 16, "model": 16}, {".*kernel": (None, "model")})
    report = shardviz.analyze(lambda: examples.mlp(d_model=32, hidden=256), plan)
    assert report.mesh.abstract and report.mesh.size == 256
    row = report.variables.set_index("path").loc["up/kernel"]
    assert row["shard_shape"] == (32, 16)
    indices = report.geometry("up/kernel").indices()
    assert len(indices) == 256
    assert indices[17] == (slice(None), slice(16, 32))  # device 17 = (data 1, model 1)
    assert report.problems_of("mesh-size")
    assert len(report.devices) == 256
