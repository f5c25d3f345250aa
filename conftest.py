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


# ------------------------------------------------------------------ scheduling
# `make test` runs pytest-xdist with --dist loadgroup. A notebook's cells, and the tests of
# a file whose fixtures are shared by the file (scope="module"), run on one worker; every
# other test goes wherever a worker is free. The longest go first (longest processing time
# first keeps two workers busy to the end), from tests/durations.json: the seconds each
# test or notebook took in a run of `make test`, written by tests/record_durations.py.
_DURATIONS = os.path.join(os.path.dirname(__file__), "tests", "durations.json")


def _shares_fixtures(item) -> bool:
    """Whether the test uses a fixture its file shares between its tests."""
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        for d in defs:
            base = str(d.baseid).split("::")[0]
            if d.scope == "module" and base and str(item.path).endswith(base):
                return True
    return False


def _group_of(item) -> str | None:
    path = str(item.path)
    if path.endswith(".ipynb"):
        return os.path.basename(path)
    if _shares_fixtures(item):
        return os.path.basename(path)
    return None


def _seconds() -> dict:
    import json

    try:
        with open(_DURATIONS) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


import pytest  # noqa: E402


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    if config.getoption("dist", "no") != "loadgroup":
        return
    seconds = _seconds()
    scopes: dict[str, list] = {}
    for item in items:
        group = _group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(name=group))
        scopes.setdefault(group or item.nodeid, []).append(item)

    def cost(scope: str) -> float:
        return sum(seconds.get(i.nodeid, 0.5) for i in scopes[scope])

    order = sorted(scopes, key=cost, reverse=True)  # a stable sort keeps ties in file order
    items[:] = [item for scope in order for item in scopes[scope]]
