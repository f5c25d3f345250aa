"""Every test process (and every doctest) sees 8 simulated CPU devices, and
one compile cache for the whole run: a folder made for it (workers and
notebook kernels inherit it through the environment) and removed at the end,
so that tests which compile the same program share the compile, and no test
reads or writes the user's own cache.

The CPU backend generates machine code at LLVM's level 0 in the test run
(``--xla_backend_optimization_level=0``): building a real Keras model compiles
each initializer eagerly, and level 0 compiles those five times faster. The
flag reaches only code generation: tests/test_test_flags.py checks that the
optimized programs, their memory and their collectives are the same with and
without it, for the CPU and the TPU compiler."""

import os
import shutil
import tempfile

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("MPLBACKEND", "Agg")
TEST_FLAG = "--xla_backend_optimization_level=0"
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {TEST_FLAG}".strip()
if "SHARDVIZ_CACHE_DIR" not in os.environ:
    os.environ["SHARDVIZ_CACHE_DIR"] = tempfile.mkdtemp(prefix="shardviz-test-cache-")
    os.environ["SHARDVIZ_TEST_CACHE_OWNER"] = str(os.getpid())

import shardviz  # noqa: E402

shardviz.simulate_devices(8)


def pytest_unconfigure(config):
    if os.environ.get("SHARDVIZ_TEST_CACHE_OWNER") == str(os.getpid()):
        shutil.rmtree(os.environ["SHARDVIZ_CACHE_DIR"], ignore_errors=True)


# ------------------------------------------------------------------ scheduling
# `make test` runs pytest-xdist with --dist loadfile: a file's tests (a notebook's cells among
# them) run on one worker, in order. The longest files go first (longest processing time
# first keeps both workers busy to the end), from tests/durations.json: the seconds each test
# or notebook cell took in a run of `make test`, written by tests/record_durations.py.
_DURATIONS = os.path.join(os.path.dirname(__file__), "tests", "durations.json")


def _seconds() -> dict:
    import json

    try:
        with open(_DURATIONS) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def pytest_collection_modifyitems(config, items):
    # Only xdist's workers order: their collection order is the order files are handed out.
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    seconds = _seconds()
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(str(item.path), []).append(item)

    def cost(path: str) -> float:
        return sum(seconds.get(i.nodeid, 0.5) for i in files[path])

    order = sorted(files, key=cost, reverse=True)  # a stable sort keeps ties in their order
    items[:] = [item for path in order for item in files[path]]
