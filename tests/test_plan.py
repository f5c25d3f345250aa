"""Plan: a value object that converts exactly to and from Keras."""

import json

import keras
import pytest

import shardviz
from shardviz import Plan, ShardvizError
from shardviz.plan import Rule

kd = keras.distribution


def sample_plan():
    return Plan(
        {"batch": 2, "model": 4},
        {".*dense.*kernel": (None, "model"), ".*dense.*bias": ("model",),
         "d1/output": ("batch", None)},
        batch_axis="batch",
    )


def test_plan_is_an_immutable_value():
    plan = sample_plan()
    assert plan == sample_plan()
    assert hash(plan) == hash(sample_plan())
    with pytest.raises(AttributeError):
        plan.batch_axis = "model"
    edited = plan.with_rule("x", ("model",))
    assert edited != plan and "x" not in plan.rule_keys and edited.rule_keys[-1] == "x"


def test_properties():
    plan = sample_plan()
    assert plan.axis_names == ("batch", "model")
    assert plan.mesh_shape == (2, 4)
    assert plan.mesh_size == 8
    assert plan.axis_size("model") == 4
    assert plan.rules[2].is_output and not plan.rules[0].is_output


def test_batch_axis_defaults_to_first_axis_as_in_model_parallel():
    assert Plan({"data": 4, "model": 2}).batch_axis == "data"


def test_edit_helpers():
    plan = sample_plan()
    assert plan.with_axis("model", 2).mesh_dict == {"batch": 2, "model": 2}
    assert plan.with_axis("seq", 2, index=1).axis_names == ("batch", "seq", "model")
    removed = plan.without_axis("batch")
    assert removed.mesh_dict == {"model": 4} and removed.batch_axis == "model"
    renamed = plan.with_axis_renamed("model", "tensor")
    assert renamed.rules[0].axes == (None, "tensor") and renamed.axis_names == ("batch", "tensor")
    assert plan.with_batch_axis("model").batch_axis == "model"
    assert plan.without_rule(".*dense.*bias").rule_keys == (".*dense.*kernel", "d1/output")
    assert plan.without_rule(0).rule_keys == (".*dense.*bias", "d1/output")
    assert plan.with_rule_moved("d1/output", 0).rule_keys[0] == "d1/output"
    assert plan.with_rule_at(1, axes=(None,)).rules[1] == Rule(".*dense.*bias", (None,))
    assert plan.with_rule(".*dense.*bias", ("batch",)).rules[1].axes == ("batch",)
    assert plan.with_rules({}).rules == ()
    assert plan.with_mesh({"x": 8}).batch_axis == "x"


def test_presets():
    assert Plan.data_parallel(8) == Plan({"batch": 8})
    mp = Plan.model_parallel(4, {".*kernel": (None, "model")})
    assert mp.mesh_dict == {"batch": 1, "model": 4} and mp.batch_axis == "batch"
    assert Plan.hybrid(2, 4).mesh_dict == {"batch": 2, "model": 4}


@pytest.mark.parametrize("bad, words", [
    ({"mesh": {}}, "no axes"),
    ({"mesh": {"batch": 0}}, "size 0"),
    ({"mesh": {"batch": 2.0}}, "integers"),
    ({"mesh": {"": 2}}, "non-empty"),
    ({"mesh": [("a", 2), ("a", 2)]}, "twice"),
    ({"mesh": {"a": 2}, "rules": {"k": "a"}}, "one entry per tensor dimension"),
    ({"mesh": {"a": 2}, "rules": {"k": (("a", "b"), None)}}, "one mesh axis name or None"),
    ({"mesh": {"a": 2}, "rules": {"k": (3,)}}, "mesh axis name or None"),
    ({"mesh": {"a": 2}, "rules": {"": ("a",)}}, "non-empty string"),
])
def test_structural_errors_are_clear(bad, words):
    with pytest.raises(ShardvizError, match=words):
        Plan(bad["mesh"], bad.get("rules", ()))


def test_lists_are_accepted_as_axes_and_stored_as_tuples():
    assert Plan({"a": 2}, {"k": [None, "a"]}).rules[0].axes == (None, "a")


def test_semantic_errors_are_kept_and_reported():
    plan = Plan({"batch": 2, "model": 4},
                [("(", ("model",)), ("k", ("modle",)), ("k", ("batch",)), ("m", ("model", "model"))],
                batch_axis="data")
    assert plan.rule_keys == ("(", "k", "k", "m")  # nothing typed is lost
    kinds = sorted(p.kind for p in plan.check())
    assert kinds == ["batch-axis", "duplicate-axis", "duplicate-rule", "invalid-regex", "unknown-axis"]
    unknown = next(p for p in plan.check() if p.kind == "unknown-axis")
    assert "'modle'" in unknown.message and "['batch', 'model']" in unknown.message
    with pytest.raises(ShardvizError, match="cannot become a Keras distribution"):
        plan.to_keras()


def test_to_keras_builds_a_working_model_parallel():
    dist = sample_plan().to_keras()
    assert isinstance(dist, kd.ModelParallel)
    assert dist.device_mesh.shape == (2, 4)
    assert tuple(dist.device_mesh.axis_names) == ("batch", "model")
    assert dist.batch_dim_name == "batch"
    assert dist.get_tensor_layout("d1/output").axes == ("batch", None)
    with dist.scope():
        layer = keras.layers.Dense(8, name="dense")
        layer.build((None, 16))
    assert tuple(layer.kernel.value.sharding.spec) == (None, "model")


def test_to_keras_on_a_smaller_mesh_uses_the_first_devices():
    dist = Plan({"batch": 2, "model": 2}).to_keras()
    assert list(dist.device_mesh.devices.flatten()) == [f"cpu:{i}" for i in range(4)]


def test_to_keras_needs_enough_devices():
    with pytest.raises(ShardvizError, match="needs 16 devices.*only 8") as info:
        Plan({"batch": 4, "model": 4}).to_keras()
    assert "simulate_devices(16)" in info.value.hint


def test_round_trip_through_keras_is_exact():
    plan = sample_plan()
    assert Plan.from_keras(plan.to_keras()) == plan
    other = Plan({"data": 4, "model": 2}, {"a": ("model",)}, batch_axis="model")
    assert Plan.from_keras(other.to_keras()) == other


def test_from_keras_layout_map_and_data_parallel():
    mesh = kd.DeviceMesh((2, 4), ("batch", "model"), kd.list_devices())
    layout_map = kd.LayoutMap(mesh)
    layout_map["dense.*kernel"] = (None, "model")
    layout_map["dense.*bias"] = ("model",)
    plan = Plan.from_keras(layout_map)
    assert plan == Plan({"batch": 2, "model": 4},
                        {"dense.*kernel": (None, "model"), "dense.*bias": ("model",)})
    dp = kd.DataParallel(devices=kd.list_devices())
    assert Plan.from_keras(dp) == Plan({"batch": 8})
    with pytest.raises(ShardvizError, match="expects a keras.distribution"):
        Plan.from_keras(object())


def test_json_round_trip_and_schema():
    plan = sample_plan()
    data = json.loads(plan.to_json())
    assert data["format"] == "shardviz.plan" and data["version"] == 1
    assert data["rules"][0] == {"key": ".*dense.*kernel", "axes": [None, "model"]}
    assert Plan.from_json(plan.to_json()) == plan
    assert Plan.from_dict(plan.to_dict()) == plan


@pytest.mark.parametrize("text, words", [
    ("{", "not valid JSON"),
    ("[]", "JSON object"),
    ('{"format": "other"}', "not a shardviz plan"),
    ('{"format": "shardviz.plan", "version": 9, "mesh": {"a": 1}}', "version 9"),
    ('{"format": "shardviz.plan", "version": 1, "mesh": {"a": 1}, "evil": 1}', "Unknown plan field"),
    ('{"format": "shardviz.plan", "version": 1, "mesh": [1]}', "'mesh' must be an object"),
    ('{"format": "shardviz.plan", "version": 1, "mesh": {"a": 1}, "rules": [{"key": "k"}]}',
     "exactly 'key' and 'axes'"),
    ('{"format": "shardviz.plan", "version": 1, "mesh": {"a": 1}, "rules": [{"key": "k", "axes": "a"}]}',
     "'axes' must be a list"),
    ('{"format": "shardviz.plan", "version": 1, "mesh": {"a": -1}}', "size -1"),
])
def test_invalid_json_gives_clear_errors(text, words):
    with pytest.raises(ShardvizError, match=words):
        Plan.from_json(text)


def test_loading_never_executes_code():
    code = "__import__('os').system('false')"
    text = json.dumps({"format": "shardviz.plan", "version": 1, "mesh": {"batch": 1},
                       "rules": [{"key": code, "axes": [None]}]})
    plan = Plan.from_json(text)  # the string is only a key
    assert plan.rule_keys == (code,)
    with pytest.raises(ShardvizError, match="character '\\('"):  # and never an axis name
        Plan.from_json(text.replace('"batch"', json.dumps(code)))


def test_to_python_executes_to_the_same_distribution():
    plan = Plan({"batch": 2, "model": 4},
                {".*kernel": (None, "model"), "it's/\\d+/bias": ("model",), "d/output": ("batch",)})
    namespace = {}
    exec(plan.to_python(), namespace)
    dist = namespace["distribution"]
    assert isinstance(dist, kd.ModelParallel)
    assert Plan.from_keras(dist) == plan


def test_simulate_devices_is_a_noop_with_the_same_count():
    assert shardviz.simulate_devices(8) == 8


def test_simulate_devices_refuses_another_count_once_started():
    import jax

    jax.devices()
    with pytest.raises(ShardvizError, match="already started with 8") as info:
        shardviz.simulate_devices(4)
    assert "Restart the kernel" in info.value.hint
    with pytest.raises(ShardvizError, match="positive integer"):
        shardviz.simulate_devices(0)
