"""The planner: suggested plans are real plans, reasoned, ranked, and within
budget; sweeps say on which meshes a rule set works."""

import re

import pytest
from needs import tpu

import shardviz
from shardviz import Plan, ShardvizError, examples
from shardviz.strategy import roles, rules_for


def builds_under(plan, builder):
    """Keras accepts the plan: the model builds inside its distribution."""
    with plan.to_keras().scope():
        builder()
    return True


def test_the_mlps_top_candidate_is_megatron_paired_or_beats_it():
    found = shardviz.suggest(examples.mlp, devices=8, inputs=(8, 16), top=6)
    assert len(found) >= 3
    megatron = [c for c in found if c.plan.mesh_dict.get("model", 1) > 1]
    assert megatron, "a tensor-parallel candidate"
    for c in megatron:  # a Megatron pair costs exactly one all-reduce
        kinds = c.report.collectives["kind"].tolist()
        assert kinds == ["all-reduce"], (c.name, kinds)
        keys = {r.key: r.axes for r in c.plan.rules}
        assert keys["up/kernel"] == (None, "model") and keys["down/kernel"] == ("model", None)
    best = found[0]
    assert best in megatron or all(best.comm_bytes <= c.comm_bytes for c in megatron)
    for c in found:
        assert c.compiled and c.report.errors == [] and c.estimated == ()
        assert builds_under(c.plan, examples.mlp)
        assert all(c.reasons.get(r.key) for r in c.plan.rules)
    assert "data parallel" in found._repr_html_() and "communicated" in found._repr_html_()
    assert "comm_bytes" in found.table


def test_under_a_budget_data_parallel_misses_every_candidate_fits():
    everything = shardviz.suggest(examples.transformer_block, devices=8, inputs=(8, 16, 64),
                                  top=10)
    data_parallel = next(c for c in everything if c.name == "data parallel")
    budget = data_parallel.bytes_per_device - 1
    within = shardviz.suggest(examples.transformer_block, devices=8, inputs=(8, 16, 64),
                              budget_bytes=budget, top=10)
    assert within and all(c.bytes_per_device <= budget for c in within)
    assert all(c.name != "data parallel" for c in within)
    for c in within:
        # The compiled figure is XLA's own total for that plan.
        assert c.bytes_per_device == int(c.report.memory["total_bytes"].max())


def test_heads_that_do_not_divide_are_never_split():
    def six_heads():
        return examples.transformer_block(d_model=48, heads=6)

    found = shardviz.suggest(six_heads, devices=8, top=10)
    assert found
    split_over = set()
    for c in found:
        assert not c.report.errors
        model = c.plan.mesh_dict.get("model", 1)
        for path in ("attn/query/kernel", "attn/key/kernel", "attn/value/kernel",
                     "attn/attention_output/kernel"):
            spec = tuple(c.report.variables.set_index("path").loc[path, "spec"])
            if "model" in spec:  # 6 heads split over 2 devices, never over 4 or 8
                assert 6 % model == 0, (c.name, path, spec)
                split_over.add(model)
        assert builds_under(c.plan, six_heads)
        assert "bytes_per_device (variables only)" in c.estimated  # nothing compiled
        assert "reasons (unchecked)" in c.estimated and "reasons unchecked" in str(c)
    assert split_over == {2}


def test_roles_come_from_shapes_not_names():
    def renamed():
        import keras

        x = keras.Input((16,))
        h = keras.layers.Dense(64, name="alpha")(x)
        return keras.Model(x, keras.layers.Dense(16, name="omega")(h))

    kinds = {r.path.split("/")[-2] + "/" + r.path.split("/")[-1]: r.kind
             for r in roles(shardviz.scan(renamed))}
    assert kinds["alpha/kernel"] == "column" and kinds["omega/kernel"] == "row"
    assert kinds["alpha/bias"] == "column-bias" and kinds["omega/bias"] == "other"


def test_grouped_query_key_value_dense_kernels_and_conv_kernels_get_their_roles():
    pytest.importorskip("keras_hub")
    from shardviz import hub as hb

    # SmolLM3 writes query, key and value as Dense layers (4 query heads per kv head) and
    # builds every layer's output projection under one path; Moonshine has a Conv1D stem.
    smol = {r.path: r.kind for r in roles(hb.scan("SmolLM3Backbone"))}
    for name in ("q_proj", "k_proj", "v_proj"):
        assert smol[f"transformer_layer_0/self_attn/{name}/kernel"] == "column", name
    assert smol["o_proj/kernel"] == "heads-out"
    moon = {r.path: r.kind for r in roles(hb.scan("MoonshineBackbone"))}
    assert moon["conv2/kernel"] == "other"
    assert moon["encoder_block_0/self_attention_layer/query/kernel"] == "heads-in"
    assert moon["encoder_block_0/feedforward/dense_1/kernel"] == "column"
    plan = shardviz.layout_map_for(hb.scan("SmolLM3Backbone"), {"batch": 2, "model": 4})
    assert len(plan) > 0  # a path shared by every layer no longer breaks the planner


def test_a_lone_square_projection_after_a_fused_query_key_value_one_narrows_back():
    """Stable Diffusion 3's, SAM's and Swin's attention: one Dense widens to
    query, key and value together, then one square Dense takes the heads
    back. Split by its output too, the heads' attention ran whole on every
    device (27.7 GiB per chip for Stable Diffusion 3 on v5e:2x4, 7.7 GiB
    with the projection split by its input)."""
    import keras

    class FusedAttention(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.qkv = keras.layers.Dense(3 * 32, name="qkv")
            self.proj = keras.layers.Dense(32, name="proj")

        def call(self, x):
            qkv = keras.ops.reshape(self.qkv(x), (-1, x.shape[1], 3, 4, 8))
            q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
            out = keras.ops.dot_product_attention(q, k, v)
            return self.proj(keras.ops.reshape(out, (-1, x.shape[1], 32)))

    def fused():
        x = keras.Input((8, 32))
        return keras.Model(x, FusedAttention(name="attention")(x))

    s = shardviz.scan(fused)
    kinds = {r.path: r.kind for r in roles(s)}
    assert kinds["attention/qkv/kernel"] == "column"
    assert kinds["attention/proj/kernel"] == "row"
    assert kinds["attention/proj/bias"] == "other"
    with pytest.raises(ShardvizError, match="Give one of 'row', 'column'"):
        roles(s, after_fused="diagonal")
    # Shapes alone cannot tell (Swin's windows fare better the other way): both
    # readings are candidates, and the compiled figures choose between them.
    import jax

    from shardviz.strategy.strategies import VARIANT_LABELS

    choice = shardviz.planner.choose_map(s, {"batch": 2, "model": 4},
                                         inputs=jax.ShapeDtypeStruct((8, 8, 32), "float32"))
    other = "data × tensor parallel" + VARIANT_LABELS["column"]
    assert list(choice.candidates.label) == ["data × tensor parallel", other]
    assert choice.candidates.builds.all() and (choice.candidates.bytes_per_device > 0).all()
    from shardviz.strategy.strategies import candidate_plans

    plans = {label: plan for label, plan, _ in candidate_plans(s, 8, sequence=False)
             if plan.mesh_dict == {"batch": 2, "model": 4}}
    proj = {label: tuple(shardviz.analyze(s, plans[label]).variables.set_index("path")
                         .loc["attention/proj/kernel", "spec"]) for label in plans}
    assert proj == {"data × tensor parallel": ("model", None), other: (None, "model")}


@tpu
def test_a_mesh_where_no_candidate_fits_the_target_says_so_with_the_compilers_bytes():
    # 2**28 rows of 16 features: on a batch=2 mesh each chip takes half the batch, and its
    # activations need 16 GiB by the compiler's count; a v5e chip allows 15.75 GiB.
    with pytest.raises(ShardvizError) as caught:
        shardviz.layout_map_for(examples.mlp, {"batch": 2, "model": 4}, inputs=(2**28, 16),
                                target="v5e:2x4")
    e = caught.value
    assert e.message.startswith("No strategy of the planner fits v5e:2x4 on "
                                "{'batch': 2, 'model': 4} for this model"), e.message
    assert "it needs 16.0 GiB per chip, and the v5e compiler allows 15.8 GiB" in e.message
    assert "shardviz.suggest(model, target='v5e:2x4'" in e.hint
    # The hint holds: another mesh shape of the slice fits.
    best = shardviz.suggest(examples.mlp, target="v5e:2x4", inputs=(2**28, 16), top=1)[0]
    assert best.report.totals.fits and best.plan.mesh_dict != {"batch": 2, "model": 4}


def test_a_device_meshs_axes_are_read_by_name_and_a_dict_names_batch_and_model(monkeypatch):
    import keras

    from shardviz.planner import layout_maps

    planned = []
    choose = layout_maps.choose_map
    monkeypatch.setattr(layout_maps, "choose_map",
                        lambda model, mesh, **kw: planned.append(mesh) or choose(model, mesh, **kw))
    # The data axis second: the model axis is the one named "model", of size 4.
    mesh = keras.distribution.DeviceMesh((4, 2), ("model", "batch"),
                                         keras.distribution.list_devices())
    # Keras's ModelParallel would split the batch over the first axis, 'model': it says so.
    with pytest.warns(UserWarning, match="batch_dim_name='batch'"):
        layout_map = shardviz.layout_map_for(examples.mlp, mesh)
    assert planned == [{"batch": 2, "model": 4}]
    assert layout_map["up/kernel"].axes == (None, "model")
    assert shardviz.layout_map_for(examples.mlp, {"batch": 4, "model": 2})["up/kernel"].axes \
        == (None, "model")
    with pytest.raises(ShardvizError, match="names them 'batch' and 'model'") as e:
        shardviz.layout_map_for(examples.mlp, {"data": 2, "model": 4})
    assert "DeviceMesh" in e.value.hint


def test_a_mesh_no_strategy_makes_or_with_no_devices_says_why():
    with pytest.raises(ShardvizError, match="'batch' 0 devices"):
        shardviz.layout_map_for(examples.mlp, {"batch": 0, "model": 4})
    with pytest.raises(ShardvizError, match="makes the mesh") as e:
        shardviz.layout_map_for(examples.mlp, {"batch": 3, "model": 3})
    assert "batch=9 × model=1" in e.value.hint
    with pytest.raises(TypeError, match="layout_map_for"):  # a misspelled keyword
        shardviz.layout_map_for(examples.mlp, {"batch": 2, "model": 4}, input=(8, 16))


@tpu
def test_a_train_step_that_cannot_run_is_said_not_no_plan_fits():
    import jax
    import keras

    def classifier():
        inputs = keras.Input((16,))
        model = keras.Model(inputs, keras.layers.Dense(4, name="head")(inputs))
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        return model

    with pytest.raises(ShardvizError, match="No candidate's train step ran: .*needs labels") \
            as e:
        shardviz.suggest(classifier, target="v5e:2x4", inputs=(8, 16), train_step=True)
    assert "--labels" in e.value.hint
    found = shardviz.suggest(classifier, target="v5e:2x4", inputs=(8, 16), train_step=True,
                             labels=jax.ShapeDtypeStruct((8,), "int32"), top=1)
    assert len(found) == 1 and found[0].compiled


def test_rules_are_few_readable_and_exact():
    paths = [f"block_{i}_{name}/kernel" for i in range(4) for name in ("q", "k", "up")]
    specs = {p: (None, "m") for p in paths if "_up/" in p}
    rules = rules_for(specs, paths)
    assert rules == [(r"block_\d+_up/kernel", (None, "m"))]
    llama = shardviz.suggest(examples.llama, devices=8, top=3)
    for c in llama:
        assert len(c.plan.rules) <= 8, c.plan
        for rule in c.plan.rules:
            assert any(re.fullmatch(rule.key, p) for p in c.report.paths)


def test_sweep_says_where_a_rule_set_works():
    frame = shardviz.sweep(examples.transformer_block, examples.transformer_plan(), devices=64)
    assert frame["mesh"].tolist()[0] == "batch=1 × model=64"
    assert len(frame) == 7
    bad = frame[frame["errors"] > 0]
    assert set(bad["mesh"]) == {"batch=1 × model=64", "batch=2 × model=32",
                                "batch=4 × model=16"}
    assert all("does not divide" in m for m in bad["first_error"])
    good = frame[frame["errors"] == 0]
    assert good["bytes_per_device"].is_monotonic_increasing  # less model split, more bytes
    compiled = shardviz.sweep(examples.mlp, {".*up/kernel": (None, "model"),
                                             ".*down/kernel": ("model", None)},
                              devices=8, inputs=(8, 16))
    assert compiled["compiled"].all()
    assert compiled.set_index("mesh").loc["batch=8 × model=1", "collective_bytes"] == 0
    assert shardviz.show_sweep(compiled)._repr_png_()[:4] == b"\x89PNG"


def test_bad_requests_get_clear_errors():
    with pytest.raises(ShardvizError, match="devices=N or meshes"):
        shardviz.sweep(examples.mlp, Plan.data_parallel(8))
    with pytest.raises(ShardvizError, match="positive device count"):
        shardviz.suggest(examples.mlp, devices=0)


def test_sequence_parallel_rules_are_offered_where_activations_dominate():
    def long_sequence():
        return examples.transformer_block(seq=64, d_model=32, heads=4, ff=64)

    found = shardviz.suggest(long_sequence, devices=8, inputs=(8, 64, 32), top=10)
    sequence = [c for c in found if "sequence" in c.name]
    assert sequence
    for c in sequence:
        output_rules = [r for r in c.plan.rules if r.is_output]
        assert output_rules and all(r.axes == ("batch", "model", None) for r in output_rules)
        matched = [p for p in c.report.scan.output_paths
                   if any(re.fullmatch(r.key, p) for r in output_rules)]
        assert set(matched) == {"ln1/output", "res1/output", "ln2/output", "res2/output"}
        assert c.compiled and not c.report.errors
        assert builds_under(c.plan, long_sequence)
    # The small Llama's weights outweigh its activations: no sequence split there.
    weighty = shardviz.suggest(examples.llama, devices=8, top=10)
    assert weighty and not any("sequence" in c.name for c in weighty)


def test_an_embedding_whose_vocabulary_does_not_divide_is_split_by_hidden_size():
    def odd_vocabulary():
        import keras

        x = keras.Input((8,), dtype="int32")
        h = keras.layers.Embedding(1001, 64, name="embed")(x)
        return keras.Model(x, keras.layers.Dense(64, name="proj")(h))

    found = shardviz.suggest(odd_vocabulary, devices=8, top=10)
    split = [c for c in found if c.plan.mesh_dict["model"] > 1]
    assert split
    for c in split:
        axes = {r.key: r.axes for r in c.plan.rules}
        key = next(k for k in axes if re.fullmatch(k, "embed/embeddings"))
        assert axes[key] == (None, "model")
        assert "hidden size" in c.reasons[key]
        assert builds_under(c.plan, odd_vocabulary)


def small_gemma():
    """keras-hub Gemma: heads-first q/k/v kernels (heads, hidden, head_dim), one kv head,
    a gated feed-forward layer of square kernels, and a ReversibleEmbedding."""
    import keras_hub

    return keras_hub.models.GemmaBackbone(
        vocabulary_size=256, num_layers=2, num_query_heads=4, num_key_value_heads=1,
        hidden_dim=64, intermediate_dim=128, head_dim=16, name="g")


def test_gemma_roles_are_read_from_structure():
    pytest.importorskip("keras_hub")
    from shardviz.model.scan import scan

    role = {r.path: r for r in roles(scan(small_gemma))}
    for block in ("decoder_block_0", "decoder_block_1"):
        # (heads, hidden, head_dim): the heads are dim 0, whatever the hidden size.
        assert (role[f"{block}/attention/query/kernel"].kind,
                role[f"{block}/attention/query/kernel"].dim) == ("heads-in", 0)
        # The gate and the up projection widen the same input; the last narrows back,
        # in every block alike.
        assert [role[f"{block}/{n}/kernel"].kind for n in
                ("ffw_gating", "ffw_gating_2", "ffw_linear")] == ["column", "column", "row"]
    assert role["token_embedding/embeddings"].kind == "embedding"  # a ReversibleEmbedding


def test_gemma_reasons_count_its_heads_and_name_the_gather():
    pytest.importorskip("keras_hub")
    best = next(c for c in shardviz.suggest(small_gemma, devices=8, top=3)
                if c.plan.mesh_dict == {"batch": 2, "model": 4})
    reasons = " | ".join(best.reasons.values())
    assert "each device computes 1 of the 4 heads" in reasons
    assert "looks up (gathers) the tokens whose rows it holds" in reasons
    assert "contract over features" not in best.reasons.get(".*embeddings", "")


def test_a_budget_only_low_ranked_plans_meet_still_finds_one():
    def build():
        return examples.mlp(d_model=512, hidden=2048)

    every = shardviz.suggest(build, devices=8, inputs=(8, 512), top=20, compile_top=20)
    smallest = min(c.bytes_per_device for c in every)
    assert every[0].bytes_per_device > smallest  # the best ranked does not meet it
    found = shardviz.suggest(build, devices=8, inputs=(8, 512), budget_bytes=smallest, top=1,
                             compile_top=1)
    assert len(found) == 1 and found[0].compiled and found[0].bytes_per_device <= smallest


def test_prefer_memory_ranks_by_bytes_and_says_so():
    found = shardviz.suggest(examples.mlp, devices=8, inputs=(8, 16), top=4, prefer="memory")
    sizes = [c.bytes_per_device for c in found]
    assert sizes == sorted(sizes) and found.ranking.startswith("ranked by bytes per device")
    with pytest.raises(ShardvizError, match=r"prefer='speed'\) is not a ranking"):
        shardviz.suggest(examples.mlp, devices=8, prefer="speed")


def test_mixture_of_experts_weights_are_split_by_expert_and_the_router_stays_whole():
    pytest.importorskip("keras_hub")
    import keras_hub

    from shardviz.model.scan import scan
    from shardviz.strategy import tensor_parallel_specs

    def moe():
        return keras_hub.models.QwenMoeBackbone(
            vocabulary_size=256, num_layers=1, num_query_heads=8, num_key_value_heads=2,
            hidden_dim=128, intermediate_dim=256, moe_intermediate_dim=64,
            shared_expert_intermediate_dim=128, num_experts=4, name="moe")

    s = scan(moe)
    role = {r.path: r for r in roles(s)}
    block = "transformer_layer_0/qwen_sparse_moe_block"
    experts = [p for p in role if p.startswith(f"{block}/experts/")]
    assert experts and all((role[p].kind, role[p].dim) == ("experts", 0) for p in experts)
    assert role[f"{block}/sparse_feedforward_gate_dense/kernel"].kind == "router"
    # 4 experts over 4 devices: one each; over 8, each expert is split inside instead.
    assert all(tensor_parallel_specs(s, "model", 4)[p][0] == "model" for p in experts)
    inner = tensor_parallel_specs(s, "model", 8)
    assert all(inner[p][0] is None and "model" in inner[p] for p in experts)


@pytest.mark.parametrize("name, holds", [("GemmaBackbone", True), ("MistralBackbone", True),
                                         ("T5Backbone", False)])
def test_each_reason_of_a_compiled_candidate_is_checked_against_its_program(name, holds):
    """A reason's claim about collectives (one all-reduce per row-parallel layer, none in
    a column-parallel one, a combine for a split embedding) is compared with the
    collectives XLA put in those layers, and shown confirmed or corrected."""
    pytest.importorskip("keras_hub")
    from shardviz import hub
    from shardviz.model.inputs import TokenBatch
    from shardviz.strategy.reason_checks import layer_collectives

    scan = shardviz.scan(hub.builder(name))
    found = shardviz.suggest(scan, devices=8, inputs=TokenBatch(scan.model, 32).at(8),
                             prefer="memory", top=1)
    best = found[0]  # the least memory: split over the model axis
    assert best.compiled and best.plan.mesh_dict["model"] > 1, best
    assert all("(compiled: " in r or "(but the compiled program has" in r
               for r in best.reasons.values()), best.reasons
    counts = layer_collectives(best.report)
    rows = [r for r in best.reasons.values() if r.startswith(("row-parallel", "the output"))]
    assert rows
    for r in rows:
        every = all(dict((k, n) for (k, a), n in counts.get(layer, {}).items() if a == "model")
                    == {"all-reduce": 1} for layer in r.layers)
        assert every == ("(compiled: one all-reduce over `model` in" in r), r
    wrong = [r for r in best.reasons.values() if "(but the compiled program" in r]
    assert (not wrong) == holds, wrong
    if not holds:  # T5: the encoder's last feed-forward output also gathers for the decoder
        assert "transformer_encoder_layer_1/output_projector" in wrong[0]


def test_a_budget_a_shipped_map_meets_is_never_met_with_nothing():
    pytest.importorskip("keras_hub")
    import keras_hub

    from shardviz import hub
    from shardviz.strategy.meshes import keras_mesh

    build = hub.builder("LlamaBackbone")
    mesh = {"batch": 2, "model": 4}
    shipped = shardviz.analyze(build, shardviz.Plan.from_keras(
        keras_hub.models.LlamaBackbone.get_layout_map(keras_mesh(mesh))))
    budget = shipped.variable_bytes_per_device
    found = shardviz.suggest(build, devices=8, budget_bytes=budget, top=3)
    assert found and all(c.bytes_per_device <= budget for c in found)
    every = shardviz.suggest(build, devices=8, top=50)
    assert "shipped map" in {c.name for c in every}


def test_your_own_plan_is_a_candidate_and_a_budget_it_meets_is_never_met_with_nothing():
    mine = Plan({"batch": 2, "model": 4}, {"up/kernel": ("batch", "model"),
                                           "down/kernel": ("model", "batch")})
    build = examples.mlp
    budget = shardviz.analyze(build, mine).variable_bytes_per_device
    found = shardviz.suggest(build, devices=8, budget_bytes=budget, top=50,
                             plans={"mine": mine})
    assert "mine" in {c.name for c in found}
    assert all(c.bytes_per_device <= budget for c in found)
    # Compiled, the budget is XLA's total: the variables and the pass's buffers.
    budget = shardviz.analyze(build, mine, inputs=(8, 16)).totals.bytes_per_device
    compiled = shardviz.suggest(build, devices=8, inputs=(8, 16), budget_bytes=budget, top=2,
                                plans=[mine])
    assert compiled and all(c.compiled and c.bytes_per_device <= budget for c in compiled)


def test_your_own_map_as_a_function_of_a_mesh_is_tried_on_every_shape_it_builds_on():
    import keras

    def layout_map(device_mesh):
        layout_map = keras.distribution.LayoutMap(device_mesh)
        layout_map["up/kernel"] = (None, "model")
        layout_map["down/kernel"] = ("model", None)
        return layout_map

    every = shardviz.suggest(examples.mlp, devices=8, top=50, plans={"megatron": layout_map})
    meshes = {tuple(c.plan.mesh_dict.values()) for c in every if c.name == "megatron"}
    assert len(meshes) >= 2  # the mesh shapes on which 'model' divides the kernels


def test_your_own_plan_on_another_device_count_or_refused_by_keras_is_a_clear_error():
    mine = Plan({"batch": 2, "model": 2}, {"up/kernel": (None, "model")})
    with pytest.raises(ShardvizError, match=r"'mine' is on .*\(4 devices\); suggest plans for 8"):
        shardviz.suggest(examples.mlp, devices=8, plans={"mine": mine})
    bad = Plan({"batch": 2, "model": 4}, {"up/kernel": (None, "model", None)})
    with pytest.raises(ShardvizError, match="Keras would refuse 'your map'"):
        shardviz.suggest(examples.mlp, devices=8, plans=bad)
