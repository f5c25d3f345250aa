"""Every test process (and every doctest) sees 8 simulated CPU devices."""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("MPLBACKEND", "Agg")

import shardviz  # noqa: E402

shardviz.simulate_devices(8)
