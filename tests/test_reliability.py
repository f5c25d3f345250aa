"""Hostile input: no crash, no corrupted report, no lost input.

One regression test per defect found by trying shardviz as a hostile user
would. Anything that could kill the interpreter runs in a child process.
"""

import json
import os
import subprocess
import sys
import textwrap
import threading

import jax
import keras
import numpy as np
import pytest

import shardviz
from shardviz import Plan, ShardvizError, examples

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(code, timeout=240):
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("XLA_FLAGS", None)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def cli(*args):
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("XLA_FLAGS", None)
    out = subprocess.run([sys.executable, "-m", "shardviz", *args], capture_output=True,
                         text=True, cwd=ROOT, env=env, timeout=300)
    assert "Traceback" not in out.stderr, out.stderr
    return out


# ---------------------------------------------------------------- crashes
COMPILE_UNDER = """
import sys, numpy as np, jax
jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_num_cpu_devices", 8)
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
name = {name!r}
mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("batch", name))
x = jax.ShapeDtypeStruct((8, 16), "float32", sharding=NamedSharding(mesh, P("batch")))
w = jax.ShapeDtypeStruct((16, 32), "float32", sharding=NamedSharding(mesh, P(None, name)))
jax.jit(lambda x, w: x @ w).lower(x, w).compile()
print("compiled")
"""

ANALYZE_UNDER = """
import shardviz
shardviz.simulate_devices(8)
from shardviz import Plan, examples
plan = Plan({{"batch": 2, {name!r}: 4}}, {{".*up/kernel": (None, {name!r}),
                                          ".*down/kernel": ({name!r}, None)}})
report = shardviz.analyze(examples.mlp, plan, inputs=(8, 16))
assert report.trace_error is None, report.trace_error
print("analysed", [c.axes for c in report.trace.collectives])
"""


def jax_version():
    return tuple(int(x) for x in jax.__version__.split(".")[:2])


def test_axis_names_that_crash_xla_are_refused_and_the_others_compile():
    """Which names XLA takes, found by compiling under each kind in a child.

    On jax 0.10 (Python 3.11) a non-ASCII name aborts the process and a
    backslash segfaults it; jax 0.12 compiles the first and refuses the
    second with an error. shardviz supports both, so Plan refuses both.
    """
    old = jax_version() < (0, 11)
    refused = {"modèle": "killed" if old else "compiles", "x\\y": "killed" if old else "fails"}
    accepted = ["model", "data_1", "x-y.z", "_t"]
    procs = {name: child(COMPILE_UNDER.format(name=name)) for name in refused}
    procs.update({name: child(ANALYZE_UNDER.format(name=name)) for name in accepted})
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=240)
        if name in refused:
            outcome = ("killed" if proc.returncode < 0 else
                       "compiles" if proc.returncode == 0 and "compiled" in out else "fails")
            assert outcome == refused[name], (name, proc.returncode, err[-300:])
            with pytest.raises(ShardvizError, match="character") as e:
                Plan({"batch": 2, name: 4})
            assert repr(name) in e.value.message and "ASCII letters" in e.value.hint
        else:
            assert proc.returncode == 0 and f"[('{name}',)]" in out, (name, err[-500:])
            assert Plan({"batch": 2, name: 4}).axis_names == ("batch", name)


def test_every_way_in_refuses_a_bad_axis_name(tmp_path):
    for text in ("batch=2,modèle=4", "batch=2,x\\y=4"):
        out = cli("report", "shardviz.examples:mlp", "--mesh", text, "--inputs", "8x16")
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
        assert "character" in out.stderr and "hint:" in out.stderr
    bad = Plan({"batch": 2}).to_dict() | {"mesh": {"batch": 2, "modèle": 4}}
    with pytest.raises(ShardvizError, match="character 'è'"):
        Plan.from_json(json.dumps(bad))
    with pytest.raises(ShardvizError, match="renamed"):
        Plan({"batch": 2, "model": 4}).with_axis_renamed("model", "modèle")
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(bad), encoding="utf-8")
    out = cli("report", "shardviz.examples:mlp", "--plan", str(path))
    assert out.returncode == 2 and "modèle" in out.stderr


def test_axis_sizes_and_device_counts_have_limits():
    with pytest.raises(ShardvizError, match="2,147,483,647"):
        Plan({"batch": 2**31})
    with pytest.raises(ShardvizError, match="at most 2,048"):
        shardviz.simulate_devices(20_000)
    assert shardviz.simulate_devices(np.int64(8)) == 8


@pytest.mark.parametrize("text, words", [
    ("[" * 100_000, "nested too deeply"),
    ('{"format": "shardviz.plan", "version": 1, "mesh": {"b": ' + "9" * 5000 + "}}",
     "not a valid shardviz plan"),
    (None, "expects the JSON text"),
    ({"format": "shardviz.plan"}, "expects the JSON text"),
    (b"\xff\xfe\x00binary", "not UTF-8"),
    ('{"format": "shardviz.plan", "version": 1, "mesh": {"batch": 2, "batch": 8}}',
     "repeats the key 'batch'"),
    ('{"format": "shardviz.plan", "version": true, "mesh": {"batch": 2}}', "version True"),
    ('{"format": "shardviz.plan", "version": 1, "mesh": {"batch": 2.5}}', "integers"),
    ('{"format": "shardviz.plan", "version": 1, "mesh": {"batch": NaN}}', "NaN"),
    ('{"format": "shardviz.plan", "version": 1, "mesh": {"batch": 2}, "rules": '
     '[{"key": "k", "axes": [1]}]}', "axis names and nulls"),
    ('{"format": "shardviz.plan", "version": 1, "mesh": {"batch": 2}, "batch_axis": 3}',
     "must be a string"),
])
def test_malformed_plans_give_a_shardviz_error(text, words):
    with pytest.raises(ShardvizError, match=words):
        Plan.from_json(text)


def test_a_byte_order_mark_is_accepted():
    plan = Plan({"batch": 2}, {"k": ("batch",)})
    assert Plan.from_json("\ufeff" + plan.to_json()) == plan
    assert Plan.from_json(("\ufeff" + plan.to_json()).encode("utf-8")) == plan


def test_cli_refuses_unwritable_outputs_before_any_work(tmp_path):
    for flag, target in (("--html", tmp_path / "missing" / "r.html"), ("--json", tmp_path),
                         ("--html", "/proc/shardviz-report.html")):
        out = cli("report", "shardviz.examples:mlp", "--mesh", "batch=8", flag, str(target))
        assert out.returncode == 2, (flag, target, out.stderr)
        assert out.stdout == "" and len(out.stderr.strip().splitlines()) == 1, out.stderr
    binary = tmp_path / "plan.json"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    out = cli("report", "shardviz.examples:mlp", "--plan", str(binary))
    assert out.returncode == 2 and "not UTF-8" in out.stderr


def test_a_path_that_is_not_a_string_is_a_clear_error():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=(8, 16))
    for call in (lambda: report.show(None), lambda: report.text(3), lambda: report.explain([]),
                 lambda: report.variable(None), lambda: report.indices({})):
        with pytest.raises(ShardvizError, match="must be a string"):
            call()
    with pytest.raises(ShardvizError) as e:
        report.show("up/output", index=5)
    assert "has no output 5" in e.value.message and e.value.hint.count("up/output") == 0
    with pytest.raises(ShardvizError) as e:
        report.show("up/outptu")
    assert e.value.hint.count("'up/output'") == 1  # suggested once, not once per call


# ----------------------------------------------------------- wrong answers
def test_concurrent_analyses_do_not_corrupt_each_other():
    cases = [
        (examples.mlp, examples.megatron_plan(), (8, 16)),
        (examples.transformer_block, examples.transformer_plan(), (8, 16, 64)),
        (examples.subclassed_stack, examples.megatron_plan(), (8, 16)),
    ]

    def summary(report):
        return (report.activations[["path", "call", "actual_spec"]].values.tolist(),
                sorted((c.kind, c.axes, c.bytes_per_device) for c in report.trace.collectives),
                sorted((p.kind, p.message) for p in report.problem_list),
                report.variables[["path", "spec"]].values.tolist())

    expected = [summary(shardviz.analyze(b, p, inputs=x)) for b, p, x in cases]
    results, errors = {}, []

    def work(i, round_):
        build, plan, inputs = cases[i]
        try:
            results[(i, round_)] = summary(shardviz.analyze(build, plan, inputs=inputs))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(i, r)) for r in range(3) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    for (i, _), got in results.items():
        assert got == expected[i], cases[i][0].__name__
    assert len(results) == 9
    # Keras and JAX are exactly their own again once no analysis runs.
    from jax._src import debugging
    from keras.src.distribution import distribution_lib as dl

    assert not hasattr(dl.distribute_tensor, "__wrapped__") and \
        dl.distribute_tensor.__module__ == "keras.src.distribution.distribution_lib"
    assert debugging.parse_flatten_op_sharding.__module__ == "jax._src.sharding_impls"
    assert keras.Variable.__init__.__module__ == "keras.src.backend.common.variables"


def test_axes_must_be_ordered_and_numpy_integers_are_integers():
    for axes in ({"model"}, {"model": 0}, frozenset({None})):
        with pytest.raises(ShardvizError, match="tuple or list"):
            Plan({"model": 4}, {"k": axes})
    assert Plan({"batch": np.int64(4)}).mesh == (("batch", 4),)
    report = shardviz.analyze(examples.mlp, Plan.data_parallel(8), inputs=(np.int64(8), 16))
    assert report.trace_error is None and report.trace.input_specs.shape == (8, 16)


def test_negative_indices_follow_list_insert_everywhere():
    plan = Plan({"m": 2}, {"a": ("m",), "b": ("m",), "c": ("m",)})
    keys = ["a", "b", "c"]
    moved = list(keys)
    moved.insert(-1, moved.pop(0))
    assert list(plan.with_rule_moved("a", -1).rule_keys) == moved
    added = list(keys)
    added.insert(-1, "d")
    assert list(plan.with_rule("d", ("m",), index=-1).rule_keys) == added
    assert Plan({"a": 1, "b": 1}).with_axis("c", 1, index=-1).axis_names == ("a", "c", "b")


def test_to_python_refuses_what_to_keras_refuses():
    for plan in (Plan({"batch": 2}, {"(": ("batch",)}), Plan({"batch": 2}, batch_axis="data")):
        with pytest.raises(ShardvizError) as keras_error:
            plan.to_keras()
        with pytest.raises(ShardvizError) as python_error:
            plan.to_python()
        assert python_error.value.message == keras_error.value.message


class TwoInputs(keras.Model):
    """A subclassed model called with two positional tensors."""

    def __init__(self):
        super().__init__(name="two")
        self.a = keras.layers.Dense(16, name="a")
        self.b = keras.layers.Dense(16, name="b")

    def call(self, x, y):
        return self.a(x) + self.b(y)


def two_inputs():
    model = TwoInputs()
    model(np.zeros((2, 8), "float32"), np.zeros((2, 4), "float32"))
    return model


def test_a_subclassed_model_with_two_positional_inputs_is_traced():
    plan = Plan({"batch": 2, "model": 4}, {".*a/kernel": (None, "model")})
    report = shardviz.analyze(two_inputs, plan, inputs=[(8, 8), (8, 4)])
    assert report.trace_error is None, report.trace_error
    acts = report.activations.set_index("path")
    assert acts.loc["two/a/output", "actual_spec"] == ("batch", "model")
    assert acts.loc["two/b/output", "shape"] == (8, 16)
    assert not report.scan.notes


def test_cli_devices_zero_and_a_builder_that_exits(tmp_path):
    out = cli("report", "shardviz.examples:mlp", "--devices", "0", "--mesh", "batch=8")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "positive integer" in out.stderr
    builder = tmp_path / "exits.py"
    builder.write_text("import sys\ndef build():\n    sys.exit(7)\n")
    out = cli("report", f"{builder}:build", "--mesh", "batch=8")
    assert out.returncode == 2 and "sys.exit(7)" in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("shardviz: error")]
    assert len(errors) == 1 and "sys.exit(7)" in errors[0]


# ---------------------------------------------------------- clear messages
def test_cli_errors_carry_their_hint():
    out = cli("report", "shardviz.examples:mlp", "--mesh", "batch=4,model=4", "--inputs", "8x16",
              "--rule", "up/kernel=None,modle")
    assert out.returncode == 1 and "FAIL unknown-axis" in out.stdout
    out = cli("report", "shardviz.examples:mlp", "--devices", "99999", "--mesh", "batch=8")
    assert out.returncode == 2 and "(hint: " in out.stderr


def test_trace_failures_name_the_raising_layer_without_colour_codes():
    class Loud(keras.layers.Layer):
        armed = False

        def call(self, x):
            if self.armed:
                raise ValueError("\x1b[1m\x1b[31mbad things\x1b[0m happened")
            return x

    def build():
        x = keras.Input((16,), name="x")
        loud = Loud(name="loud")
        model = keras.Model(x, loud(keras.layers.Dense(16, name="fine")(x)))
        loud.armed = True
        return model

    report = shardviz.analyze(build, Plan.data_parallel(8), inputs=(8, 16))
    (p,) = report.problems_of("trace-failed")
    assert "\x1b" not in p.message and "bad things happened" in p.message
    assert p.layer == "loud" and "in layer 'loud'" in p.message


def test_renaming_an_axis_to_nothing_blames_the_axis():
    plan = Plan({"batch": 2, "model": 4}, {"k": (None, "model")})
    with pytest.raises(ShardvizError) as e:
        plan.with_axis_renamed("model", "")
    assert "Axis 'model' cannot be renamed" in e.value.message and e.value.rule is None


def test_a_forced_abstract_mesh_says_why_nothing_ran():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=(8, 16),
                              abstract_mesh=True)
    message = report.trace_error.message
    assert "abstract_mesh=True" in message and "only 8 exist" not in message


def test_counts_read_in_the_singular():
    report = shardviz.analyze(examples.mlp, Plan({"batch": 2, "model": 4},
                                                 {"nothing/kernel": (None, "model"),
                                                  ".*up/kernel": (None, "model"),
                                                  ".*down/kernel": ("model", None)}),
                              inputs=(8, 16))
    from shardviz.render.text import summary_line

    line = summary_line(report)
    assert "1 warning," in line and "1 collective," in line and "0 errors" in line
    assert "1 warning>" in repr(report)


# --------------------------------------------------------------- exit codes
def test_report_exit_codes():
    broken = ["report", "shardviz.examples:mlp", "--devices", "8", "--mesh", "batch=2,model=4",
              "--rule", "up/kernel=model,model"]
    out = cli(*broken)
    assert out.returncode == 1 and "FAIL duplicate-axis" in out.stdout
    assert cli(*broken, "--fail-on", "never").returncode == 0
    warned = ["report", "shardviz.examples:mlp", "--devices", "8", "--mesh", "batch=8",
              "--rule", "nothing=batch"]
    assert cli(*warned).returncode == 0
    assert cli(*warned, "--fail-on", "warning").returncode == 1
    assert cli("report", "shardviz.examples:mlp", "--mesh", "batch").returncode == 2
    help_text = cli("report", "--help").stdout
    assert "exit codes" in help_text and "--fail-on never" in help_text


# ------------------------------------------------------- incremental matching
def test_incremental_matching_equals_a_fresh_match():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from shardviz.matching.match import RuleMatcher

    paths = [f"block_{i}/{name}/{w}" for i in range(6) for name in ("up", "down", "attn")
             for w in ("kernel", "bias")]
    keys = st.sampled_from([r"block_\d+/up/kernel", ".*kernel", ".*bias", "block_1/up/kernel",
                            "(", ".*(up|down)/.*", "nothing", r"block_[0-2]/.*", ".*"])

    @settings(max_examples=150, deadline=None)
    @given(st.lists(st.lists(keys, min_size=1, max_size=5), min_size=2, max_size=6))
    def check(sequence):
        matcher = RuleMatcher(paths)
        for rule_keys in sequence:
            assert matcher.match(rule_keys) == RuleMatcher(paths).match(rule_keys)
            for j in range(len(rule_keys)):  # then edit one key in place
                edited = list(rule_keys)
                edited[j] = ".*down/.*"
                assert matcher.match(edited) == RuleMatcher(paths).match(edited)

    check()


def test_the_explorer_refuses_a_bad_axis_name_and_keeps_its_plan():
    app = shardviz.Explorer(examples.mlp, inputs=(8, 16), plan=examples.megatron_plan())
    before = app.plan
    app.mesh_editor.rows.children[1].children[0].value = "modèle"
    assert app.plan == before
    assert "character" in app.mesh_editor.message.value


def test_a_train_step_never_imports_tensorflow():
    """TensorFlow (installed with keras-hub) would print its start-up noise
    into notebooks."""
    proc = child("""
        import sys, shardviz
        shardviz.simulate_devices(8)
        from shardviz import examples
        report = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=(8, 16),
                                  train_step=True)
        assert report.trace_error is None, report.trace_error
        print("tensorflow" in sys.modules)
    """)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-2000:]
    assert out.strip() == "False"
