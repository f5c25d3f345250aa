"""shardviz.layout_map_for: a Keras LayoutMap for a backbone that ships none,
built under Keras's own ModelParallel. Its maps for Mistral, Llama 3 and
Gemma are verified on two processes, forward pass and train step, by
notebooks/09_keras_hub.ipynb, which ``make test`` runs; every backbone's by
bench/records/hub_verify.py (tests/test_hub_backbones.py reads its records)."""

import pytest
from needs import HAVE_HUB

import shardviz

shardviz.simulate_devices(8)

import keras  # noqa: E402

pytestmark = pytest.mark.skipif(not HAVE_HUB, reason="keras-hub is not installed")


def small_mistral():
    import keras_hub

    keras.utils.set_random_seed(0)
    return keras_hub.models.MistralBackbone(
        vocabulary_size=256, num_layers=2, num_query_heads=8, num_key_value_heads=2,
        hidden_dim=128, intermediate_dim=256, sliding_window=16, name="small_mistral")


def test_a_backbone_without_a_map_gets_one_that_keras_builds_with():
    import keras_hub

    assert not hasattr(keras_hub.models.MistralBackbone, "get_layout_map")
    mesh = keras.distribution.DeviceMesh((2, 4), ("data", "model"),
                                         keras.distribution.list_devices())
    layout_map = shardviz.layout_map_for(small_mistral, mesh)
    assert layout_map.device_mesh is mesh
    distribution = keras.distribution.ModelParallel(layout_map=layout_map,
                                                    batch_dim_name="data")
    with distribution.scope():
        model = small_mistral()
    split = {v.path: v.value.sharding.spec for v in model.weights
             if any(a is not None for a in v.value.sharding.spec)}
    # Keras's own layouts: attention by heads, the feed-forward pair, the vocabulary.
    assert split["transformer_layer_0/self_attention/query/kernel"][1] == "model"
    assert "model" in split["token_embedding/embeddings"]
    big = [v.path for v in model.weights if v.value.size >= 128 * 128]
    replicated = [p for p in big if p not in split]
    # Only the two kv heads' projections, which a model axis of 4 does not divide.
    assert all(("key" in p or "value" in p) for p in replicated), replicated
    # The audit of the map on this mesh: nothing replicated but those, nothing indivisible.
    plan = shardviz.Plan.from_keras(
        shardviz.layout_map_for(small_mistral, {"batch": 2, "model": 4}))
    audit = shardviz.audit(small_mistral, plan, meshes=[{"batch": 2, "model": 4}])
    assert audit.of("indivisible").empty and audit.of("unused-rule").empty


def test_choose_map_states_the_trade_and_takes_a_preference():
    from shardviz import examples

    def build():
        return examples.mlp(d_model=256, hidden=1024)

    mesh = {"batch": 2, "model": 4}
    memory = shardviz.choose_map(build, mesh, inputs=(8, 256))
    talk = shardviz.choose_map(build, mesh, inputs=(8, 256), prefer="communication")
    c = memory.candidates
    assert memory.compiled and len(c) >= 2 and c.chosen.sum() == 1
    assert memory.chosen.bytes_per_device == c[c.builds].bytes_per_device.min()
    assert talk.chosen.collective_bytes == c[c.builds].collective_bytes.min()
    assert memory.shipped is None  # an MLP's class ships no map
    with pytest.raises(shardviz.ShardvizError, match="'memory' or 'communication'"):
        shardviz.choose_map(build, mesh, prefer="speed")


def test_skipping_dominated_candidates_compiles_fewer_and_chooses_the_same():
    """A candidate whose variables alone take more than a compiled candidate's
    program is not compiled; the full comparison confirms it could not win."""
    def build():
        import keras

        inputs = keras.Input((512,))
        x = inputs
        for i in range(8):  # deep enough that gathering one layer costs less than a copy
            x = keras.layers.Dense(512, name=f"dense_{i}")(x)
        return keras.Model(inputs, x)

    mesh = {"batch": 2, "model": 4}
    full = shardviz.choose_map(build, mesh, inputs=(8, 512))
    fast = shardviz.choose_map(build, mesh, inputs=(8, 512), skip_dominated=True)
    assert (fast.label, fast.plan) == (full.label, full.plan)
    skipped = fast.candidates[fast.candidates.skipped.notna()]
    assert len(skipped) >= 1 and full.candidates.skipped.isna().all()
    compiled = full.candidates.set_index("label").bytes_per_device
    for row in skipped.itertuples():
        assert row.skipped.startswith("not compiled: its variables alone take")
        assert compiled[row.label] > fast.chosen.bytes_per_device
