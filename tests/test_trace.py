"""Forward passes on 8 simulated devices: activations, collectives, memory."""

import jax
import keras
import numpy as np
import pytest

import shardviz
from shardviz import Plan, ShardvizError, examples

X8 = (8, 16)


def kinds_and_axes(report):
    return [(c.kind, c.axes) for c in report.trace.collectives]


def chain():
    """Dense, two elementwise layers, Dense: a place to reshard activations."""
    x = keras.Input((16,), name="x")
    h = keras.layers.Dense(64, name="up")(x)
    h = keras.layers.Activation("relu", name="act")(h)
    h = keras.layers.Activation("tanh", name="act2")(h)
    return keras.Model(x, keras.layers.Dense(16, name="down")(h), name="chain")


def test_megatron_mlp_has_exactly_one_all_reduce_over_model():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=X8)
    assert report.trace_error is None and report.trace.mode == "abstract"
    assert kinds_and_axes(report) == [("all-reduce", ("model",))]
    (c,) = report.trace.collectives
    assert c.layer == "down" and c.pass_ == "forward" and c.complete
    assert c.bytes_per_device == 4 * 16 * 4  # the (batch/2, d_model) partial sums, f32
    acts = report.activations.set_index("path")
    assert acts.loc["up/output", "actual_spec"] == ("batch", "model")  # column parallel
    assert acts.loc["down/output", "actual_spec"] == ("batch", None)  # row parallel, reduced


def test_data_parallel_forward_has_no_collectives_and_train_step_all_reduces_grads():
    plan = Plan.data_parallel(8)
    forward = shardviz.analyze(examples.mlp, plan, inputs=X8)
    assert forward.trace.collectives == []
    step = shardviz.analyze(examples.mlp, plan, inputs=X8, train_step=True)
    assert step.trace.collectives, "gradients must be all-reduced"
    assert {(c.kind, c.axes) for c in step.trace.collectives} == {("all-reduce", ("batch",))}
    grads = sum(c.bytes_per_device for c in step.trace.collectives)
    params = sum(v.geometry.bytes for v in step.variable_layouts)
    assert grads >= params  # every gradient crosses the batch axis (plus the loss)
    assert {c.pass_ for c in step.trace.collectives} == {"backward"}
    assert step.trace.forward_collectives == []


def test_optimizer_slots_take_the_layout_of_their_variable():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=X8, train_step=True)
    slots = report.optimizer_variables.set_index("path")
    variables = report.variables.set_index("path")
    mirrored = slots[slots.reference.notna()]
    assert len(mirrored) == 2 * len(variables)  # Adam: momentum and velocity
    for path, row in mirrored.iterrows():
        assert row["spec"] == variables.loc[row["reference"], "spec"], path
        assert row["shard_shape"] == variables.loc[row["reference"], "shard_shape"], path
    iteration = [p for p in slots.index if p.endswith("/iteration")]
    assert len(iteration) == 1 and slots.loc[iteration[0], "spec"] == ()


def test_megatron_train_step_shows_gradient_collectives_over_both_axes():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=X8, train_step=True)
    by_pass = {(c.pass_, c.kind, c.axes) for c in report.trace.collectives}
    assert ("forward", "all-reduce", ("model",)) in by_pass
    assert any(p == "backward" and axes == ("batch",) for p, _, axes in by_pass)


@pytest.mark.parametrize("mesh, first, second, axes", [
    ({"model": 8}, ("model", None), (None, "model"), ("model",)),
    ({"batch": 2, "model": 4}, ("batch", "model"), ("model", "batch"), None),
])
def test_reshard_between_layouts_is_an_all_to_all(mesh, first, second, axes):
    plan = Plan(mesh, {"act/output": first, "act2/output": second})
    report = shardviz.analyze(chain, plan, inputs=X8)
    acts = report.activations.set_index("path")
    assert acts.loc["act/output", "actual_spec"] == first
    assert acts.loc["act2/output", "actual_spec"] == second
    all_to_all = [c for c in report.trace.collectives if c.kind == "all-to-all"]
    assert all_to_all and all(c.layer == "act2" for c in all_to_all)
    if axes:
        assert all_to_all[0].axes == axes and all_to_all[0].complete


def test_requested_output_layouts_appear_as_actual():
    plan = Plan({"batch": 2, "model": 4},
                {"up/output": ("batch", "model"), "down/output": (None, "model")})
    report = shardviz.analyze(examples.mlp, plan, inputs=X8)
    acts = report.activations.set_index("path")
    for path in ("up/output", "down/output"):
        assert acts.loc[path, "requested_spec"] == acts.loc[path, "actual_spec"]
        assert acts.loc[path, "honored"] is True
    assert not report.problems_of("dropped-constraint")


def test_uneven_output_layout_is_flagged():
    inner = Plan({"batch": 2, "model": 4}, {"act/output": ("model", None)})
    report = shardviz.analyze(chain, inner, inputs=(6, 16))
    (p,) = report.problems_of("indivisible")
    assert p.layer == "act" and p.rule == "act/output" and "size 6" in p.message
    assert "pads the shards to (2, 64)" in p.message
    acts = report.activations.set_index("path")
    assert acts.loc["act/output", "padded"] and not acts.loc["up/output", "requested_spec"]
    with pytest.raises(ShardvizError, match="split unevenly: dim 0 of size 6 over axis 'model'"):
        report.show("act/output")  # JAX has no index ranges for it; say so, do not guess
    last = Plan({"batch": 2, "model": 4}, {"down/output": ("model", None)})
    report = shardviz.analyze(chain, last, inputs=(6, 16))
    (p,) = report.problems_of("dropped-constraint")
    assert p.layer == "down" and "returns it as P()" in p.message
    assert report.activations.set_index("path").loc["down/output", "honored"] is False


def test_eager_keras_raises_where_jit_drops():
    plan = Plan({"batch": 2, "model": 4}, {"down/output": ("model", None)})
    with plan.to_keras().scope():
        model = chain()
        with pytest.raises(ValueError, match="should evenly divide"):
            model(np.zeros((6, 16), "float32"))


def test_small_transformer_block_layouts_and_collectives_by_hand():
    report = shardviz.analyze(examples.transformer_block, examples.transformer_plan(),
                              inputs=(8, 16, 64))
    acts = report.activations.set_index("path")
    heads_split = ("batch", None, "model", None)
    for proj in ("query", "key", "value"):
        assert acts.loc[f"attn/{proj}/output", "actual_spec"] == heads_split
    assert acts.loc["attn/attention_output/output", "actual_spec"] == ("batch", None, None)
    assert acts.loc["up/output", "actual_spec"] == ("batch", None, "model")
    assert acts.loc["down/output", "actual_spec"] == ("batch", None, None)
    assert acts.loc["ln1/output", "actual_spec"] == ("batch", None, None)
    # Megatron: one all-reduce after the attention output projection, one after the MLP.
    assert [(c.kind, c.axes, c.layer) for c in report.trace.collectives] == [
        ("all-reduce", ("model",), "attn/attention_output"),
        ("all-reduce", ("model",), "down"),
    ]
    one = 4 * 16 * 64 * 4  # (batch/2, seq, d_model) f32 per device
    assert [c.bytes_per_device for c in report.trace.collectives] == [one, one]


def test_abstract_and_concrete_modes_agree_on_every_spec():
    plan = examples.transformer_plan()
    x = np.random.default_rng(0).standard_normal((8, 16, 64)).astype("float32")
    model = examples.transformer_block()
    abstract = shardviz.analyze(model, plan, inputs=x, mode="abstract")
    concrete = shardviz.analyze(model, plan, inputs=x, mode="concrete")
    assert abstract.trace.mode == "abstract" and concrete.trace.mode == "concrete"
    cols = ["path", "shape", "actual_spec", "shard_shape", "honored"]
    assert abstract.activations[cols].equals(concrete.activations[cols])
    assert kinds_and_axes(abstract) == kinds_and_axes(concrete)
    for path, value in concrete.values.items():
        row = concrete.variables.set_index("path").loc[path]
        spec = tuple(value.sharding.spec) + (None,) * (value.ndim - len(value.sharding.spec))
        assert spec == row["spec"], path
        assert value.addressable_shards[0].data.shape == row["shard_shape"], path


def test_concrete_mode_keeps_real_arrays_for_jax_to_draw(capsys):
    model = examples.mlp()
    x = np.ones(X8, "float32")
    report = shardviz.analyze(model, examples.megatron_plan(), inputs=x)
    assert report.trace.mode == "concrete"
    kernel = report.values["up/kernel"]
    assert isinstance(kernel, jax.Array) and kernel.sharding.spec == jax.sharding.PartitionSpec(None, "model")
    expected = model.predict(x, verbose=0)
    np.testing.assert_allclose(np.asarray(report.output_values), expected, rtol=1e-5, atol=1e-5)
    jax.debug.visualize_array_sharding(kernel)
    drawn = capsys.readouterr().out
    assert "CPU" in drawn and "0,4" in drawn and "1,5" in drawn  # batch replicas share a tile


def test_abstract_mode_allocates_nothing_and_leaks_no_tracers():
    scan = shardviz.scan(examples.llama)
    shardviz.analyze(scan, examples.llama_plan(), inputs=(8, 32), train_step=True)
    for v in scan.model.variables:
        assert v._value is None, v.path
    model = examples.mlp()
    before = [np.asarray(v.value).copy() for v in model.variables]
    shardviz.analyze(model, examples.megatron_plan(), inputs=X8)
    for v, old in zip(model.variables, before):
        assert isinstance(v.value, jax.Array) and np.array_equal(np.asarray(v.value), old)


def test_nested_layers_in_call_order_with_every_call_of_a_shared_layer():
    def shared():
        x = keras.Input((16,), name="x")
        dense = keras.layers.Dense(16, name="shared")
        return keras.Model(x, dense(dense(x)), name="twice")

    report = shardviz.analyze(shared, Plan.data_parallel(8), inputs=X8)
    acts = report.activations
    assert acts["path"].tolist() == ["shared/output"] * 2 and acts["call"].tolist() == [0, 1]
    stack = shardviz.analyze(examples.subclassed_stack, examples.megatron_plan(), inputs=X8)
    assert stack.activations["path"].tolist()[:3] == [
        "my_model/block_0/up/output", "my_model/block_0/down/output", "my_model/block_0/output"]
    assert {c.layer for c in stack.trace.collectives} == {
        "my_model/block_0/down", "my_model/block_1/down"}


def test_memory_arguments_equal_variable_and_input_shards():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=X8)
    mem = report.trace.memory
    input_shard = (8 // 2) * 16 * 4
    assert mem["argument_bytes"] == report.variable_bytes_per_device + input_shard
    assert mem["flops"] and mem["flops"] > 0
    frame = report.memory
    assert len(frame) == 8 and (frame["argument_bytes"] == mem["argument_bytes"]).all()


def test_multi_input_models_take_lists_and_dicts():
    def two():
        a = keras.Input((8,), name="a")
        b = keras.Input((4,), name="b")
        h = keras.layers.Concatenate(name="cat")([a, b])
        return keras.Model({"a": a, "b": b}, keras.layers.Dense(2, name="out")(h), name="two")

    plan = Plan.data_parallel(8)
    as_dict = shardviz.analyze(two, plan, inputs={"a": (8, 8), "b": (8, 4)})
    assert as_dict.trace_error is None, as_dict.trace_error
    assert as_dict.activations["path"].tolist() == ["cat/output", "out/output"]
    specs = [jax.ShapeDtypeStruct((8, 8), "float32"), jax.ShapeDtypeStruct((8, 4), "float32")]
    as_list = shardviz.analyze(two, plan, inputs={"a": specs[0], "b": specs[1]})
    assert as_list.activations["actual_spec"].tolist() == as_dict.activations["actual_spec"].tolist()


@pytest.mark.parametrize("inputs, words", [
    ((8, 16, 3), "rank 3"),
    ((8, 12), "size 12 in dim 1"),
    ((6, 16), "batch size 6"),
    ([(8, 16), (8, 16)], "takes 1 input"),
])
def test_bad_inputs_give_clear_errors_and_keep_the_variables(inputs, words):
    plan = Plan({"batch": 4, "model": 2}, {".*kernel": (None, "model")})
    report = shardviz.analyze(examples.mlp, plan, inputs=inputs)
    assert report.trace is None and words in report.trace_error.message
    assert report.trace_error.hint
    (p,) = report.problems_of("trace-failed")
    assert p.severity == "error" and words in p.message
    assert len(report.variables) == 4 and report.variables["status"].eq("sharded").sum() == 2


@pytest.mark.parametrize("dtype", ["int8", "bool", "int32", "bfloat16"])
@pytest.mark.parametrize("train_step", [False, True])
def test_inputs_of_another_dtype_are_cast_by_the_model_as_keras_does(dtype, train_step):
    """A functional model casts its inputs to the dtypes it declares; the
    program takes the data as given (int8 data moves as int8)."""
    plan = Plan({"batch": 4, "model": 2}, {".*kernel": (None, "model")})
    report = shardviz.analyze(examples.mlp, plan, inputs=jax.ShapeDtypeStruct((8, 16), dtype),
                              train_step=train_step)
    assert report.trace_error is None, report.trace_error
    (given,) = jax.tree_util.tree_leaves(report.trace.input_specs)
    assert str(given.dtype) == dtype
    assert report.memory_parts["inputs"] >= 8 * 16 * jax.numpy.dtype(dtype).itemsize // 4


def test_too_few_devices_says_how_many_and_how_to_simulate():
    plan = Plan({"batch": 4, "model": 4})
    report = shardviz.analyze(examples.mlp, plan, inputs=X8)
    assert "needs 16 devices" in report.trace_error.message
    assert "simulate_devices(16)" in report.trace_error.hint
    assert len(report.variables) == 4


def test_a_forward_pass_that_raises_names_the_layer():
    report = shardviz.analyze(_broken_model(), Plan.data_parallel(8), inputs=X8)
    assert report.trace is None
    message = report.trace_error.message
    assert "always fails" in message and "in layer 'broken'" in message
    assert report.trace_error.layer == "broken"
    assert report.problems_of("trace-failed")[0].layer == "broken"
    assert len(report.variables) == 2


def _broken_model():
    """A model whose 'broken' layer builds fine but raises when run."""

    class Broken(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.fail = False

        def call(self, x):
            if self.fail:
                raise RuntimeError("this layer always fails")
            return x

    x = keras.Input((16,), name="x")
    h = keras.layers.Dense(16, name="fine")(x)
    broken = Broken(name="broken")
    model = keras.Model(x, broken(h), name="m")
    broken.fail = True
    return model


def test_output_rule_conflict_fails_the_pass_naming_the_layer():
    plan = Plan({"batch": 8}, {"up/.*": ("batch", None), ".*/output": ("batch", None)})
    report = shardviz.analyze(examples.mlp, plan, inputs=X8)
    assert report.trace is None
    assert report.problems_of("conflict")
    assert "Keras would refuse this plan" in report.trace_error.message


def test_report_shows_the_trace_in_text_and_html():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=X8)
    text = str(report)
    assert "Activations (abstract forward pass)" in text and "all-reduce" in text
    html = report._repr_html_()
    assert "Collectives (1)" in html and "up/output" in html


def test_an_optimizer_slot_a_rule_cannot_lay_out_is_an_error_as_in_keras():
    # Adam's step counter is a scalar; a rule giving it an axis makes Keras
    # fail while it creates the optimizer (an IndexError deep in JAX).
    plan = Plan({"batch": 2, "model": 4}, {".*kernel": (None, "model"), ".*iteration": ("model",)})
    with plan.to_keras().scope(), pytest.raises(Exception):  # noqa: B017 (Keras's own failure)
        keras.optimizers.Adam()
    report = shardviz.analyze(examples.mlp, plan, inputs=(8, 16), train_step=True)
    (p,) = [p for p in report.problem_list if (p.path or "").endswith("/iteration")]
    assert (p.severity, p.kind, p.rule) == ("error", "rank-mismatch", ".*iteration")
    assert f"Optimizer slot {p.path!r}" in p.message and "counted it replicated" in p.message
    # The rule matches no model path, but it does lay out the slot: not unused.
    assert not report.problems_of("unused-rule")
    slot = report.optimizer_variables.set_index("path").loc[p.path]
    assert slot["spec"] == () and slot["reference"] is None


def test_variables_and_layouts_are_joined_by_path_not_position():
    # A model whose variable order differs from the scan's order still gets
    # each variable's own layout (the trace keys shardings by path).
    plan = Plan({"batch": 2, "model": 4}, {".*up/kernel": (None, "model"),
                                           ".*down/kernel": ("model", None)})
    report = shardviz.analyze(examples.mlp, plan, inputs=(8, 16), mode="concrete")
    for path, value in report.values.items():
        expected = report.variable(path).geometry.sharding
        assert value.sharding.is_equivalent_to(expected, value.ndim), path


class _Table(keras.layers.Layer):
    """Returns its own (non-trainable) variable, as SAM 3's rotary tables do."""

    def build(self, input_shape):
        self.table = self.add_weight(name="table", shape=(16,), trainable=False,
                                     initializer="ones")

    def call(self, inputs):
        return self.table

    def compute_output_shape(self, input_shape):
        return (16,)


class _Scale(keras.layers.Layer):
    def call(self, inputs, table):
        return inputs * table


def test_a_layer_that_returns_its_own_variable_is_traced():
    def build():
        x = keras.Input((16,), name="x")
        scaled = _Scale(name="scale")(x, _Table(name="table")(x))
        return keras.Model(x, keras.layers.Dense(16, name="out")(scaled))

    for train_step in (False, True):
        report = shardviz.analyze(build, Plan({"batch": 8}), inputs=X8, train_step=train_step,
                                  labels=X8 if train_step else None)
        assert report.trace_error is None, report.trace_error
        paths = set(report.activations.path)
        assert {"scale/output", "out/output"} <= paths and "table/output" not in paths
