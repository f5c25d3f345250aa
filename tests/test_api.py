"""The public face: import cost, display, doctests."""

import doctest
import importlib
import os
import pkgutil
import subprocess
import sys

import pytest

import shardviz
from shardviz import Plan, examples
from shardviz.report import schema

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code, **env):
    full_env = {**os.environ, **env}
    full_env.pop("XLA_FLAGS", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, cwd=ROOT, timeout=300)


def test_import_starts_nothing():
    code = (
        "import sys, shardviz\n"
        "plan = shardviz.Plan({'batch': 2, 'model': 4}, {'k': (None, 'model')})\n"
        "plan = shardviz.Plan.from_json(plan.to_json()).with_axis('model', 2)\n"
        "from jax._src import xla_bridge\n"
        "print(xla_bridge.backends_are_initialized(), 'matplotlib' in sys.modules,\n"
        "      'ipywidgets' in sys.modules, 'keras' in sys.modules)\n"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "False", "False"]


def test_simulate_devices_in_a_fresh_process():
    code = (
        "import shardviz, jax\n"
        "shardviz.simulate_devices(4)\n"
        "shardviz.simulate_devices(4)\n"
        "print(jax.device_count())\n"
        "try:\n"
        "    shardviz.simulate_devices(2)\n"
        "except shardviz.ShardvizError as e:\n"
        "    print('refused:', e.message)\n"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "4"
    assert lines[1].startswith("refused: JAX has already started with 4 devices")


def test_wrong_keras_backend_is_explained():
    code = (
        "import os; os.environ['KERAS_BACKEND'] = 'numpy'\n"
        "import shardviz\n"
        "try:\n"
        "    shardviz.scan(lambda: None)\n"
        "except shardviz.ShardvizError as e:\n"
        "    print(e.message)\n"
    )
    out = run_python(code, KERAS_BACKEND="numpy")
    assert "needs 'jax'" in out.stdout, out.stdout + out.stderr


def test_report_displays_in_notebook_and_terminal():
    plan = Plan({"batch": 2, "model": 4}, {"d1/kernel": (None, "model"), ".*d2/kernel": ("model", None)})
    report = shardviz.analyze(examples.sequential_mlp, plan)
    html = report._repr_html_()
    for path in report.variables["path"]:
        assert path in html
    assert "unused-rule" in html and "Did you mean" in html
    text = str(report)
    assert "sequential/d2/kernel" in text and "P('model', None)" in text
    assert "unused-rule" in text
    assert repr(report).startswith("<Report 'sequential'")
    from rich.console import Console

    console = Console(record=True, width=100)
    console.print(report)
    assert "sequential/d1/bias" in console.export_text()


def test_frames_are_typed():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan())
    v = report.variables
    assert str(v["bytes"].dtype) == "int64" and str(v["replicas"].dtype) == "int64"
    assert v["trainable"].dtype == bool
    assert v.loc[v.path == "down/bias", "rule"].item() is None
    assert report.rules["matches"].tolist() == [1, 1, 1]
    assert report.devices["variable_bytes"].nunique() == 1
    shards = report.shards("up/kernel")
    assert shards.loc[shards.device == 5, "index"].item() == ((0, 16), (16, 32))


def modules():
    names = []
    for info in pkgutil.walk_packages(shardviz.__path__, "shardviz."):
        if not info.name.endswith("__main__"):  # running it is the command line
            names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", modules())
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, name):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"


def test_one_error_vocabulary():
    from shardviz import ShardvizError
    from shardviz.layout.geometry import GeometryError, MeshModel, geometry_of
    from shardviz.report.serialize import frames_from_json

    with pytest.raises(ShardvizError) as info:
        geometry_of(MeshModel((("model", 4),), True), (6,), "float32", ("model",))
    assert isinstance(info.value, GeometryError) and info.value.kind == "indivisible"
    for text, words in (("{not json", "not JSON"), ('{"format": "x"}', "not a shardviz report"),
                        ("[1, 2]", "not a shardviz report")):
        with pytest.raises(ShardvizError, match=words):
            frames_from_json(text)


def test_only_a_rule_conflict_is_taken_for_a_conflict():
    import keras

    from shardviz._adapters.keras import is_conflict

    layout_map = keras.distribution.LayoutMap(
        keras.distribution.DeviceMesh((1,), ("model",), keras.distribution.list_devices()[:1]))
    layout_map[".*kernel"] = (None, "model")
    layout_map["d.*"] = ("model", None)
    with pytest.raises(ValueError) as info:
        layout_map["d/kernel"]
    assert is_conflict(info.value)
    assert not is_conflict(ValueError("something else")) and not is_conflict(KeyError("k"))


def test_the_schema_names_every_frame_a_report_has():
    from shardviz import Report, report

    frames = set()
    for name in dir(Report):
        member = getattr(Report, name)
        fn = getattr(member, "func", None) or getattr(member, "fget", None)
        if fn is not None and not name.startswith("_"):
            ret = fn.__annotations__.get("return")  # text: the modules defer annotations
            if ret in ("pd.DataFrame", "pandas.DataFrame", "DataFrame"):
                frames.add(name)
    assert frames == set(schema.NAMES) and report.FRAMES == schema.NAMES


def test_the_json_export_round_trips_every_frame():
    from shardviz.report.serialize import frames_from_json, report_to_json

    report = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=(8, 16),
                              target="h100:8", train_step=True)
    frames = frames_from_json(report_to_json(report))
    assert set(frames) == set(schema.NAMES)
    for name in schema.NAMES:
        assert frames[name].columns.tolist() == getattr(report, name).columns.tolist()
        assert frames[name].dtypes.tolist() == getattr(report, name).dtypes.tolist(), name
    assert len(frames["hosts"]) and len(frames["estimate"])
