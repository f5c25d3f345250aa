"""The command line, run as a user runs it: a subprocess, with exit codes."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

import shardviz
from shardviz import cli, examples
from shardviz.report.serialize import frames_from_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("XLA_FLAGS", None)
    out = subprocess.run([sys.executable, "-m", "shardviz", *args], capture_output=True, text=True,
                         cwd=cwd or ROOT, env=env, timeout=300)
    assert "Traceback" not in out.stderr, out.stderr
    return out


MLP = ["report", "shardviz.examples:mlp", "--devices", "8", "--mesh", "batch=2,model=4"]
MEGATRON = ["--rule", ".*up/kernel=None,model", "--rule", ".*up/bias=model",
            "--rule", ".*down/kernel=model,None"]


def test_report_prints_tables_and_writes_html_and_json(tmp_path):
    html_file, json_file = tmp_path / "r.html", tmp_path / "r.json"
    out = run(*MLP, *MEGATRON, "--inputs", "8x16", "--html", str(html_file), "--json",
              str(json_file))
    assert out.returncode == 0, out.stderr
    for words in ("Variables", "up/kernel", "P(None, 'model')", "Activations", "all-reduce",
                  "Memory per device"):
        assert words in out.stdout
    assert "compiling" in out.stderr  # progress while it compiles
    page = html_file.read_text()
    assert "Plan(mesh=" not in page and "<th>axis</th>" in page  # the plan as tables
    plan = shardviz.Plan({"batch": 2, "model": 4}, {".*up/kernel": (None, "model"),
                                                    ".*up/bias": ("model",),
                                                    ".*down/kernel": ("model", None)})
    report = shardviz.analyze(examples.mlp, plan, inputs=(8, 16))
    for path in report.variables["path"]:
        assert path in page
    images = re.findall(r'<img alt="[^"]*" width="\d+" src="data:image/png;base64,', page)
    assert len(images) == len(report.pictures()) == 5  # mesh, memory, variables, flow, peak
    assert "http" not in page.replace("http-equiv", "")  # opens offline
    frames = frames_from_json(json_file.read_text())
    for name in ("variables", "rules", "activations", "problems"):
        assert frames[name].equals(getattr(report, name)), name
    collectives = frames["collectives"]
    assert collectives[["kind", "layer", "axes"]].equals(report.collectives[["kind", "layer", "axes"]])
    data = json.loads(json_file.read_text())
    assert shardviz.Plan.from_dict(data["plan"]) == plan


def test_guards_fail_with_one_line_per_failure(tmp_path):
    out = run(*MLP, "--rule", "d1/kernel=None,model", "--fail-on", "unused-rule,conflict", "-q")
    assert out.returncode == 1
    fails = [line for line in out.stdout.splitlines() if line.startswith("FAIL")]
    assert fails == [fails[0]] and fails[0].startswith("FAIL unused-rule d1/kernel:")
    out = run(*MLP, "--max-replicated-bytes", "1KB", "-q")
    assert out.returncode == 1
    assert [line.split(":")[0] for line in out.stdout.splitlines() if line.startswith("FAIL")] == [
        "FAIL replicated-large up/kernel", "FAIL replicated-large down/kernel"]
    out = run(*MLP, *MEGATRON, "--fail-on", "error", "--max-replicated-bytes", "64MB", "-q")
    assert out.returncode == 0 and "FAIL" not in out.stdout


def test_every_command_takes_named_inputs_for_a_model_that_takes_a_dict(tmp_path):
    builder = tmp_path / "dict_model.py"
    builder.write_text(textwrap.dedent("""
        import keras

        def build():
            a = keras.Input((16,), name="a")
            b = keras.Input((16,), name="b")
            h = keras.layers.Dense(64, name="up")(keras.layers.Add()([a, b]))
            return keras.Model({"a": a, "b": b}, keras.layers.Dense(16, name="down")(h))
    """))
    named = ["--inputs", "a=8x16", "--inputs", "b=8x16"]
    out = run("report", f"{builder}:build", "--devices", "8", "--mesh", "batch=2,model=4",
              *MEGATRON, *named, "-q")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "forward pass" in out.stdout
    audit = run("audit", f"{builder}:build", "--mesh", "batch=2,model=4", *MEGATRON, *named,
                "--no-compare", "-q")
    assert audit.returncode == 0 and "0 findings" in audit.stdout, audit.stdout + audit.stderr
    # Every variable left whole is a finding with a floor of 1 byte: the bias of "down".
    each = run("audit", f"{builder}:build", "--mesh", "batch=2,model=4", *MEGATRON,
               "--replicated-bytes", "1", "-q")
    assert each.returncode == 1 and "replicated [batch=2 x model=4]: down/bias" in each.stdout
    bad = run("audit", f"{builder}:build", "--mesh", "batch=2,model=4", *MEGATRON,
              "--replicated-bytes", "lots")
    assert bad.returncode == 2 and "--replicated-bytes 'lots'" in bad.stderr
    # Named and unnamed together: which to give, in one line.
    mixed = run("audit", f"{builder}:build", "--mesh", "batch=2,model=4", *MEGATRON,
                "--inputs", "a=8x16", "--inputs", "8x16")
    assert mixed.returncode == 2 and "name every input" in mixed.stderr
    # A name the model does not take, or a wrong length, is the user's to fix: exit 2.
    wrong = run("audit", f"{builder}:build", "--mesh", "batch=2,model=4", *MEGATRON,
                "--inputs", "a=8x16", "--inputs", "b=8x12")
    assert wrong.returncode == 2 and "Input 'b' of model" in wrong.stderr, wrong.stderr


def test_audit_prints_progress_on_stderr_and_finds_a_map_class_as_it_finds_the_builder(
        tmp_path):
    (tmp_path / "maps.py").write_text(textwrap.dedent("""
        import keras
        from shardviz import examples


        def build():
            return examples.mlp()


        def own():  # a model of the map's own class
            mlp = examples.mlp()
            return Megatron(mlp.inputs, mlp.outputs, name="mlp")


        class Megatron(keras.Model):
            @staticmethod
            def get_layout_map(device_mesh):
                layout_map = keras.distribution.LayoutMap(device_mesh)
                layout_map[".*up/kernel"] = (None, "model")
                layout_map[".*down/kernel"] = ("model", None)
                return layout_map
    """))
    out = run("audit", "maps:build", "--layout-map", "maps:Megatron", "--mesh",
              "batch=2,model=4", cwd=tmp_path)
    # The class is found from the working directory, as the builder is; its map is for
    # models of its own class, which the audit says.
    assert out.returncode == 2 and "is a Functional, not a Megatron" in out.stderr, out.stderr
    out = run("audit", "maps:build", "--mesh", "batch=2,model=4", *MEGATRON, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[0].startswith("shardviz.audit of")  # findings only
    assert "audit: the map built on" in out.stderr
    # Named by file, the builder and the class come from one load of it: the model is a
    # Megatron of the same class, and its map audits clean.
    out = run("audit", "maps.py:own", "--layout-map", "maps.py:Megatron", "--mesh",
              "batch=2,model=4", cwd=tmp_path)
    assert out.returncode == 0 and "0 findings" in out.stdout, out.stdout + out.stderr


def test_plan_file_and_a_builder_file(tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(examples.megatron_plan().to_json())
    builder = tmp_path / "models.py"
    builder.write_text(textwrap.dedent("""
        from shardviz import examples

        def build():
            return examples.mlp(d_model=32, hidden=128)
    """))
    out = run("report", f"{builder}:build", "--devices", "8", "--plan", str(plan_file), "-q")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("mlp: 4 variables, 8,352 params")


def test_one_inputs_flag_may_hold_several_inputs_separated_by_commas():
    from shardviz.cli.options import inputs_of

    both = ["token_ids=8x16:int32", "padding_mask=8x16:int32"]
    assert inputs_of([",".join(both)]) == inputs_of(both)
    assert inputs_of(["8x16,8:int32"]) == inputs_of(["8x16", "8:int32"])


@pytest.mark.parametrize("args, words", [
    (["report", "nosuch.module:build", "--mesh", "batch=8"], "cannot import 'nosuch.module'"),
    (["report", "shardviz.examples:nothing", "--mesh", "batch=8"], "has no 'nothing'"),
    (["report", "shardviz.examples", "--mesh", "batch=8"], "is not MODULE_OR_FILE:BUILDER"),
    (["report", "x:y", "--mesh", "batch:2"], "is not NAME=SIZE"),
    (["report", "x:y", "--mesh", "batch=2", "--rule", "nokey"], "is not KEY=AXES"),
    (["report", "x:y", "--mesh", "batch=2", "--rule", "k=(model)"], "is not a mesh axis name"),
    (["report", "x:y", "--mesh", "batch=2", "--inputs", "8by16"], "is not a shape like 8x128"),
    (["report", "x:y", "--mesh", "batch=2", "--inputs", "8x16:float99"],
     "'float99' is not a numeric or bool dtype"),
    (["report", "x:y", "--mesh", "batch=2", "--inputs", "8x16:str"],
     "'str' is not a numeric or bool dtype"),
    (["report", "x:y", "--mesh", "batch=2", "--inputs", "a=8x16:int32,b=8x16:int3"],
     "--inputs b= '8x16:int3': 'int3' is not a numeric or bool dtype"),
    (["report", "x:y", "--plan", "/nonexistent/plan.json"], "cannot read plan file"),
    (["report", "x:y"], "give a plan"),
    (["report", "x:y", "--mesh", "batch=2", "--fail-on", "oops"], "unknown kind 'oops'"),
    (["report", "x:y", "--mesh", "batch=2", "--max-replicated-bytes", "lots"], "not a size"),
    (["report", "x:y", "--mesh", "batch=2", "--labels", "8x16"], "add --train-step"),
    (["report", "x:y", "--mesh", "batch=2", "--train-step", "--labels", "8xx"],
     "--labels '8xx' is not a shape"),
    (["report", "shardviz.examples:mlp", "--mesh", "batch=9", "--target", "v5e:3x3", "-q"],
     "No v5e slice"),
])
def test_bad_input_gives_one_line_and_exit_code_2(args, words):
    out = run(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardviz: error:") and words in lines[0], lines


def test_builder_that_raises_and_unreadable_plan(tmp_path):
    builder = tmp_path / "broken.py"
    builder.write_text("def build():\n    raise ValueError('no such layer size: 0')\n")
    out = run("report", f"{builder}:build", "--mesh", "batch=8", "--devices", "8")
    assert out.returncode == 2
    errors = [line for line in out.stderr.splitlines() if line.startswith("shardviz: error:")]
    assert len(errors) == 1 and "no such layer size: 0" in errors[0]
    bad = tmp_path / "plan.json"
    bad.write_text("{oops")
    out = run("report", "shardviz.examples:mlp", "--plan", str(bad))
    assert out.returncode == 2 and "not valid JSON" in out.stderr


def test_demo_writes_its_report(tmp_path):
    out = run("demo", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    page = (tmp_path / "demo-report.html").read_text()
    assert "attn/query/kernel" in page and "data:image/png;base64," in page
    assert "deliberate mistake" in out.stdout and "all-reduce" in out.stdout


def test_version_and_help():
    assert run("--version").stdout.strip() == f"shardviz {shardviz.__version__}"
    out = run("report", "--help")
    assert out.returncode == 0 and "--fail-on" in out.stdout and "--max-replicated-bytes" in out.stdout


def test_parsers_in_process():
    assert cli.parse_mesh("data=4, model=2") == {"data": 4, "model": 2}
    assert cli.parse_rule("a=b=model") == ("a=b", ("model",))
    assert cli.parse_rule("k=-,model,None") == ("k", (None, "model", None))
    assert cli.parse_bytes("1.5 MiB") == 1572864
    with pytest.raises(cli.UsageError, match="appears twice"):
        cli.parse_mesh("a=1,a=2")


def test_a_severity_guard_fails_on_every_problem_at_least_that_severe():
    plan = shardviz.Plan({"batch": 2, "model": 4},
                         {"d1/kernel": (None, "model"), "up/kernel": (None, "model", None)})
    report = shardviz.analyze(examples.mlp, plan)  # one warning, one error
    kinds = lambda lines: sorted(line.split()[1] for line in lines)  # noqa: E731
    assert kinds(cli.guard_failures(report, {"error"}, None)) == ["rank-mismatch"]
    assert kinds(cli.guard_failures(report, {"warning"}, None)) == ["rank-mismatch", "unused-rule"]
    # An error always fails the run; other kinds only when asked; never: nothing.
    assert kinds(cli.guard_failures(report, {"unused-rule"}, None)) == ["rank-mismatch",
                                                                         "unused-rule"]
    assert kinds(cli.guard_failures(report, set(), None)) == ["rank-mismatch"]
    assert cli.guard_failures(report, {"never"}, None) == []


def test_report_for_a_tpu_target_and_the_fit_guard(tmp_path):
    pytest.importorskip("libtpu")
    out = run(*MLP, *MEGATRON, "--inputs", "8x16", "--target", "v5e:2x4", "--times")
    assert out.returncode == 0, out.stderr
    assert "of v5e:2x4" in out.stdout and "ici" in out.stdout and "fits" in out.stdout
    # --times: where the step's time goes, by kind and by layer, in 80 columns
    times = out.stdout.split("Where the step's time goes")[1]
    assert "By kind of operation:" in times and "matmul" in times
    assert "The layers that take the most" in times
    assert all(len(line) <= 80 for line in times.splitlines())
    assert "TPU_WORKER_HOSTNAMES" not in out.stderr  # libtpu's noise stays out
    bad = run(*MLP, *MEGATRON, "--target", "v5e:4x4")
    assert bad.returncode == 2 and "has 8 devices, but the target v5e:4x4 has 16" in bad.stderr
    unknown = run(*MLP, "--target", "tpu9")
    assert unknown.returncode == 2 and "Known targets" in unknown.stderr
    models = tmp_path / "big.py"
    models.write_text(textwrap.dedent("""
        from shardviz import examples

        def build():
            return examples.mlp(d_model=16384, hidden=131072)
    """))
    huge = run("report", f"{models}:build", "--mesh", "batch=4", "--target", "v5e:2x2",
               "--fail-on", "does-not-fit")
    assert huge.returncode == 1 and "does-not-fit" in huge.stdout


@pytest.mark.parametrize("width", [80, 120])
def test_terminal_tables_fit_the_width_and_never_break_a_word(width):
    from shardviz.render.text import report_text

    plan = shardviz.Plan({"batch": 2, "model": 4}, {".*up/kernel": (None, "model"),
                                                    "nothing": ("model",)})
    report = shardviz.analyze(lambda: examples.llama(), plan, inputs=[(8, 16)])
    out = report_text(report, width=width, max_rows=None)
    assert max(len(line) for line in out.splitlines()) <= width
    cells = {c.strip() for line in out.splitlines() for c in line.split("│")}
    for path in report.variables["path"]:
        assert path in cells, path                       # every path whole, in one cell
    statuses = set(report.variables["status"])
    assert statuses <= cells                             # "replicated", never "replic"/"ated"
    if width == 80:
        assert "dtype, shape, shard, rule not shown at 80 columns" in out
    else:
        assert {"float32", "int32"} & cells or "dtype not shown at 120 columns" in out


def test_explain_prints_why_and_the_fix_and_puts_them_in_the_html(tmp_path):
    html_file, json_file = tmp_path / "r.html", tmp_path / "r.json"
    out = run(*MLP, "--rule", ".*up/kernel=None,model", "--rule", ".*down/kernel=None,model",
              "--inputs", "8x16", "--explain", "--html", str(html_file), "--json", str(json_file),
              "--fail-on", "never")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Why each collective is there" in text and "all-gather at down" in text
    assert "Fix: rule `.*down/kernel`: P(None, 'model') → P('model', None)" in text
    assert "dense.py:" in text
    assert max(len(line) for line in text.split("Why each collective is there")[1]
               .splitlines()) <= 100
    page = html_file.read_text()
    assert "Why each collective is there" in page and "<code>.*down/kernel</code>" in page
    data = json.loads(json_file.read_text())
    (why,) = data["explanations"]
    assert why["kind"] == "all-gather" and why["fix"]["rules"][1]["axes"] == ["model", None]


def test_explain_without_inputs_says_why_there_is_nothing():
    out = run(*MLP, *MEGATRON, "--explain")
    assert out.returncode == 0, out.stderr
    assert "No collectives to explain: the forward pass did not run (pass --inputs)." in out.stdout


def test_suggest_writes_the_best_plan_and_it_is_a_plan_keras_accepts(tmp_path):
    best = tmp_path / "best.json"
    out = run("suggest", "shardviz.examples:mlp", "--devices", "8", "--inputs", "8x16",
              "--plan-out", str(best), "--top", "3")
    assert out.returncode == 0, out.stderr
    assert "data parallel" in out.stdout and "communicated" in out.stdout
    plan = shardviz.Plan.from_json(best.read_text())
    report = shardviz.analyze(examples.mlp, plan)
    assert report.errors == []


def test_suggest_ranks_a_plan_of_your_own_with_the_candidates(tmp_path):
    mine = tmp_path / "mine.json"
    mine.write_text(shardviz.Plan({"batch": 2, "model": 4}, {"up/kernel": ("batch", "model"),
                                                             "down/kernel": ("model", "batch")}
                                  ).to_json())
    out = run("suggest", "shardviz.examples:mlp", "--devices", "8", "--top", "50",
              "--with-plan", str(mine))
    assert out.returncode == 0, out.stderr
    assert str(mine) in out.stdout
    other = tmp_path / "four.json"
    other.write_text(shardviz.Plan({"batch": 2, "model": 2}, {}).to_json())
    out = run("suggest", "shardviz.examples:mlp", "--devices", "8", "--with-plan", str(other))
    assert out.returncode == 2 and "suggest plans for 8" in out.stderr


def test_suggest_with_a_budget_nothing_meets_exits_1():
    out = run("suggest", "shardviz.examples:mlp", "--devices", "8", "--budget", "16")
    assert out.returncode == 1 and "No plan fits within 16" in out.stdout


def test_sweep_prints_every_mesh_and_draws_it(tmp_path):
    png = tmp_path / "sweep.png"
    out = run("sweep", "shardviz.examples:transformer_block", "--devices", "64",
              "--rule", ".*attn/(query|key|value)/kernel=None,model,None", "--png", str(png))
    assert out.returncode == 0, out.stderr
    table = out.stdout.split("\n\n")[0].strip().splitlines()
    assert len(table) == 1 + 7 and "batch=8 × model=8" in out.stdout
    assert "does not divide" in out.stdout
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert run("sweep", "shardviz.examples:mlp", "--devices", "8").returncode == 2


def test_labels_reach_the_train_step_as_fit_takes_them(tmp_path):
    builder = tmp_path / "compiled.py"
    builder.write_text(textwrap.dedent("""
        import keras

        def build():
            x = keras.Input((16,))
            m = keras.Model(x, keras.layers.Dense(4, name="head")(x))
            m.compile(optimizer="adam",
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            return m
    """))
    base = ["report", f"{builder}:build", "--devices", "2", "--mesh", "batch=2",
            "--inputs", "8x16", "--train-step"]
    missing = run(*base)
    assert missing.returncode == 1 and "needs labels" in missing.stdout
    out = run(*base, "--labels", "8:int32", "--json", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    assert "sparse_categorical_crossentropy" in out.stdout


def test_a_narrow_table_drops_only_columns_it_has():
    from shardviz.render.text import fitted_table

    table = fitted_table("t", [("path", "left"), ("bytes", "right")],
                         [["a/very/long/path/" * 4, "123"]], 20, drop=("pass", "bytes"))
    assert [c.header for c in table.columns] == ["path"]
