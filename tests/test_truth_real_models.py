"""Truth on real models: every activation, collective and byte count that
shardviz reports for models it did not write equals what Keras and JAX do.

Each check compares shardviz's report with evidence gathered without
shardviz's own capture: the model built for real under ``plan.to_keras()``,
its own ``jax.jit(...).lower(...).compile()`` (collectives parsed here from
the HLO text, memory from ``memory_analysis()``), and the sharded arrays of a
real ``predict``.
"""

import collections
import os
import re

import jax
import keras
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

import shardviz
from shardviz import Plan

COLLECTIVE = re.compile(
    r"=.*?\s(all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)(?:-start)?\(")


def hub():
    """keras-hub, which `make test` installs; elsewhere these tests skip."""
    if os.environ.get("SHARDVIZ_REQUIRE_HUB"):
        import keras_hub
        return keras_hub
    return pytest.importorskip("keras_hub")


# ----------------------------------------------------------------- evidence
@pytest.fixture(autouse=True)
def fresh_names():
    """Layers named automatically (``rotary_embedding_1``) take the next free
    name: start each test, and each real build, from a clean session so that
    shardviz's build and the real one name their layers alike."""
    keras.backend.clear_session()


def real_model(build, plan):
    keras.backend.clear_session()
    dist = plan.to_keras()
    with dist.scope():
        model = build()
    return model, dist


def own_compile(build, plan, inputs):
    """The model built for real under the plan, and its forward pass
    compiled by plain ``jax.jit`` inside the distribution's scope."""
    model, dist = real_model(build, plan)
    mesh = dist.device_mesh.backend_mesh

    def placed(spec):
        return jax.ShapeDtypeStruct(spec.shape, spec.dtype,
                                    sharding=NamedSharding(mesh, PartitionSpec(plan.batch_axis)))

    x = jax.tree_util.tree_map(placed, inputs)
    tv = [jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=v.value.sharding)
          for v in model.trainable_variables]
    ntv = [jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=v.value.sharding)
           for v in model.non_trainable_variables]

    def forward(tv, ntv, x):
        with dist.scope():
            return model.stateless_call(tv, ntv, x)[0]

    return model, dist, jax.jit(forward).lower(tv, ntv, x).compile()


def collective_counts(hlo_text):
    return collections.Counter(m.group(1) for line in hlo_text.splitlines()
                               if (m := COLLECTIVE.search(line)))


def concrete(inputs, seed=0):
    rng = np.random.default_rng(seed)

    def value(spec):
        if np.issubdtype(np.dtype(spec.dtype), np.integer):
            return rng.integers(0, 8, spec.shape).astype(spec.dtype)
        return rng.standard_normal(spec.shape).astype(spec.dtype)

    return jax.tree_util.tree_map(value, inputs)


def check_against_jax(report, build, plan, inputs):
    """The comparisons every case shares."""
    assert report.trace_error is None, report.trace_error
    assert not report.errors, report.errors
    acts = report.trace.activations
    assert acts and all(a.actual is not None and a.actual_spec is not None for a in acts)
    model, dist, compiled = own_compile(build, plan, inputs)
    # Collectives: the same kinds, as many of each, as XLA's own program.
    mine = collections.Counter(c.kind for c in report.trace.collectives)
    assert mine == collective_counts(compiled.as_text())
    # Memory: XLA's own analysis of the same program.
    stats = compiled.memory_analysis()
    memory = report.trace.memory
    assert memory["argument_bytes"] == stats.argument_size_in_bytes
    assert memory["output_bytes"] == stats.output_size_in_bytes
    assert memory["temp_bytes"] == stats.temp_size_in_bytes
    # Variables: the layouts Keras gave the real model.
    specs = report.variables.set_index("path")["spec"]
    for v in model.variables:
        want = NamedSharding(dist.device_mesh.backend_mesh, PartitionSpec(*specs[v.path]))
        assert v.value.sharding.is_equivalent_to(want, len(v.shape)), v.path
    # Outputs: the sharded arrays of a real predict, under the distribution.
    x = concrete(inputs)
    with dist.scope():
        outputs = model.predict(x, verbose=0, batch_size=jax.tree_util.tree_leaves(x)[0].shape[0])
    returned = [a for a in acts if a.output_index is not None]
    for a in returned:
        leaf = jax.tree_util.tree_leaves(outputs)[a.output_index]
        assert tuple(leaf.shape) == a.shape
    # Every split over part of an axis is what the compiled program computes:
    # its per-device shard shape is the shape of an instruction of that layer.
    text = compiled.as_text()
    for a in acts:
        if a.partial:
            scope = a.path[: -len("/output")].rpartition("/")[2]
            shape = f"[{','.join(map(str, a.shard_shape))}]"
            assert any(shape in line and f"/{scope}/" in line for line in text.splitlines()), (
                a.path, shape)
    return model


# ------------------------------------------------------------------ models
def gqa():
    """Fewer key heads than the model axis: XLA splits them over part of it."""
    x = keras.Input((16, 64))
    q = keras.layers.EinsumDense("btd,dnh->btnh", (16, 4, 16), name="query")(x)
    k = keras.layers.EinsumDense("btd,dnh->btnh", (16, 2, 16), name="key")(x)
    k = keras.layers.Lambda(lambda t: keras.ops.repeat(t, 2, axis=2), name="rep")(k)
    s = keras.layers.Lambda(lambda a: keras.ops.einsum("btnh,bsnh->bnts", a[0], a[1]),
                            name="scores")([q, k])
    return keras.Model(x, s)


GQA_PLAN = Plan({"batch": 2, "model": 4}, {"query/kernel": (None, "model", None)})


def test_a_split_over_part_of_an_axis_is_captured_and_described():
    report = shardviz.analyze(gqa, GQA_PLAN, inputs=(8, 16, 64))
    key = report.activation("key/output")
    assert key.partial and key.actual_spec == ("batch", None, "model:(1)2", None)
    assert key.shard_shape == (4, 16, 1, 16) and key.bytes_per_device == 4 * 16 * 16 * 4
    assert key.actual_note == ("dim 2 is split over 2 of the 4 'model' devices, and "
                               "replicated over the other 2")
    row = report.activations.set_index("path").loc["key/output"]
    assert row["partial"] and "2 of the 4 'model' devices" in row["actual_note"]
    # Tiles come from JAX's own index map of XLA's sharding.
    indices = report.indices("key/output")
    assert indices == {d.id: idx for d, idx in key.actual.devices_indices_map(key.shape).items()}
    assert indices[0] == indices[1] and indices[0] != indices[2]  # 2 replicas per shard
    fig = report.show("key/output")
    assert {t.devices for t in fig.shardviz_layout.tiles} == {(0, 1), (2, 3), (4, 5), (6, 7)}
    check_against_jax(report, gqa, GQA_PLAN, jax.ShapeDtypeStruct((8, 16, 64), "float32"))


def test_a_multi_output_rule_says_keras_refuses_to_build():
    def mha():
        x = keras.Input((16, 32))
        y, s = keras.layers.MultiHeadAttention(4, 8, name="mha")(
            x, x, return_attention_scores=True)
        return keras.Model(x, [y, s])

    def lstm():
        x = keras.Input((16, 32))
        y, h, c = keras.layers.LSTM(8, return_state=True, name="lstm")(x)
        return keras.Model(x, [y, h, c])

    for build, key, axes in ((mha, "mha/output", ("batch", None, None)),
                             (lstm, "lstm/output", ("batch", None))):
        plan = Plan({"batch": 2, "model": 4}, {key: axes})
        with pytest.raises(ValueError, match="__jax_array__"):
            real_model(build, plan)  # what Keras does
        report = shardviz.analyze(build, plan, inputs=(8, 16, 32))
        (p,) = report.problems_of("multi-output-rule")
        assert p.severity == "error" and p.rule == key and "raises ValueError" in p.message
        assert not report.ok and report.trace is None


def test_a_multi_output_rule_in_an_eagerly_built_model_works_as_in_keras():
    class Sub(keras.Model):
        def __init__(self):
            super().__init__(name="sub")
            self.mha = keras.layers.MultiHeadAttention(4, 8, name="mha")

        def call(self, x):
            return self.mha(x, x, return_attention_scores=True)[0]

    def build():
        model = Sub()
        model(np.zeros((8, 16, 32), "float32"))
        return model

    plan = Plan({"batch": 2, "model": 4}, {".*mha/output": ("batch", None, None)})
    model, dist = real_model(build, plan)  # Keras builds it eagerly, and runs it
    with dist.scope():
        assert model.predict(np.zeros((8, 16, 32), "float32"), verbose=0).shape == (8, 16, 32)
    report = shardviz.analyze(build, plan, inputs=(8, 16, 32))
    assert report.ok and not report.problems_of("multi-output-rule")
    acts = report.activations.set_index(["path", "output"])
    assert acts.loc[("sub/mha/output", 1), "honored"]  # the scores, constrained too


def test_every_call_of_a_reused_layer_is_a_row():
    def shared():
        x = keras.Input((16,), name="x")
        dense = keras.layers.Dense(16, name="shared")
        return keras.Model(x, dense(dense(x)), name="twice")

    report = shardviz.analyze(shared, Plan.data_parallel(8), inputs=(8, 16))
    acts = report.activations
    assert acts["path"].tolist() == ["shared/output"] * 2 and acts["call"].tolist() == [0, 1]
    assert report.activation("shared/output", call=1).output_index == 0


# --------------------------------------------------------------- keras-hub
def small_llama(kv_heads=2):
    return hub().models.LlamaBackbone(
        vocabulary_size=256, num_layers=2, num_query_heads=4, num_key_value_heads=kv_heads,
        hidden_dim=64, intermediate_dim=128)


def small_phi3():
    return hub().models.Phi3Backbone(
        vocabulary_size=256, num_layers=2, num_query_heads=4, num_key_value_heads=2,
        hidden_dim=64, intermediate_dim=128)


def llama_causal_lm():
    return hub().models.LlamaCausalLM(backbone=small_llama(), preprocessor=None)


def llama_layout_plan():
    kd = keras.distribution
    mesh = kd.DeviceMesh((2, 4), ("batch", "model"), kd.list_devices()[:8])
    return Plan.from_keras(hub().models.LlamaBackbone.get_layout_map(mesh))


TOKENS = {"token_ids": jax.ShapeDtypeStruct((8, 16), "int32"),
          "padding_mask": jax.ShapeDtypeStruct((8, 16), "int32")}


def test_phi3_under_llamas_layout_map_is_fully_analysed():
    plan = llama_layout_plan()
    report = shardviz.analyze(small_phi3, plan, inputs=TOKENS)
    check_against_jax(report, small_phi3, plan, TOKENS)
    partial = report.activations[report.activations["partial"]]["path"].tolist()
    assert any("key" in p for p in partial) and any("value" in p for p in partial)
    kinds = collections.Counter(c.kind for c in report.trace.collectives)
    assert kinds["all-to-all"] >= 1 and kinds["all-gather"] >= 1


def test_llama_with_two_kv_heads_and_output_rules():
    plan = llama_layout_plan().with_rules(list(llama_layout_plan().rules) + [
        (r"transformer_layer_\d+/feedforward_(gate|intermediate)_dense/output",
         ("batch", None, "model")),
        (r"transformer_layer_\d+/output", ("batch", None, None)),
    ])
    report = shardviz.analyze(small_llama, plan, inputs=TOKENS)
    check_against_jax(report, small_llama, plan, TOKENS)
    acts = report.activations
    constrained = acts[acts["rule"].notna()]
    assert len(constrained) == 6 and constrained["honored"].all()


def test_a_task_that_compiles_in_its_constructor_is_analysed_with_its_optimizer():
    plan = llama_layout_plan().with_rule("token_embedding/output", ("batch", None, "model"))
    report = shardviz.analyze(llama_causal_lm, plan, inputs=TOKENS)
    check_against_jax(report, llama_causal_lm, plan, TOKENS)
    # The logits are the second call of the tied embedding, and the model's output.
    calls = report.activations[report.activations["path"] == "token_embedding/output"]
    assert calls["call"].tolist() == [0, 1]
    assert calls["shape"].tolist() == [(8, 16, 64), (8, 16, 256)]
    assert report.activation("token_embedding/output", call=1).output_index == 0
    (p,) = report.problems_of("reused-layer")
    assert p.rule == "token_embedding/output" and "(8, 16, 256)" in p.message
    # No weights were allocated, and the task's own optimizer is used for a train step.
    assert all(v._value is None for v in report.scan.model.variables)
    labels = jax.ShapeDtypeStruct((8, 16), "int32")
    step = shardviz.analyze(llama_causal_lm, plan, inputs=TOKENS, labels=labels, train_step=True)
    assert step.trace_error is None and len(step.optimizer_variables) > 2
    assert step.trace.step_setup.loss == "sparse_categorical_crossentropy"
    assert step.optimizer_variables["path"].iloc[0].startswith(
        step.scan.model.optimizer.name + "/")
