"""Grouped convolutions on a mesh that copies the batch: XLA can sum their
kernel gradient over the copies, and the report says so
(shardviz/checks/gradients.py). The truth tests train one step as Keras
trains it, under ModelParallel, and compare the factor with what the
compiled train step's check states."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import shardviz
from shardviz import Plan

SPLIT_CHANNELS = {"pre/kernel": (None, None, None, "model"),
                  "post/kernel": (None, None, "model", None)}
"""The layer before the depthwise convolution splits its output channels over
'model', so the convolution's input channels are split too."""


def depthwise(pre: bool = False):
    def build():
        import keras

        keras.utils.set_random_seed(0)
        inputs = keras.Input((16, 16, 32))
        x = keras.layers.Conv2D(32, 1, name="pre")(inputs) if pre else inputs
        x = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(x)
        x = keras.layers.Conv2D(32, 1, name="post")(x)
        model = keras.Model(inputs, x)
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        return model
    return build


def dense():
    import keras

    inputs = keras.Input((16, 16, 32))
    return keras.Model(inputs, keras.layers.Conv2D(32, 3, name="conv")(inputs))


def wrong_gradient(report):
    problems = report.problems
    return list(problems[problems.kind == "wrong-gradient"].itertuples())


def train_step(build, plan):
    return shardviz.analyze(build, plan, inputs=(8, 16, 16, 32), labels=(8, 16, 16, 32),
                            train_step=True)


def test_without_a_train_step_a_grouped_convolution_on_copies_may_train_wrong():
    (p,) = wrong_gradient(shardviz.analyze(depthwise(), Plan({"batch": 2, "model": 4})))
    assert p.severity == "warning" and p.layer == "dw" and p.path == "dw/kernel"
    assert "may train with a kernel gradient 4 times too large" in p.message
    assert "'model'" in p.message and "train_step=True" in p.hint
    # A batch over every device, and dense convolutions, are right.
    assert not wrong_gradient(shardviz.analyze(depthwise(), Plan({"batch": 8})))
    assert not wrong_gradient(shardviz.analyze(dense, Plan({"batch": 2, "model": 4})))


def update(build, mesh, rules=None):
    """The depthwise kernel's update in one model.fit step: under Keras's
    ModelParallel on ``mesh`` with ``rules``, and on one device."""
    import jax
    import keras

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16, 16, 32)).astype("float32")
    y = rng.standard_normal((8, 16, 16, 32)).astype("float32")

    def step(distribution):
        # Built and trained under the distribution: fit lays out the batch only while
        # a distribution is set.
        with distribution.scope() if distribution else contextlib.nullcontext():
            model = build()
            before = np.asarray(model.get_layer("dw").kernel.value)
            model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        return before - np.asarray(model.get_layer("dw").kernel.value)

    want = step(None)
    devices = keras.distribution.DeviceMesh(mesh, ["batch", "model"], jax.devices()[:8])
    layout_map = keras.distribution.LayoutMap(devices)
    for key, axes in (rules or {}).items():
        layout_map[key] = axes
    got = step(keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch"))
    return float((got * want).sum() / (want * want).sum())


@pytest.mark.parametrize("mesh,copies", [((2, 4), 4), ((4, 2), 2), ((8, 1), 1)])
def test_keras_own_train_step_gives_the_factor_the_compiled_step_states(mesh, copies):
    """No rules: only the batch is laid out. When XLA fixes this, the first
    assertion fails: take the check out."""
    assert update(depthwise(), mesh) == pytest.approx(copies, rel=1e-3)
    warned = wrong_gradient(train_step(depthwise(), Plan(dict(zip(("batch", "model"), mesh)))))
    if copies == 1:
        assert not warned
    else:
        (p,) = warned
        assert f"comes out {copies} times too large" in p.message and p.layer == "dw"


def test_a_convolution_whose_input_channels_are_split_trains_right_and_is_not_flagged():
    assert update(depthwise(pre=True), (2, 4), SPLIT_CHANNELS) == pytest.approx(1, rel=1e-3)
    report = train_step(depthwise(pre=True), Plan({"batch": 2, "model": 4}, SPLIT_CHANNELS))
    assert not wrong_gradient(report)


def op_in_a_custom_layer():
    """A grouped convolution called as an op inside a custom layer (as
    Qwen3.5's gated delta net calls keras.ops.depthwise_conv)."""
    import keras

    class Mixer(keras.layers.Layer):
        def build(self, shape):
            self.kernel = self.add_weight(shape=(3, 3, shape[-1], 1), name="kernel")

        def call(self, x):
            return keras.ops.depthwise_conv(x, self.kernel, padding="same")

    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 16, 32))
    model = keras.Model(inputs, Mixer(name="dw")(inputs))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.get_layer("dw").kernel.assign(
        np.random.default_rng(1).standard_normal((3, 3, 32, 1)).astype("float32") * 0.1)
    return model


def test_a_grouped_convolution_op_inside_a_custom_layer_is_found_in_the_program():
    """No Keras convolution layer: only the compiled program shows the grouped
    convolution, and the factor is the one Keras's step gives."""
    assert update(op_in_a_custom_layer, (2, 4)) == pytest.approx(4, rel=1e-3)
    plan = Plan({"batch": 2, "model": 4})
    assert not wrong_gradient(shardviz.analyze(op_in_a_custom_layer, plan))
    (p,) = wrong_gradient(train_step(op_in_a_custom_layer, plan))
    assert p.layer == "dw" and "comes out 4 times too large" in p.message


def dense_then_depthwise():
    """A Dense pair (which the planner splits over 'model'), then a depthwise
    convolution fed by the second Dense."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 16, 32))
    x = keras.layers.Dense(64, name="up")(inputs)
    x = keras.layers.Dense(32, name="down")(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(x)
    model = keras.Model(inputs, keras.layers.Conv2D(32, 1, name="post")(x))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def test_the_planner_splits_each_grouped_convolutions_input_and_keras_trains_it_right():
    from shardviz.checks.gradients import grouped_inputs
    from shardviz.model.scan import scan
    from shardviz.planner.layout_maps import choose_map

    (g,) = grouped_inputs(scan(dense_then_depthwise))
    assert (g.name, g.feed, g.channel_dim, g.channels) == ("dw", "down/output", -1, 32)
    plan = choose_map(dense_then_depthwise, {"batch": 2, "model": 4}).plan
    rules = {r.key: r.axes for r in plan.rules}
    assert rules["down/output"] == ("batch", None, None, "model")
    # Keras's own train step under the plan's rules: the right update, and the check agrees.
    assert update(dense_then_depthwise, (2, 4), rules) == pytest.approx(1, rel=1e-3)
    assert not wrong_gradient(shardviz.analyze(dense_then_depthwise, plan))
    assert not wrong_gradient(train_step(dense_then_depthwise, plan))
    # Without that rule, or with it on another dim, the convolution may train wrong.
    for key, axes in (("down/output", None), ("down/output", ("batch", None, "model"))):
        other = plan.with_rules([(k, axes if k == key else a) for k, a in rules.items()
                                 if k != key or axes is not None])
        (p,) = wrong_gradient(shardviz.analyze(dense_then_depthwise, other))
        assert "may train with a kernel gradient 4 times too large" in p.message
        assert "/output rule" in p.hint


def test_the_planners_reason_for_the_rule_names_the_convolution_and_the_factor():
    from shardviz.model.scan import scan
    from shardviz.strategy.strategies import candidate_plans

    for _, plan, reasons in candidate_plans(scan(dense_then_depthwise), 8):
        mesh = plan.mesh_dict
        if mesh["batch"] > 1 and mesh["model"] > 1:
            reason = reasons["down/output"]
            assert reason.kind == "grouped-input" and reason.layers == ("dw",)
            assert f"comes out {mesh['model']} times too large" in reason
        else:  # the batch is not copied: no rule is needed
            assert "down/output" not in reasons


def test_a_sequence_parallel_candidate_leaves_a_grouped_convolutions_input_to_its_rule():
    """A norm's output that feeds a grouped Conv1D would be split over the sequence by a
    sequence-parallel candidate; its channels' rule wins, so no output has two rules."""
    import re

    from shardviz.model.scan import scan
    from shardviz.strategy.strategies import candidate_plans

    def build():
        import keras

        inputs = keras.Input((64, 32))
        x = keras.layers.Dense(128, name="up")(inputs)
        x = keras.layers.Dense(32, name="down")(x)
        x = keras.layers.LayerNormalization(name="norm")(x)
        x = keras.layers.Conv1D(32, 3, padding="same", groups=32, name="mix")(x)
        return keras.Model(inputs, keras.layers.Dense(32, name="out")(x))

    candidates = candidate_plans(scan(build), 8)
    assert any("sequence" in label for label, _, _ in candidates)
    for label, plan, _ in candidates:
        mesh = plan.mesh_dict
        keys = [r.key for r in plan.rules if re.fullmatch(r.key, "norm/output")]
        if mesh["batch"] > 1 and mesh["model"] > 1:
            assert [dict((r.key, r.axes) for r in plan.rules)[k] for k in keys] == [
                ("batch", None, "model")], label
        else:
            assert len(keys) <= 1, label


def column_then_reshaped_depthwise():
    """A widening Dense on a sequence, reshaped to an image for a depthwise
    convolution (a Mix-FFN block): the Dense's output feeds the convolution
    through a reshape."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 16, 32))
    x = keras.layers.Reshape((256, 32), name="to_sequence")(inputs)
    x = keras.layers.Dense(64, name="fc1")(x)
    x = keras.layers.Reshape((16, 16, 64), name="to_image")(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(x)
    model = keras.Model(inputs, keras.layers.Conv2D(32, 1, name="post")(x))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def test_a_column_parallel_layer_before_a_reshape_splits_the_convolutions_input_already():
    from shardviz.checks.gradients import grouped_inputs
    from shardviz.model.scan import scan
    from shardviz.planner.layout_maps import choose_map

    (g,) = grouped_inputs(scan(column_then_reshaped_depthwise))
    assert (g.feed, g.rank, g.source, g.channels) == ("to_image/output", 4, "fc1", 64)
    column = {"fc1/kernel": (None, "model"), "fc1/bias": ("model",)}
    # Keras's own train step: the kernel split alone makes the gradient right, and the
    # check (without and with the compiled train step) says nothing.
    assert update(column_then_reshaped_depthwise, (2, 4), column) == pytest.approx(1, rel=1e-3)
    plan = Plan({"batch": 2, "model": 4}, column)
    assert not wrong_gradient(shardviz.analyze(column_then_reshaped_depthwise, plan))
    assert not wrong_gradient(train_step(column_then_reshaped_depthwise, plan))
    assert wrong_gradient(shardviz.analyze(column_then_reshaped_depthwise,
                                           Plan({"batch": 2, "model": 4})))
    # So the planner adds no rule of its own for it.
    rules = {r.key: r.axes for r in
             choose_map(column_then_reshaped_depthwise, {"batch": 2, "model": 4}).plan.rules}
    assert rules["fc1/kernel"] == (None, "model") and "fc1/output" not in rules


def test_a_group_normalization_is_not_a_grouped_convolution():
    """GroupNormalization has a ``groups`` too, and a layer built but never called (SAM 3's
    mask decoder keeps one) has no path: neither is a grouped convolution."""
    import keras

    from shardviz.checks.gradients import grouped_convolutions

    inputs = keras.Input((8, 8, 16))
    x = keras.layers.GroupNormalization(4, name="norm")(inputs)
    x = keras.layers.Conv2D(16, 3, padding="same", groups=4, name="grouped")(x)
    model = keras.Model(inputs, x)
    model.unused = keras.layers.GroupNormalization(4, name="never_called")
    assert [layer.name for layer in grouped_convolutions(model)] == ["grouped"]
    report = shardviz.analyze(model, shardviz.Plan({"batch": 2, "model": 4}))
    (problem,) = report.problems_of("wrong-gradient")
    assert "grouped" in problem.message and "norm" not in problem.message
