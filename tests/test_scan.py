"""scan() finds the paths Keras itself uses, without allocating."""

import re

import keras
import numpy as np
import pytest

import shardviz
from shardviz import ShardvizError, examples

kd = keras.distribution


class RecordingModelParallel(kd.ModelParallel):
    """Records every output lookup Keras makes."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.lookups = []

    def get_tensor_layout(self, path):
        self.lookups.append(path)
        return super().get_tensor_layout(path)


def keras_forward_lookups(builder, x):
    """The output paths Keras looks up in predict(), on a real model."""
    mesh = kd.DeviceMesh((8,), ("batch",), kd.list_devices())
    dist = RecordingModelParallel(layout_map=kd.LayoutMap(mesh))
    with dist.scope():
        model = builder()
        dist.lookups.clear()
        model.predict(x, verbose=0, batch_size=x.shape[0])
    return list(dict.fromkeys(dist.lookups))


CASES = {
    "functional": (examples.mlp, np.zeros((8, 16), "float32")),
    "sequential": (examples.sequential_mlp, np.zeros((8, 16), "float32")),
    "subclassed": (examples.subclassed_stack, np.zeros((8, 16), "float32")),
    "nested": (examples.nested, np.zeros((8, 16), "float32")),
    "transformer": (examples.transformer_block, np.zeros((8, 16, 64), "float32")),
    "llama": (examples.llama, np.zeros((8, 8), "int32")),
}


@pytest.mark.parametrize("name", list(CASES))
def test_output_paths_equal_keras_lookups_in_predict(name):
    builder, x = CASES[name]
    scan = shardviz.scan(builder)
    assert scan.outputs_source == "forward"
    assert list(scan.output_paths) == keras_forward_lookups(builder, x)


@pytest.mark.parametrize("name", list(CASES))
def test_variable_paths_equal_keras(name):
    builder, _ = CASES[name]
    scan = shardviz.scan(builder)
    model = builder()
    assert scan.variable_paths == tuple(v.path for v in model.variables)
    assert [v.shape for v in scan.variables] == [tuple(v.shape) for v in model.variables]
    assert [v.dtype for v in scan.variables] == [v.dtype for v in model.variables]
    assert [v.trainable for v in scan.variables] == [v.trainable for v in model.variables]


def test_path_styles_differ_by_model_kind():
    assert shardviz.scan(examples.mlp).variable_paths[0] == "up/kernel"
    assert shardviz.scan(examples.sequential_mlp).variable_paths[0] == "sequential/d1/kernel"
    assert shardviz.scan(examples.subclassed_stack).variable_paths[0] == "my_model/block_0/up/kernel"
    assert shardviz.scan(examples.nested).output_paths == (
        "up/output", "down/output", "inner/output", "head/output")
    assert shardviz.scan(examples.mlp).kind == "functional"
    assert shardviz.scan(examples.sequential_mlp).kind == "sequential"
    assert shardviz.scan(examples.subclassed_stack).kind == "subclassed"


def test_builder_allocates_nothing_and_leaks_no_tracers():
    scan = shardviz.scan(lambda: examples.llama(n_blocks=2, d_model=512, ff=1024))
    assert scan.built_by_shardviz
    for v in scan.model.variables:
        assert v._value is None, v.path  # deferred: never allocated, never traced into


def test_built_model_is_scanned_as_is():
    model = examples.mlp()
    scan = shardviz.scan(model)
    assert scan.model is model and not scan.built_by_shardviz
    assert scan.output_paths == ("up/output", "down/output")


class TwoArgs(keras.Model):
    """A subclassed model whose call takes two tensors."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.proj = keras.layers.Dense(4, name="proj")

    def call(self, a, b):
        return self.proj(a) + b


def build_two_args():
    model = TwoArgs(name="two_args")
    model(np.zeros((2, 8), "float32"), np.zeros((2, 4), "float32"))
    return model


def test_output_paths_of_a_model_with_unknown_inputs():
    built = shardviz.scan(build_two_args())  # a built model, inputs unknown
    assert built.outputs_source == "none" and built.output_paths == ()
    assert any("inputs=" in n for n in built.notes)
    from_builder = shardviz.scan(build_two_args)  # lookups seen while it was built
    assert from_builder.outputs_source == "build"
    assert from_builder.output_paths == ("two_args/proj/output", "two_args/output")


def test_inputs_give_output_paths_of_a_subclassed_model():
    given = shardviz.scan(examples.subclassed_stack, inputs=(4, 16))
    assert given.outputs_source == "forward"
    assert given.output_paths[:3] == (
        "my_model/block_0/up/output", "my_model/block_0/down/output", "my_model/block_0/output")


def test_multi_input_model():
    def build():
        a = keras.Input((8,), name="a")
        b = keras.Input((4,), name="b")
        h = keras.layers.Concatenate(name="cat")([a, b])
        return keras.Model([a, b], keras.layers.Dense(2, name="out")(h), name="two")

    scan = shardviz.scan(build)
    assert scan.output_paths == ("cat/output", "out/output")
    scan = shardviz.scan(build, inputs=[(2, 8), (2, 4)])
    assert scan.output_paths == ("cat/output", "out/output")


def test_bad_models_and_builders_give_clear_errors():
    with pytest.raises(ShardvizError, match="Expected a Keras model or a zero-argument builder"):
        shardviz.scan(42)

    def raises():
        raise RuntimeError("no such layer size")

    with pytest.raises(ShardvizError, match=r"builder raises\(\) raised RuntimeError: no such layer size"):
        shardviz.scan(raises)
    with pytest.raises(ShardvizError, match="returned int, not a Keras model"):
        shardviz.scan(lambda: 3)
    with pytest.raises(ShardvizError, match="is not built"):
        shardviz.scan(keras.Sequential([keras.layers.Dense(2)]))


def test_a_builder_names_its_layers_as_in_a_new_process_whatever_was_built_before():
    """Keras numbers unnamed layers from a process-wide counter; shardviz builds with it
    empty, so its scan, verify's workers and their references name variables alike."""
    import keras

    def build():
        x = keras.Input((8,))
        h = keras.layers.Dense(8)(x)
        return keras.Model(x, keras.layers.Dense(4)(h))

    first = shardviz.scan(build).variable_paths
    build(), build()  # the session's own models move the counter on
    assert shardviz.scan(build).variable_paths == first
    assert first == ("dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias")
    after = build()  # and the session's names go on from where they were
    assert after.layers[1].name not in ("dense", "dense_1")


def _part_and_whole():
    """A part with two token tables, inside a whole with a 77-row position table."""
    tokens = keras.Input((8,), dtype="int32")
    both = keras.layers.Add()([keras.layers.Embedding(512, 64, name="e1")(tokens),
                              keras.layers.Embedding(512, 64, name="e2")(tokens)])
    part = keras.Model(tokens, keras.layers.Dense(64, name="mix")(both), name="part")
    outer = keras.Input((8,), dtype="int32")
    position = keras.layers.Embedding(77, 64, name="pos")(outer)
    return part, keras.Model(outer, keras.layers.Add()([part(outer), position]))


def test_a_part_planned_within_its_whole_has_keys_that_reach_nothing_outside_it():
    keras.backend.clear_session()
    part, whole = _part_and_whole()
    mesh = {"batch": 2, "model": 4}
    alone = shardviz.layout_map_for(part, mesh)
    # Planned alone, one key takes both tables, and Keras would give it the whole's 77-row
    # table too, which does not divide over the mesh.
    assert any(re.fullmatch(k, "pos/embeddings") for k in alone)
    scan = shardviz.scan(part, within=whole)
    assert "pos/embeddings" in scan.other_paths and "e1/embeddings" not in scan.other_paths
    within = shardviz.layout_map_for(scan, mesh)
    assert not any(re.fullmatch(k, p) for k in within for p in scan.other_paths)
    for v in part.weights:  # the part's own variables keep their layouts
        assert within[v.path] is not None and alone[v.path] is not None
        assert within[v.path].axes == alone[v.path].axes, v.path
    # The map builds the whole under Keras's own ModelParallel.
    device_mesh = keras.distribution.DeviceMesh((2, 4), ("batch", "model"))
    layout_map = keras.distribution.LayoutMap(device_mesh)
    for key in within:
        layout_map[key] = within[key].axes
    keras.backend.clear_session()  # the same names (clear_session also ends a scope)
    with keras.distribution.ModelParallel(layout_map=layout_map).scope():
        _, rebuilt = _part_and_whole()
    assert rebuilt.get_layer("pos").embeddings.value.sharding.is_fully_replicated
    e1 = next(v for v in rebuilt.weights if v.path == "e1/embeddings")
    assert tuple(e1.value.sharding.spec) == tuple(within["e1/embeddings"].axes)


def test_within_a_model_it_is_not_part_of_says_so():
    part, _ = _part_and_whole()
    other = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="other")])
    with pytest.raises(ShardvizError, match="'part' is not part of"):
        shardviz.scan(part, within=other)
    with pytest.raises(ShardvizError, match="within=str is not a built Keras model"):
        shardviz.scan(part, within="backbone")
