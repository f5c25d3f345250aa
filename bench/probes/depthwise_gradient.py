"""The gradient of a grouped (depthwise) convolution under batch layouts,
against one device: XLA's partitioner can sum the kernel's gradient over
copies of the batch.

Run:  .venv/bin/python bench/probes/depthwise_gradient.py

On 8 simulated CPU devices it compiles ``grad(mean(conv(x, k)**2))`` of a
depthwise convolution (``feature_group_count`` = channels) and of a dense one,
with the input ``x`` laid out on each mesh and spec below and the kernel
replicated, and prints the largest difference of the output, the kernel's
gradient and the input's gradient from the same program on one device,
with the largest magnitude of each for scale, and the kernel gradient as a
multiple of the right one. A layout that is right differs by rounding
(about 1e-8 here); one that is wrong differs by the size of the values.

It then compiles the same gradients for a v5e:2x4 slice with the TPU
compiler (no chip is needed) and prints the device groups of each
all-reduce: the program that sums the kernel gradient over the batch.

Last, one ``model.fit`` step of small Keras models under Keras's own
``ModelParallel`` on each mesh shape: a lone DepthwiseConv2D, and the same
followed by a pointwise Conv2D, with no rules (only the batch laid out); then
a Conv2D 1x1, a ``Conv2D(groups=8)`` and a pointwise Conv2D, with no rules,
with a rule on the grouped kernel's output channels, and with the ``/output``
rule shardviz's planner writes (the channels of the layer before the grouped
convolution split over ``model``); and the kernel rule on a ``Conv2D(groups=8)``
that reads the model's input. It prints each grouped kernel's update as a
multiple of the update on one device (each model built and trained under the
distribution, as a script that sets one does). Measured here: 4.00 on 2 x 4,
2.00 on 4 x 2, 1.00 on 8 x 1 and on 1 x 8 with no rules; 1.00 everywhere with
the ``/output`` rule; the kernel rule is right after a layer (XLA splits that
layer's output to match) but not on the model's input (4.00 on 2 x 4).
"""

from __future__ import annotations

import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CASES = [((8,), ("batch",), ("batch",)),
         ((2, 4), ("batch", "model"), ("batch",)),
         ((4, 2), ("batch", "model"), ("batch",)),
         ((2, 4), ("batch", "model"), (("batch", "model"),)),
         ((2, 4), ("batch", "model"), ("batch", None, None, "model"))]


def main() -> None:
    import shardviz

    shardviz.simulate_devices(8)
    import importlib.metadata as md

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    rng = np.random.default_rng(0)
    channels = 64
    x = rng.standard_normal((8, 16, 16, channels)).astype("float32")
    print(f"jax {jax.__version__}, jaxlib {md.version('jaxlib')}; x {x.shape}, kernel 3x3, "
          "stride 2; max |diff| from one device (largest magnitude)")
    for groups, name in ((channels, "depthwise"), (1, "dense")):
        k = (rng.standard_normal((3, 3, channels // groups, channels)) * 0.1).astype("float32")

        def parts(k, x, g=groups):
            loss = lambda k, x: jnp.mean(grouped_conv(k, x, g) ** 2)  # noqa: E731
            return (grouped_conv(k, x, g), *jax.grad(loss, argnums=(0, 1))(k, x))

        want = [np.asarray(a) for a in jax.jit(parts)(k, x)]
        for shape, axes, spec in CASES:
            mesh = Mesh(np.array(jax.devices()[:int(np.prod(shape))]).reshape(shape), axes)
            placed = jax.device_put(x, NamedSharding(mesh, PartitionSpec(*spec)))
            got = [np.asarray(a) for a in jax.jit(parts)(k, placed)]
            cells = [f"{np.abs(g - w).max():.1e} ({np.abs(w).max():.1e})"
                     for g, w in zip(got, want)]
            # The kernel gradient as a multiple of the right one (least squares).
            times = float((got[1] * want[1]).sum() / (want[1] * want[1]).sum())
            print(f"{name:9} mesh {shape} x {PartitionSpec(*spec)}: output {cells[0]}, "
                  f"kernel gradient {cells[1]} = {times:.2f} x the right one, "
                  f"input gradient {cells[2]}")

    tpu_groups(channels)
    keras_steps()


def keras_steps() -> None:
    """One fit step of each small model under ModelParallel on 2x4, 4x2 and
    8x1, against one device: the depthwise kernel's update, as a multiple."""
    import jax
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16, 16, 32)).astype("float32")
    y = rng.standard_normal((8, 16, 16, 32)).astype("float32")

    def build(model: str):
        keras.utils.set_random_seed(0)
        inputs = keras.Input((16, 16, 32))
        if model.startswith("grouped"):
            out = inputs if model == "grouped, on the input" else \
                keras.layers.Conv2D(32, 1, name="pre")(inputs)
            out = keras.layers.Conv2D(32, 3, padding="same", groups=8, name="dw")(out)
        else:
            out = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(inputs)
        if model != "depthwise":
            out = keras.layers.Conv2D(32, 1, name="pointwise")(out)
        model = keras.Model(inputs, out)
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        return model

    def update(model_name: str, distribution) -> np.ndarray:
        # Built and trained under the distribution, as a script that sets it does: fit lays
        # out the batch only while a distribution is set.
        with distribution.scope() if distribution else contextlib.nullcontext():
            model = build(model_name)
            before = np.asarray(model.get_layer("dw").kernel.value)
            model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        return before - np.asarray(model.get_layer("dw").kernel.value)

    print(f"keras {keras.__version__}: one model.fit step under ModelParallel; the grouped "
          "kernel's update as a multiple of one device's")
    cases = [("depthwise", {}, "DepthwiseConv2D alone, no rules"),
             ("pointwise", {}, "DepthwiseConv2D then Conv2D 1x1, no rules"),
             ("grouped", {}, "Conv2D groups=8, no rules"),
             ("grouped", {"dw/kernel": (None, None, None, "model")},
              "Conv2D groups=8, kernel split"),
             ("grouped, on the input", {"dw/kernel": (None, None, None, "model")},
              "Conv2D groups=8 on the input, kernel split"),
             ("grouped", {"pre/output": ("batch", None, None, "model")},
              "Conv2D groups=8, /output rule")]
    for model_name, rules, label in cases:
        want = update(model_name, None)
        cells = []
        for shape in ((2, 4), (4, 2), (8, 1), (1, 8)):
            mesh = keras.distribution.DeviceMesh(shape, ["batch", "model"], jax.devices()[:8])
            layout_map = keras.distribution.LayoutMap(mesh)
            for key, axes in rules.items():
                layout_map[key] = axes
            got = update(model_name, keras.distribution.ModelParallel(
                layout_map=layout_map, batch_dim_name="batch"))
            cells.append(f"{shape[0]} x {shape[1]}: {(got * want).sum() / (want * want).sum():.2f}")
        print(f"{label:42} " + ", ".join(cells))


def grouped_conv(k, x, groups: int):
    """The convolution measured: 3x3, stride 2, ``groups`` feature groups."""
    import jax

    return jax.lax.conv_general_dilated(x, k, (2, 2), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                        feature_group_count=groups)


def tpu_groups(channels: int) -> None:
    """The all-reduces of each gradient, compiled for v5e:2x4 on a batch=2 x
    model=4 mesh with the input's batch on the batch axis."""
    import re

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    try:
        devices = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x4").devices
    except Exception as e:  # noqa: BLE001  no TPU compiler installed
        print(f"TPU compiler: not available ({type(e).__name__})")
        return
    mesh = Mesh(np.array(devices).reshape(2, 4), ("batch", "model"))
    for groups, name in ((channels, "depthwise"), (1, "dense")):
        k = jax.ShapeDtypeStruct((3, 3, channels // groups, channels), jnp.float32,
                                 sharding=NamedSharding(mesh, PartitionSpec()))
        x = jax.ShapeDtypeStruct((8, 16, 16, channels), jnp.float32,
                                 sharding=NamedSharding(mesh, PartitionSpec("batch")))
        grad = jax.jit(jax.grad(lambda k, x, g=groups: jnp.mean(grouped_conv(k, x, g) ** 2)))
        text = grad.lower(k, x).compile().as_text()
        found = re.findall(r"all-reduce(?:-start)?\(.*?replica_groups=(\S+?)[,}]?\s", text)
        print(f"{name:9} v5e:2x4, batch=2 x model=4, TPU compiler: all-reduce groups {found}")


if __name__ == "__main__":
    main()
