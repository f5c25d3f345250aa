"""Bad arguments: each is refused where it enters, with a ShardvizError that
names it and says what to pass, before any work; nothing a user passes may
crash, exhaust memory or hang the process. The CLI answers with one line."""

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

import shardviz
from shardviz import Plan, ShardvizError, cli, examples
from shardviz.plan import MAX_AXES, MAX_MESH_SIZE, as_bytes
from shardviz.planner import suggest, sweep
from shardviz.strategy import divisors, factorisations, mesh_count, mesh_shapes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULES = {".*up/kernel": (None, "model"), ".*down/kernel": ("model", None)}


@pytest.fixture(scope="module")
def mlp_scan():
    return shardviz.scan(examples.mlp)


def run_cli(*args, env=None):
    """``python -m shardviz ARGS`` in a child, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": ROOT, **(env or {})}
    env.pop("XLA_FLAGS", None)
    return subprocess.run([sys.executable, "-m", "shardviz", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=300)


def one_error_line(stderr):
    lines = [line for line in stderr.strip().splitlines() if line.startswith("shardviz: error:")]
    assert "Traceback" not in stderr and len(lines) == 1, stderr
    return lines[0]


# ------------------------------------------------------------ device counts
def test_the_mesh_bound_holds_every_slice_shardviz_knows_several_times():
    from shardviz.target import HARDWARE

    largest = max(h.max_chips or 0 for h in HARDWARE.values())
    assert MAX_MESH_SIZE >= 8 * largest
    Plan({"data": 8, "model": largest})  # accepted


@pytest.mark.parametrize("call", [
    lambda scan: sweep(scan, RULES, devices=10**9),
    lambda scan: sweep(scan, RULES, devices=2**31 - 1),
    lambda scan: suggest(scan, devices=2**40),
    lambda scan: suggest(scan, devices=2**31 - 1),
], ids=["sweep-1e9", "sweep-2**31-1", "suggest-2**40", "suggest-2**31-1"])
def test_sweep_and_suggest_refuse_device_counts_beyond_the_bound_before_any_work(call, mlp_scan):
    with pytest.raises(ShardvizError, match=f"at most {MAX_MESH_SIZE:,} devices") as e:
        call(mlp_scan)
    assert "devices=" in str(e.value) and e.value.hint


def test_factorisations_are_found_by_trial_division():
    for n in [1, 2, 12, 97, 360, 2039, 2048]:
        assert divisors(n) == [k for k in range(1, n + 1) if n % k == 0]
        assert factorisations(n) == [(n // m, m) for m in divisors(n)]
    for n in [1, 8, 12, 2048]:
        for k in [1, 2, 3, 4]:
            meshes = mesh_shapes([f"a{i}" for i in range(k)], n)
            assert mesh_count(n, k) == len(meshes)
            assert all(np.prod(list(m.values())) == n for m in meshes)


def test_a_sweep_of_too_many_mesh_shapes_is_refused(mlp_scan):
    with pytest.raises(ShardvizError, match="mesh shapes; a sweep analyses at most 1,000"):
        sweep(mlp_scan, RULES, devices=2048, axes=["a", "b", "c", "d", "e"])


# ------------------------------------------------------------ huge meshes
@pytest.mark.parametrize("mesh, words", [
    ({"batch": 2**31 - 1}, "2,147,483,647 devices"),
    ({"a": 65536, "b": 65536}, "4,294,967,296 devices"),
    ({"batch": 512, "model": 256}, "131,072 devices"),
])
def test_a_mesh_of_more_devices_than_the_bound_is_refused(mesh, words):
    with pytest.raises(ShardvizError, match=f"{words}; shardviz plans for at most 65,536"):
        Plan(mesh)
    with pytest.raises(ShardvizError, match=words):
        shardviz.analyze(examples.mlp, {"format": "shardviz.plan", "version": 1, "mesh": mesh})
    with pytest.raises(ShardvizError, match=words):
        Plan({"batch": 1}).with_mesh(mesh)


def test_a_mesh_of_too_many_axes_is_refused():
    Plan({f"a{i}": 1 for i in range(MAX_AXES)})
    with pytest.raises(ShardvizError, match=f"64 axes; shardviz takes at most {MAX_AXES}"):
        Plan({f"a{i}": 1 for i in range(64)})
    plan = Plan({f"a{i}": 1 for i in range(MAX_AXES)})
    with pytest.raises(ShardvizError, match="at most 16"):
        plan.with_axis("one_more", 1)


def test_an_oversized_plan_file_is_refused_at_once():
    text = json.dumps({"format": "shardviz.plan", "version": 1,
                       "mesh": {f"a{i}": 1 for i in range(100_000)}})
    with pytest.raises(ShardvizError, match="100,000 axes; shardviz takes at most 16"):
        Plan.from_json(text)
    with pytest.raises(ShardvizError, match="repeats the key 'b'"):
        Plan.from_json('{"mesh": {"a": 1, "b": 2, "b": 3}}')


# ------------------------------------------------------------ suggest
def test_suggest_takes_sizes_and_numpy_integers(mlp_scan):
    as_number = suggest(mlp_scan, devices=8, budget_bytes=12 * 10**9).table
    assert len(as_number)
    assert suggest(mlp_scan, devices=8, budget_bytes="12GB").table.equals(as_number)
    assert suggest(mlp_scan, devices=np.int64(8), budget_bytes="12GiB").table.equals(as_number)
    tight = suggest(mlp_scan, devices=8, budget_bytes="1KB")
    assert len(tight) == 0 and tight.smallest is not None
    assert as_bytes("12GB", "x") == cli.parse_bytes("12GB") == 12 * 10**9  # one parser


@pytest.mark.parametrize("kwargs, words", [
    (dict(budget_bytes=True), "budget_bytes=True is not a size"),
    (dict(budget_bytes="lots"), "budget_bytes='lots' is not a size"),
    (dict(budget_bytes=-1), "budget_bytes=-1 is not a size"),
    (dict(compile_top=0), "compile_top=0"),
    (dict(compile_top=-2), "compile_top=-2"),
    (dict(compile_top=True), "compile_top=True"),
    (dict(devices=True), "devices=True"),
    (dict(devices=8.0), "devices=8.0"),
])
def test_suggest_refuses_bad_arguments_by_name(kwargs, words, mlp_scan):
    with pytest.raises(ShardvizError, match=words) as e:
        suggest(mlp_scan, **{"devices": 8, **kwargs})
    assert e.value.hint


# ------------------------------------------------------------ sweep
@pytest.mark.parametrize("kwargs, words", [
    (dict(devices=0), "devices=0"),
    (dict(devices=-4), "devices=-4"),
    (dict(devices=2.5), "devices=2.5"),
    (dict(devices="8"), "devices='8'"),
    (dict(devices=True), "devices=True"),
    (dict(meshes=["batch=2"]), "meshes=...): entry 0 is str"),
    (dict(meshes=[1]), "meshes=...): entry 0 is int"),
    (dict(meshes=[None]), "meshes=...): entry 0 is NoneType"),
    (dict(meshes=[{"batch": 2}, {"batch": "2"}]), "meshes=...): entry 1: The size"),
    (dict(meshes=[]), "meshes=[]"),
    (dict(meshes="batch=2"), "meshes='batch=2'"),
    (dict(rules=None), "rules=None"),
    (dict(rules="abc"), "rules=...): Rules must be a mapping"),
    (dict(rules=[("x",)]), "rules=...): Rule entry"),
    (dict(rules={"k": {"model"}}), "rules=...): Rule 'k': axes must be a tuple or list"),
    (dict(axes=[]), "axes=[]): give 1 to 16"),
    (dict(axes=["batch", "batch"]), "the axis 'batch' appears twice"),
    (dict(axes="batch"), "axes='batch'"),
    (dict(axes=["batch", None]), "sweep(axes=...): the axis None"),
])
def test_sweep_refuses_bad_arguments_by_name(kwargs, words, mlp_scan):
    args = {"rules": RULES, "devices": 8, **kwargs}
    with pytest.raises(ShardvizError, match=re.escape(words)) as e:
        sweep(mlp_scan, **args)
    assert e.value.hint


def test_sweep_takes_numpy_device_counts_and_plans(mlp_scan):
    frame = sweep(mlp_scan, RULES, devices=np.int64(4))
    assert list(frame["mesh"]) == ["batch=1 × model=4", "batch=2 × model=2",
                                   "batch=4 × model=1"]
    plan = Plan({"batch": 2, "model": 4}, RULES)
    assert list(sweep(mlp_scan, plan, meshes=[{"batch": 8, "model": 1}, plan])["mesh"]) == [
        "batch=8 × model=1", "batch=2 × model=4"]


# ------------------------------------------------------------ analyze
def test_an_optimizer_by_name_is_keras_own_and_other_things_are_refused():
    report = shardviz.analyze(examples.mlp, Plan({"batch": 8}), (8, 16), train_step=True,
                              optimizer="sgd")
    assert report.trace_error is None and report.trace.step_setup.optimizer == "SGD"
    assert report.arguments["optimizer"] == "sgd"
    for bad, words in ((42, "optimizer=42 is not a Keras optimizer"),
                       ("nosuch", "optimizer='nosuch' is not an optimizer Keras knows")):
        with pytest.raises(ShardvizError, match=words) as e:
            shardviz.analyze(examples.mlp, Plan({"batch": 8}), (8, 16), train_step=True,
                             optimizer=bad)
        assert "keras.optimizers" in e.value.hint


def test_replicated_threshold_takes_sizes_and_progress_is_checked(capsys):
    plan = Plan({"batch": 2, "model": 4})
    kinds = lambda r: [p.kind for p in r.problem_list]  # noqa: E731
    as_size = shardviz.analyze(examples.mlp, plan, replicated_threshold="1KB")
    assert kinds(as_size) == kinds(shardviz.analyze(examples.mlp, plan, replicated_threshold=1000))
    assert "replicated-large" in kinds(as_size)
    with pytest.raises(ShardvizError, match="replicated_threshold='1 lot' is not a size"):
        shardviz.analyze(examples.mlp, plan, replicated_threshold="1 lot")
    with pytest.raises(ShardvizError, match="progress=42 is not a callable"):
        shardviz.analyze(examples.mlp, plan, (8, 16), progress=42)
    shardviz.analyze(examples.mlp, plan, (8, 16), progress=False)
    assert capsys.readouterr().err == ""
    shardviz.analyze(examples.mlp, plan, (8, 16), progress=True)
    # The pass was compiled just above, so the compile is read from the cache.
    assert "shardviz: reading the compile cache" in capsys.readouterr().err


def test_a_target_with_a_space_says_so():
    with pytest.raises(ShardvizError, match="'v5e: 4x4' has a space in it") as e:
        shardviz.analyze(examples.mlp, Plan({"batch": 8}), target="v5e: 4x4")
    assert "'v5e:4x4'" in e.value.hint


# ------------------------------------------------------------ the CLI
SUGGEST = ["suggest", "shardviz.examples:mlp", "--devices", "8", "-q"]
SWEEP = ["sweep", "shardviz.examples:mlp", "--devices", "8", "--rule", ".*up/kernel=None,model",
         "-q"]


@pytest.mark.parametrize("command, flag", [(SUGGEST, "--plan-out"), (SWEEP, "--png")])
def test_cli_refuses_unwritable_outputs_before_any_work(command, flag, tmp_path, capsys):
    for path in (str(tmp_path), "/proc/shardviz-output", str(tmp_path / "missing" / "x")):
        assert cli.main([*command, flag, path]) == 2, path
        out = capsys.readouterr()
        assert out.out == "" and f"shardviz: error: {flag} {path!r}" in out.err, out.err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("command, flag", [(SUGGEST, "--plan-out"), (SWEEP, "--png")])
def test_cli_write_errors_at_the_end_are_one_line(command, flag, capsys):
    assert cli.main([*command, flag, "/dev/full"]) == 2
    err = capsys.readouterr().err
    assert f"shardviz: error: {flag} '/dev/full' could not be written: No space left" in err


def test_cli_refuses_an_oversized_plan_file_at_once(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"format": "shardviz.plan", "version": 1,
                                "mesh": {f"a{i}": 1 for i in range(60_000)}}))
    assert cli.main(["report", "shardviz.examples:mlp", "--plan", str(plan)]) == 2
    assert "60,000 axes; shardviz takes at most 16" in capsys.readouterr().err


def test_cli_on_an_ascii_only_terminal_replaces_what_it_cannot_encode():
    out = run_cli("report", "shardviz.examples:mlp", "--devices", "8", "--mesh",
                  "batch=2,model=4", "--rule", ".*up/kernel=None,model", "--inputs", "8x16",
                  env={"PYTHONIOENCODING": "ascii", "LC_ALL": "C"})
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode == 0 and "up/kernel" in out.stdout and "?" in out.stderr


def test_cli_into_a_closed_pipe_stops_quietly():
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("XLA_FLAGS", None)
    child = subprocess.Popen([sys.executable, "-m", "shardviz", *SUGGEST], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()  # the reader has gone, as `| head -c 10` does
    err = child.stderr.read().decode()
    assert child.wait(timeout=300) == 141
    assert "Traceback" not in err and "Exception ignored" not in err, err


def test_cli_with_stdout_closed_stops_as_into_a_closed_pipe(tmp_path):
    """``shardviz report ... >&-``: the files asked for are written, the exit is
    as into a closed pipe, and no traceback."""
    import shlex

    env = {**os.environ, "PYTHONPATH": ROOT}
    command = shlex.join([sys.executable, "-m", "shardviz", "report", "shardviz.examples:mlp",
                          "--devices", "8", "--mesh", "batch=2,model=4", "--json",
                          str(tmp_path / "r.json")])
    child = subprocess.run(["bash", "-c", command + " >&-"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 141, child.stderr
    assert "Traceback" not in child.stderr and "Exception ignored" not in child.stderr
    assert (tmp_path / "r.json").stat().st_size > 0


@pytest.mark.parametrize("base", ["BaseException", "KeyboardInterrupt"])
def test_a_builder_raising_a_base_exception_is_one_error_line(base, tmp_path):
    builder = tmp_path / "stops.py"
    builder.write_text(textwrap.dedent(f"""
        class Stop({base}):
            pass

        def build():
            raise Stop("the builder gave up")
    """))
    out = run_cli("report", f"{builder}:build", "--mesh", "batch=8")
    assert out.returncode == 2
    line = one_error_line(out.stderr)
    assert "stopped by Stop: the builder gave up" in line


def test_cli_axis_sizes_that_overflow_are_one_line():
    out = run_cli("report", "shardviz.examples:mlp", "--mesh", "batch=99999999999999999999")
    assert out.returncode == 2 and "2,147,483,647" in one_error_line(out.stderr)
    out = run_cli(*SWEEP[:3], "99999999999999999999", *SWEEP[4:])
    assert out.returncode == 2 and "at most 65,536 devices" in one_error_line(out.stderr)


@pytest.mark.parametrize("frame", [42, None, "sweep", pd.DataFrame({"mesh": ["a"]})])
def test_show_sweep_takes_only_a_sweep(frame):
    with pytest.raises(ShardvizError, match="show_sweep\\(\\) draws what shardviz.sweep returns"):
        shardviz.show_sweep(frame)


@pytest.mark.parametrize("inputs", [(10**20, 16), (2**31, 16)])
def test_an_input_dimension_beyond_32_bits_is_refused_naming_it(inputs):
    with pytest.raises(ShardvizError, match="a dimension holds at most 2,147,483,647"):
        shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=inputs)


def test_cli_inputs_beyond_32_bits_are_one_line(capsys):
    from shardviz.cli import main

    assert main(["report", "shardviz.examples:mlp", "--mesh", "batch=8",
                 "--inputs", "99999999999999999999x16"]) == 2
    err = capsys.readouterr().err
    assert "a dimension holds at most 2,147,483,647" in err and "Traceback" not in err


def dict_model():
    import keras

    ids = keras.Input((None,), dtype="int32", name="token_ids")
    mask = keras.Input((None,), dtype="int32", name="padding_mask")
    h = keras.layers.Embedding(64, 16, name="embed")(ids)
    h = h * keras.ops.expand_dims(keras.ops.cast(mask, "float32"), -1)
    return keras.Model({"token_ids": ids, "padding_mask": mask}, h, name="dict_model")


@pytest.mark.parametrize("inputs, words", [
    ({"tokens": (8, 32), "padding_mask": (8, 32)}, "no input is named 'tokens'; 'token_ids' is "
     "missing"),
    ({"token_ids": (8, 32)}, "'padding_mask' is missing"),
    ((8, 32), "takes a dict of inputs, named 'padding_mask', 'token_ids'; the inputs given are "
     "not a dict"),
])
def test_a_model_that_takes_a_dict_is_given_every_name_and_no_other(inputs, words):
    report = shardviz.analyze(dict_model, Plan({"batch": 8}), inputs=inputs)
    assert report.trace_error is not None and words in report.trace_error.message
    assert ("--inputs padding_mask=8x128:int32 --inputs token_ids=8x128:int32"
            in report.trace_error.hint)
    right = shardviz.analyze(dict_model, Plan({"batch": 8}),
                             inputs={"token_ids": (8, 32), "padding_mask": (8, 32)})
    assert right.trace_error is None


def test_a_plan_file_name_in_python_says_how_to_read_it():
    with pytest.raises(ShardvizError, match="is a str, not a plan") as e:
        shardviz.analyze(examples.mlp, "plan.json")
    assert "Plan.from_json" in e.value.hint
