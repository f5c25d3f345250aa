"""The train step is the one model.fit runs: the model's own train_step,
jitted as Keras's trainer jits it. Truth comes from Keras itself: a model
trained with ``fit`` under the same distribution, whose own jitted step
(``model.train_function``) is lowered and compiled here, outside shardviz's
capture, on the same state."""

import jax
import numpy as np
import pytest
from keras_programs import fit_and_compile

import shardviz
from shardviz import examples
from shardviz.trace import hlo
from shardviz.trace.train_step import DEFAULT_LOSS

shardviz.simulate_devices(8)
import keras  # noqa: E402

X = np.linspace(-1, 1, 8 * 16, dtype="float32").reshape(8, 16)


def _compiled_mlp(loss="mse", metrics=None):
    m = examples.mlp()
    m.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss, metrics=metrics)
    return m


def _keras_own_program(plan, build, x, y):
    """The program model.fit compiles, under the plan's distribution."""
    dist = plan.to_keras()
    with dist.scope():
        return fit_and_compile(dist, build(), x, y)


@pytest.mark.parametrize("plan", [examples.megatron_plan(), shardviz.Plan({"batch": 8}, {})],
                         ids=["megatron", "data-parallel"])
def test_memory_and_collectives_are_those_of_the_program_fit_runs(plan):
    own = _keras_own_program(plan, _compiled_mlp, X, X)
    report = shardviz.analyze(_compiled_mlp, plan, inputs=X.shape, labels=X.shape,
                              train_step=True)
    assert report.trace_error is None
    theirs = hlo.memory(own)
    row = report.memory.iloc[0]
    for key in ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes"):
        assert row[key] == theirs[key], key
    # Donated: every variable and slot is aliased into the new state.
    assert row["alias_bytes"] > 0
    assert row["total_bytes"] == (theirs["argument_bytes"] + theirs["output_bytes"]
                                  + theirs["temp_bytes"] - theirs["alias_bytes"])
    from shardviz.trace.hlo import collectives

    mesh = report.mesh
    expected = sorted((c.kind, c.bytes_per_device) for c in collectives(
        own.as_text(), mesh.axis_names, mesh.shape))
    got = sorted(zip(report.collectives.kind, report.collectives.bytes_per_device))
    assert got == expected


def test_uses_the_compiled_loss_and_metrics_and_names_them():
    build = lambda: _compiled_mlp(loss="mae", metrics=["mse"])  # noqa: E731
    own = _keras_own_program(examples.megatron_plan(), build, X, X)
    report = shardviz.analyze(build, examples.megatron_plan(), inputs=X.shape, labels=X.shape,
                              train_step=True)
    setup = report.trace.step_setup
    assert (setup.loss, setup.default_loss, setup.optimizer) == ("mae", False, "Adam")
    assert report.memory.iloc[0]["temp_bytes"] == hlo.memory(own)["temp_bytes"]


def test_a_model_never_compiled_gets_the_stated_default_loss():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=X.shape,
                              train_step=True)
    setup = report.trace.step_setup
    assert setup.loss == DEFAULT_LOSS and setup.default_loss
    assert "not compiled" in setup.describe() and "zeros" in setup.describe()
    assert "not compiled" in str(report)


def test_a_user_override_of_train_step_is_the_step_compiled():
    calls = []

    class Custom(keras.Model):
        def train_step(self, state, data):
            calls.append(True)
            return super().train_step(state, data)

    def build():
        x = keras.Input((16,))
        m = Custom(x, keras.layers.Dense(16, name="d")(x))
        m.compile(optimizer="sgd", loss="mse")
        return m

    report = shardviz.analyze(build, shardviz.Plan({"batch": 8}, {}), inputs=X.shape,
                              labels=X.shape, train_step=True)
    assert report.trace_error is None and calls
    assert report.trace.step_setup.optimizer == "SGD"


def test_dict_inputs_and_sparse_labels():
    def build():
        ids = keras.Input((12,), dtype="int32", name="token_ids")
        mask = keras.Input((12,), dtype="int32", name="padding_mask")
        h = keras.layers.Embedding(50, 8, name="embed")(ids)
        h = h * keras.ops.expand_dims(keras.ops.cast(mask, h.dtype), -1)
        logits = keras.layers.Dense(50, name="head")(h)
        m = keras.Model({"token_ids": ids, "padding_mask": mask}, logits)
        m.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return m

    inputs = {"token_ids": jax.ShapeDtypeStruct((8, 12), "int32"),
              "padding_mask": jax.ShapeDtypeStruct((8, 12), "int32")}
    report = shardviz.analyze(build, shardviz.Plan({"batch": 8}, {}), inputs=inputs,
                              labels=jax.ShapeDtypeStruct((8, 12), "int32"), train_step=True)
    assert report.trace_error is None, report.trace_error
    assert report.trace.step_setup.loss == "sparse_categorical_crossentropy"


def test_the_users_model_is_left_as_it_was():
    m = examples.mlp()
    m(X)
    shardviz.analyze(m, examples.megatron_plan(), inputs=X, train_step=True)
    assert not m.compiled and getattr(m, "optimizer", None) is None
    m.compile(optimizer="adam", loss="mse")
    before = len(m.optimizer.variables)
    report = shardviz.analyze(m, examples.megatron_plan(), inputs=X, labels=X, train_step=True)
    assert report.pass_name == "concrete train step"
    assert len(m.optimizer.variables) == before and not m.optimizer.built
    # the report's arrays survived the donated step
    assert all(not v.is_deleted() for v in report.values.values())
    m.fit(X, X, epochs=1, verbose=0)  # still trains


def test_labels_the_loss_refuses_say_so():
    report = shardviz.analyze(_compiled_mlp, examples.megatron_plan(), inputs=X.shape,
                              labels=(8, 3), train_step=True)
    problem = report.problems_of("trace-failed")[0]
    assert "labels (8, 3)" in problem.message and "mse" in problem.message
    assert "labels=" in problem.hint


def test_a_compiled_loss_without_labels_asks_for_them():
    report = shardviz.analyze(_compiled_mlp, examples.megatron_plan(), inputs=X.shape,
                              train_step=True)
    problem = report.problems_of("trace-failed")[0]
    assert "needs labels" in problem.message and "mse" in problem.message
    assert "labels=" in problem.hint


def test_labels_whose_batch_does_not_divide_name_the_labels():
    report = shardviz.analyze(_compiled_mlp, examples.megatron_plan(), inputs=X.shape,
                              labels=(3, 16), train_step=True)
    assert "Label 0" in report.problems_of("trace-failed")[0].message
