"""Every test process sees 8 simulated CPU devices."""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import shardviz  # noqa: E402

shardviz.simulate_devices(8)
