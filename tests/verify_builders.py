"""Builders for the multi-host tests: each behaves like examples.mlp in the
test process, and misbehaves only inside a ``shardviz verify`` worker."""

import os
import time

from shardviz import examples


def _in_worker() -> bool:
    return "KERAS_DISTRIBUTION_PROCESS_ID" in os.environ


def crashes():
    if _in_worker():
        print("building the model, then the worker dies", flush=True)
        os._exit(3)
    return examples.mlp()


def hangs():
    if _in_worker():
        time.sleep(600)
    return examples.mlp()


def two_inputs():
    """A functional model with two inputs: each host feeds its rows of both."""
    import keras

    a, b = keras.Input((16,), name="a"), keras.Input((16,), name="b")
    h = keras.layers.Dense(64, name="up")(keras.layers.Add(name="sum")([a, b]))
    return keras.Model([a, b], keras.layers.Dense(16, name="down")(h), name="two")
