"""Every test process (and every doctest) sees 8 simulated CPU devices, and
one compile cache for the whole run: a folder made for it (workers and
notebook kernels inherit it through the environment) and removed at the end,
so that tests which compile the same program share the compile, and no test
reads or writes the user's own cache."""

import os
import shutil
import tempfile

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("MPLBACKEND", "Agg")
if "SHARDVIZ_CACHE_DIR" not in os.environ:
    os.environ["SHARDVIZ_CACHE_DIR"] = tempfile.mkdtemp(prefix="shardviz-test-cache-")
    os.environ["SHARDVIZ_TEST_CACHE_OWNER"] = str(os.getpid())

import shardviz  # noqa: E402

shardviz.simulate_devices(8)


def pytest_unconfigure(config):
    if os.environ.get("SHARDVIZ_TEST_CACHE_OWNER") == str(os.getpid()):
        shutil.rmtree(os.environ["SHARDVIZ_CACHE_DIR"], ignore_errors=True)
