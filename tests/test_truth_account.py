"""The memory account: every variable the model holds counts, read or not,
and the parts add up to the total that decides the verdict."""

from __future__ import annotations

import keras
import pytest

import shardviz
from shardviz import Plan


def _has_tpu() -> bool:
    try:
        import libtpu  # noqa: F401
    except ImportError:
        return False
    return True


needs_tpu = pytest.mark.skipif(not _has_tpu(), reason="libtpu is not installed")


class _Unread(keras.layers.Layer):
    """A layer with a weight its call never reads (as an untied output
    embedding in a forward pass): jit drops it from the program, but it lives
    on the device all the same."""

    def __init__(self, spare_shape, **kwargs):
        super().__init__(**kwargs)
        self.spare_shape = tuple(spare_shape)

    def build(self, shape):
        self.used = self.add_weight(shape=(shape[-1], 8), name="used")
        self.spare = self.add_weight(shape=self.spare_shape, name="spare")

    def call(self, x):
        return x @ self.used


def _unread(spare_shape):
    def build():
        x = keras.Input((16,))
        return keras.Model(x, _Unread(spare_shape, name="unread")(x))
    return build


@needs_tpu
def test_a_weight_the_program_never_reads_still_counts_against_the_chip():
    """17 GiB of weights on a 15.75 GiB chip do not fit, whether or not the
    compiled program reads them; with and without inputs the verdict is one."""
    build = _unread((65536, 70000))  # 17.1 GiB of float32, never read
    plan = Plan({"batch": 1}, {})
    alone = shardviz.analyze(build, plan, target="v5e:1x1")
    traced = shardviz.analyze(build, plan, inputs=(8, 16), target="v5e:1x1")
    assert alone.fits is False
    assert traced.fits is False, traced.memory.T
    assert traced.problems_of("does-not-fit")
    mem = traced.memory.iloc[0]
    assert mem["unread_bytes"] == 65536 * 70000 * 4
    assert mem["total_bytes"] >= mem["variable_bytes"]


@pytest.mark.parametrize("target", [None, "v5e:1x1"])
@pytest.mark.parametrize("train_step", [False, True])
def test_the_memory_parts_add_up_to_the_total(target, train_step):
    if target and not _has_tpu():
        pytest.skip("libtpu is not installed")
    report = shardviz.analyze(_unread((64, 32)), Plan({"batch": 1}, {}), inputs=(8, 16),
                              target=target, train_step=train_step)
    mem = report.memory.iloc[0]
    parts = report.memory_parts
    assert sum(parts.values()) == mem["total_bytes"], (parts, mem.to_dict())
    assert parts["variables"] == mem["variable_bytes"] == (16 * 8 + 64 * 32) * 4
    assert parts["inputs"] >= 8 * 16 * 4  # the batch, read or not
    assert mem["unread_bytes"] == (0 if train_step else 64 * 32 * 4)

