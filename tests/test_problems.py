"""Every problem kind is found, and says where and what to change."""

import pytest

import shardviz
from shardviz import Plan, ShardvizError, examples


def kinds(report):
    return sorted({(p.severity, p.kind) for p in report.problem_list})


def only(report, kind):
    found = report.problems_of(kind)
    assert found, f"no {kind} problem in {report.problem_list}"
    return found


def test_unused_rule_on_a_sequential_model_suggests_the_full_path():
    plan = Plan({"batch": 2, "model": 4}, {"d1/kernel": (None, "model")})
    report = shardviz.analyze(examples.sequential_mlp, plan)
    (p,) = only(report, "unused-rule")
    assert p.severity == "warning" and p.rule == "d1/kernel"
    assert "'.*d1/kernel'" in p.hint and "'sequential/d1/kernel'" in p.hint
    assert (report.variables["status"] == "replicated").all()  # silently nothing sharded
    assert "only as a part of the path" in report.explain("sequential/d1/kernel")


def test_unused_output_rule_and_model_output_path():
    plan = Plan({"batch": 8}, {"mlp/output": ("batch", None), "up/output": ("batch", None)})
    report = shardviz.analyze(examples.mlp, plan)
    (p,) = only(report, "unused-rule")
    assert p.rule == "mlp/output"  # fit/predict never look up the model's own output
    assert report.outputs.set_index("path").loc["up/output", "requested_spec"] == ("batch", None)


def test_shadowed_rule():
    plan = Plan({"batch": 2, "model": 4}, {"up/kernel": (None, "model"), "up/ker.*": ("model", None)})
    (p,) = only(shardviz.analyze(examples.mlp, plan), "unused-rule")
    assert p.rule == "up/ker.*" and "exact key" in p.message


def test_conflict_names_the_path_and_both_rules():
    plan = Plan({"batch": 2, "model": 4}, {".*kernel": (None, "model"), "down/.*": ("model",)})
    report = shardviz.analyze(examples.mlp, plan)
    (p,) = only(report, "conflict")
    assert p.severity == "error" and p.path == "down/kernel"
    assert "'.*kernel'" in p.message and "'down/.*'" in p.message
    assert "exact key 'down/kernel'" in p.hint
    assert not report.ok
    row = report.variables.set_index("path").loc["down/kernel"]
    assert row["status"] == "error" and row["match"] == "conflict"


def test_output_conflict_names_the_layer():
    plan = Plan({"batch": 8}, {".*/output": ("batch", None), "up/.*": ("batch", None)})
    report = shardviz.analyze(examples.mlp, plan)
    conflicts = [p for p in report.problems_of("conflict") if p.path == "up/output"]
    assert conflicts and conflicts[0].layer == "up"


def test_indivisible_gives_dim_and_axis_sizes():
    plan = Plan({"batch": 1, "model": 3}, {"up/kernel": (None, "model")})
    (p,) = only(shardviz.analyze(examples.mlp, plan), "indivisible")
    assert "dim 1 has size 64" in p.message and "'model' of size 3" in p.message
    assert p.rule == "up/kernel" and p.path == "up/kernel"


def test_rank_mismatch_both_ways():
    plan = Plan({"model": 8}, {"up/kernel": (None, "model", None), "up/bias": ()})
    report = shardviz.analyze(examples.mlp, plan)
    longer = [p for p in report.problems_of("rank-mismatch") if p.path == "up/kernel"]
    assert longer[0].severity == "error" and "rank 2" in longer[0].message
    plan = Plan({"model": 8}, {"up/kernel": ("model",)})
    shorter = only(shardviz.analyze(examples.mlp, plan), "rank-mismatch")[0]
    assert shorter.severity == "warning" and "silently pads it to P('model', None)" in shorter.message


def test_output_rule_longer_than_the_output():
    plan = Plan({"batch": 8}, {"up/output": ("batch", None, None)})
    (p,) = only(shardviz.analyze(examples.mlp, plan), "rank-mismatch")
    assert p.layer == "up" and p.severity == "error"


def test_unknown_axis_duplicate_axis_invalid_regex_duplicate_rule_batch_axis():
    plan = Plan({"batch": 2, "model": 4},
                [("up/kernel", (None, "modle")), ("down/kernel", ("model", "model")),
                 ("[", ("model",)), ("up/bias", ("model",)), ("up/bias", ("batch",))],
                batch_axis="data")
    report = shardviz.analyze(examples.mlp, plan)
    assert {k for _, k in kinds(report)} >= {
        "unknown-axis", "duplicate-axis", "invalid-regex", "duplicate-rule", "batch-axis"}
    unknown = only(report, "unknown-axis")[0]
    assert unknown.rule == "up/kernel" and "'modle'" in unknown.message
    assert "['batch', 'model']" in unknown.message


def test_large_replicated_variable_with_a_threshold():
    plan = Plan.data_parallel(8)
    report = shardviz.analyze(examples.mlp, plan, replicated_threshold=4096)
    flagged = {p.path for p in report.problems_of("replicated-large")}
    assert flagged == {"up/kernel", "down/kernel"}  # 4 KiB each; biases are smaller
    assert not shardviz.analyze(examples.mlp, plan).problems_of("replicated-large")


def test_mesh_size_differs_from_devices():
    small = shardviz.analyze(examples.mlp, Plan({"batch": 4}))
    assert "uses 4 of the 8 devices" in only(small, "mesh-size")[0].message
    big = shardviz.analyze(examples.mlp, Plan({"batch": 4, "model": 4}))
    p = only(big, "mesh-size")[0]
    assert "needs 16 devices" in p.message and "simulate_devices(16)" in p.hint
    assert big.mesh.abstract
    assert not shardviz.analyze(examples.mlp, Plan({"batch": 8})).problems_of("mesh-size")


def test_problems_frame_columns():
    plan = Plan({"batch": 2, "model": 4}, {"d1/kernel": (None, "model")})
    frame = shardviz.analyze(examples.mlp, plan).problems
    assert list(frame.columns) == ["severity", "kind", "path", "rule", "layer", "message", "hint"]
    assert frame.loc[0, "rule"] == "d1/kernel" and frame.loc[0, "path"] is None


def test_report_lookup_of_a_missing_path_suggests_near_paths():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan())
    with pytest.raises(ShardvizError, match="No variable or output path 'up/kernal'") as info:
        report.variable("up/kernal")
    assert "up/kernel" in info.value.hint


def test_rule_feedback_lives_in_the_report():
    def feedback(rules):
        rules = shardviz.analyze(examples.mlp, Plan({"batch": 2, "model": 4}, rules)).rules
        return list(zip(rules["level"], rules["feedback"]))

    assert feedback([(".*kernel", (None, "model")), ("up/kernel", ("model", None)),
                     ("nothing", ("model",)), (".*bias", ("modle",)),
                     (".*kernel", (None, "batch"))]) == [
        ("ok", "✓ 1 path, rank 2"), ("ok", "✓ 1 path, rank 2"), ("warn", "matches nothing"),
        ("error", "unknown axis 'modle'; mesh axes: ['batch', 'model']"),
        ("error", "same key as rule 0")]
    assert feedback([("up/(bias", ("model",)), (".*kernel", (None, "model"))]) == [
        ("error", "invalid regex: missing ), unterminated subpattern at position 3"),
        ("warn", "matches 2, but an invalid rule makes Keras fail")]
    assert feedback([(".*kernel", (None, "model")), ("down.*", ("model", None))]) == [
        ("error", "conflicts with rule 1 on 'down/kernel'"),
        ("error", "conflicts with rule 0 on 'down/kernel'")]
    assert feedback([(".*kernel", ("model",))]) == [
        ("warn", "✓ 2 paths, rank 2 (rule has 1 entries)")]


def test_ranks_of_uses_keras_matching():
    report = shardviz.analyze(examples.mlp, Plan({"model": 8}))
    assert report.ranks_of(".*kernel") == [2] and report.ranks_of(".*bias") == [1]
    assert report.ranks_of("kernel") == [] and report.ranks_of("(") == []
