"""shardviz.audit: each planted mistake is found, with its compiled cost and
a fix as a rule edit, and a correct map gives no finding."""

import needs
import pytest
from needs import HAVE_HUB

import shardviz
from shardviz import Plan, ShardvizError, examples

hub = pytest.mark.skipif(not HAVE_HUB, reason="keras-hub is not installed")

MEGATRON = examples.megatron_plan(batch=2, model=4)


def small_llama(kv_heads: int):
    import keras_hub

    return keras_hub.models.LlamaBackbone(
        vocabulary_size=256, num_layers=2, num_query_heads=8, hidden_dim=128,
        intermediate_dim=256, num_key_value_heads=kv_heads, name="small_llama")


def mlp():
    return examples.mlp(d_model=512, hidden=2048)


def test_a_correct_map_has_no_finding():
    audit = shardviz.audit(mlp, MEGATRON, inputs=(8, 512))
    assert audit.findings.empty, str(audit)
    assert audit.report.trace_error is None and audit.fixed is None


def test_a_forward_pass_that_fails_is_a_finding_not_a_clean_audit():
    # A batch the batch axis does not divide: nothing compiles, so no split is checked.
    odd = shardviz.audit(mlp, MEGATRON, inputs=(3, 512))
    (row,) = odd.of("not-compiled").to_dict("records")
    assert row["severity"] == "error" and row["mesh"] == "batch=2 x model=4"
    assert "no split was checked against a compiled program" in row["message"]
    assert "batch size 3" in row["message"] and "multiple of 2" in row["fix"]
    assert "not-compiled" in str(odd)


def test_inputs_the_model_does_not_take_are_an_error_not_a_finding_of_the_map():
    with pytest.raises(ShardvizError, match="has size 100 in dim 1, but the model expects 512"):
        shardviz.audit(mlp, MEGATRON, inputs=(8, 100))
    with pytest.raises(ShardvizError, match="a batch of 0 rows"):
        shardviz.audit(mlp, MEGATRON, inputs=(0, 512))
    with pytest.raises(ShardvizError, match="by position, not by name") as e:
        shardviz.audit(mlp, MEGATRON, inputs={"x": (8, 512)})
    assert "without NAME=" in e.value.hint


def test_every_error_and_warning_of_the_report_is_a_finding():
    """Maps Keras refuses (two keys for a path, a duplicate key, a layout
    longer than its variable, a batch axis the mesh lacks) are findings, as
    they are errors of the map's report: an audit is never cleaner."""
    mesh = MEGATRON.mesh_dict
    up, down = (".*up/kernel", (None, "model")), (".*down/kernel", ("model", None))
    for plan, kind in [
        (Plan(mesh, [up, down, (".*/kernel", ("model", None))]), "conflict"),
        (Plan(mesh, [up, (".*up/kernel", ("model", None)), down]), "duplicate-rule"),
        (Plan(mesh, [(".*up.*", (None, "model")), down]), "rank-mismatch"),
        (Plan(mesh, [up, down], batch_axis="data"), "batch-axis"),
    ]:
        audit = shardviz.audit(mlp, plan)
        rows = audit.of(kind)
        expected = [p for p in audit.report.problem_list if p.kind == kind]
        assert rows.message.tolist() == [p.message for p in expected] and expected, str(audit)
        assert set(rows.severity) == {"error"} and all(rows.fix)
    # Compiled: a constraint XLA drops (a 2-row batch split 4 ways) is one too.
    dropped = Plan(mesh, [up, down, ("down/output", ("model", None))])
    audit = shardviz.audit(mlp, dropped, inputs=(2, 512), compare=False)
    assert audit.of("dropped-constraint").severity.tolist() == ["error"], str(audit)


def test_a_variable_made_on_the_first_call_is_named_not_a_crash():
    import keras

    class Lazy(keras.Model):  # marked built, but its layer makes its kernel when called
        def __init__(self):
            super().__init__(name="lazy")
            self.proj = keras.layers.Dense(64, name="proj")

        def call(self, x):
            return self.proj(x)

    def build():
        model = Lazy()
        model.build((None, 32))
        return model

    plan = Plan(MEGATRON.mesh_dict, {".*proj/kernel": (None, "model")})
    with pytest.warns(UserWarning):
        audit = shardviz.audit(build, plan, inputs=(8, 32), compare=False)
    (row,) = audit.of("not-compiled").to_dict("records")
    assert "'proj/kernel', which it did not have" in row["message"]
    assert "model(x)" in row["fix"]


def test_a_class_without_get_layout_map_is_named():
    class NoMap:
        pass

    with pytest.raises(ShardvizError, match="The class NoMap has no get_layout_map"):
        shardviz.audit(mlp, NoMap)

    def raising(device_mesh):
        raise KeyError("x")

    with pytest.raises(ShardvizError, match="KeyError") as e:
        shardviz.audit(mlp, raising, mesh=MEGATRON.mesh_dict)
    assert "Fix the map's code" in e.value.hint


def test_a_renamed_layer_leaves_its_kernel_replicated_and_the_rule_unused():
    renamed = Plan(MEGATRON.mesh_dict, {".*up_proj/kernel": (None, "model"),
                                        ".*down/kernel": ("model", None)})
    audit = shardviz.audit(mlp, renamed, inputs=(8, 512))
    (unused,) = audit.of("unused-rule").to_dict("records")
    assert unused["where"] == ".*up_proj/kernel" and "up" in unused["fix"]
    (replicated,) = audit.of("replicated").to_dict("records")
    assert replicated["where"] == "up/kernel"  # 512 x 2048 float32: 4 MiB on every device
    assert replicated["bytes_per_device"] == 512 * 2048 * 4
    assert "(None, 'model')" in replicated["fix"]


def test_small_variables_left_whole_are_one_finding_when_they_are_most_of_the_model():
    # A map for a small model that splits the embedding only: each kernel is under the
    # 1 MiB floor, together they are most of the model's bytes.
    small = examples.mlp(d_model=64, hidden=256)
    plan = Plan(MEGATRON.mesh_dict, {".*nothing/kernel": (None, "model")})
    audit = shardviz.audit(small, plan)
    (row,) = audit.of("replicated").to_dict("records")
    assert row["where"] == "2 variables" and row["bytes_per_device"] == 2 * 64 * 256 * 4
    assert "'up/kernel': (None, 'model')" in row["fix"] and "replicated_bytes=1" in row["fix"]
    # Below the floor, each is a finding with its own rule.
    each = shardviz.audit(small, plan, replicated_bytes=1).of("replicated")
    assert {"up/kernel", "down/kernel"} <= set(each["where"])


def test_a_split_on_the_wrong_dimension_is_found_by_compiling_the_alternative():
    # Row-parallel first and column-parallel second: each kernel split on the other dim.
    swapped = Plan(MEGATRON.mesh_dict, {".*up/kernel": ("model", None),
                                        ".*down/kernel": (None, "model")})
    audit = shardviz.audit(mlp, swapped, inputs=(8, 512))
    wrong = audit.of("wrong-dimension")
    assert set(wrong["where"]) <= {".*up/kernel", ".*down/kernel"} and len(wrong)
    for row in wrong.to_dict("records"):
        assert row["fixed_collective_bytes"] < row["collective_bytes"]
        assert row["fixed_bytes_per_device"] <= row["bytes_per_device"]
    # The fixed map, compiled: fewer collective bytes than the audited one.
    assert audit.fixed is not None
    assert audit.fixed_report.totals.collective_bytes < audit.report.totals.collective_bytes


def test_a_map_given_as_a_function_of_a_mesh_is_audited_on_every_mesh_shape():
    import keras

    def layout_map(device_mesh):
        layout_map = keras.distribution.LayoutMap(device_mesh)
        layout_map[".*up/kernel"] = (None, "model")
        layout_map[".*down/kernel"] = ("model", None)
        return layout_map

    odd = lambda: examples.mlp(d_model=512, hidden=2052)  # noqa: E731
    audit = shardviz.audit(odd, layout_map, mesh={"batch": 2, "model": 4})
    assert set(audit.of("indivisible")["mesh"]) == {"batch=1 x model=8"}, str(audit)


def test_a_split_that_does_not_divide_is_listed_per_mesh_shape():
    odd = Plan({"batch": 2, "model": 4}, {".*up/kernel": (None, "model"),
                                          ".*down/kernel": ("model", None)})
    audit = shardviz.audit(lambda: examples.mlp(d_model=512, hidden=2052), odd)
    meshes = set(audit.of("indivisible")["mesh"])
    # 2052 divides by 1, 2 and 4, not by 8.
    assert meshes == {"batch=1 x model=8"}, str(audit)


@hub
def test_keras_hub_llama_map_audited_by_class_name():
    audit = shardviz.audit(lambda: small_llama(2), "LlamaBackbone", mesh={"batch": 2, "model": 4},
                           batch=8, seq=32)
    # The map splits the heads dim over 'batch': two kv heads do not divide 4 or 8.
    kv = audit.of("indivisible")
    assert set(kv["mesh"]) == {"batch=4 x model=2", "batch=8 x model=1"}
    assert all("dim 1 has size 2" in m for m in kv["message"])
    assert "wrong-dimension" in set(audit.findings.kind), str(audit)


def test_a_class_without_a_map_is_a_clear_error():
    with pytest.raises(ShardvizError, match="names no class"):
        shardviz.audit(mlp, "NoSuchBackbone")


@hub
def test_gemma_map_with_one_kv_head_does_not_divide_on_any_model_axis():
    import keras_hub

    def mqa_gemma():
        return keras_hub.models.GemmaBackbone(
            vocabulary_size=256, num_layers=2, num_query_heads=8, num_key_value_heads=1,
            hidden_dim=128, intermediate_dim=256, head_dim=16, name="mqa_gemma")

    audit = shardviz.audit(mqa_gemma, "GemmaBackbone", mesh={"batch": 1, "model": 8})
    meshes = set(audit.of("indivisible")["mesh"])
    # One kv head: every mesh whose model axis has more than one device.
    assert meshes == {"batch=1 x model=8", "batch=2 x model=4", "batch=4 x model=2"}, str(audit)


@hub
def test_the_command_line_audits_a_keras_hub_class_map(tmp_path):
    import subprocess
    import sys

    (tmp_path / "hub_models.py").write_text(
        "import keras_hub\n\n"
        "def small():\n"
        "    return keras_hub.models.LlamaBackbone(vocabulary_size=256, num_layers=2,\n"
        "        num_query_heads=8, hidden_dim=128, intermediate_dim=256, num_key_value_heads=2)\n")
    out = subprocess.run(
        [sys.executable, "-m", "shardviz", "audit", "hub_models:small", "--layout-map",
         "LlamaBackbone", "--mesh", "batch=2,model=4", "--no-compare", "-q"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "indivisible [batch=4 x model=2]" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "shardviz", "audit", "hub_models:small"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert bad.returncode == 2 and "--layout-map CLASS" in bad.stderr


@needs.tpu
def test_an_audit_for_a_target_compiles_for_it():
    audit = shardviz.audit(mlp, MEGATRON, inputs=(8, 512), target="v5e:2x4", compare=False)
    assert audit.report.target.label == "v5e:2x4" and audit.report.totals.fits is True


@hub
def test_a_class_map_on_a_model_of_another_class_is_a_clear_error():
    with pytest.raises(ShardvizError, match="not a LlamaBackbone") as e:
        shardviz.audit(mlp, "LlamaBackbone")
    assert "LlamaBackbone.get_layout_map(device_mesh)" in e.value.hint


@hub
def test_a_class_map_on_a_mesh_with_other_axis_names_says_which_names_it_takes():
    with pytest.raises(ShardvizError, match="axes named 'batch' and 'model'") as e:
        shardviz.audit(lambda: small_llama(2), "LlamaBackbone", mesh={"data": 2, "model": 4})
    assert "mesh={'batch': 2, 'model': 4}" in e.value.hint


def test_a_map_audit_cannot_take_says_what_it_takes():
    with pytest.raises(ShardvizError, match="names no mesh") as e:
        shardviz.audit(mlp, {".*up/kernel": (None, "model")})
    assert "shardviz.Plan({'batch': 2, 'model': 4}, rules)" in e.value.hint
    for wrong in (None, 42):
        with pytest.raises(ShardvizError, match="audit takes the layout map") as e:
            shardviz.audit(mlp, wrong)
        assert "Keras LayoutMap" in e.value.hint


def test_a_layout_map_with_an_invalid_regex_names_the_rule():
    import keras

    layout_map = keras.distribution.LayoutMap(keras.distribution.DeviceMesh(
        (2, 4), ("batch", "model"), [f"cpu:{i}" for i in range(8)]))
    layout_map["up/(kernel"] = (None, "model")
    with pytest.raises(ShardvizError, match=r"up/\(kernel"):
        shardviz.audit(mlp, layout_map)


@hub
def test_ranking_compiles_give_the_collectives_and_bytes_of_a_default_compile():
    from shardviz.analysis import analyze, ranking_compiles
    from shardviz.trace import compile as compile_module

    scan = shardviz.scan(lambda: small_llama(4))
    swapped = {".*(query|key|value)/kernel": (None, "model", None),
               ".*attention_output/kernel": ("model", None, None),
               ".*feedforward_gate_dense/kernel": ("model", None)}
    for rules in (swapped, {".*(query|key|value)/kernel": ("model", None, None)}):
        plan = Plan({"batch": 2, "model": 4}, rules)
        default = analyze(scan, plan, batch=8, seq=32)
        with ranking_compiles():
            assert compile_module._compiler_options(None) == compile_module.RANKING_OPTIONS
            ranked = analyze(scan, plan, batch=8, seq=32)
        assert default.trace_error is None and len(default.collectives)
        assert ranked.totals.collective_bytes == default.totals.collective_bytes
        assert ranked.totals.bytes_per_device == default.totals.bytes_per_device
        columns = ["kind", "layer", "axes", "bytes_per_device", "op_name"]
        assert ranked.collectives[columns].equals(default.collectives[columns])


@hub
def test_expert_weights_the_map_leaves_whole_are_found():
    from shardviz import hub as hb

    audit = shardviz.audit(hb.builder("QwenMoeBackbone"), "QwenMoeBackbone",
                           mesh={"batch": 2, "model": 4}, replicated_bytes=0)
    experts = audit.of("experts-replicated")
    # Two reduced layers, each with its experts' gate-up and down weights: 12 experts each.
    assert len(experts) >= 2, str(audit)
    assert all("expert" in w or "moe" in w for w in experts["where"]), list(experts["where"])
    assert all(row["bytes_per_device"] > 0 for row in experts.to_dict("records"))
