"""Explaining collectives: their source lines, the layouts that meet, and
fixes found by recompiling counterfactual plans."""

import os

import keras
import pytest

import shardviz
from shardviz import Plan, ShardvizError, examples
from shardviz.explain import explain_collective

X8 = (8, 16)
WRONG_PAIR = Plan({"batch": 2, "model": 4}, {".*up/kernel": (None, "model"),
                                             ".*down/kernel": (None, "model")})


def source_exists(source: str) -> bool:
    file, line = source.rsplit(":", 1)
    if not os.path.exists(file):
        return False
    with open(file, encoding="utf-8") as f:
        return 1 <= int(line) <= sum(1 for _ in f)


def test_the_wrong_pair_is_fixed_by_the_transposed_split():
    report = shardviz.analyze(examples.mlp, WRONG_PAIR, inputs=X8)
    rows = report.collectives
    assert rows[["kind", "layer"]].values.tolist() == [["all-gather", "down"]]
    assert set(rows.loc[0, "operands"]) == {"up/output", "down/kernel"}
    assert source_exists(rows.loc[0, "source"])
    assert rows.loc[0, "source"].replace("\\", "/").rsplit(":", 1)[0].endswith(
        "keras/src/layers/core/dense.py")

    why = report.why(0)
    assert ".*down/kernel" in why.rules
    assert "`.*down/kernel`" in why.text and "all-gathers the input" in why.text
    assert why.fix is not None
    fixed = dict((r.key, r.axes) for r in why.fix.rules)
    assert fixed[".*down/kernel"] == ("model", None)
    assert fixed[".*up/kernel"] == (None, "model")

    again = shardviz.analyze(examples.mlp, why.fix, inputs=X8)
    kinds = again.collectives["kind"].tolist()
    assert "all-gather" not in kinds and kinds.count("all-reduce") == 1
    assert "removes the all-gather at `down`" in why.fix_cost
    assert "Variables per device are unchanged" in why.fix_cost
    # The explanation is kept, and shows itself.
    assert report.why(0) is why
    assert "all-gather" in why._repr_html_() and "Fix:" in str(why)


def test_the_megatron_all_reduce_is_the_price_of_the_split():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=X8)
    assert report.collectives["kind"].tolist() == ["all-reduce"]
    why = report.why(report.collectives.iloc[0])  # a row is accepted too
    assert why.fix is None
    assert "price of splitting the contraction" in why.text
    assert "price of splitting" in why.fix_cost
    assert len(why.tried) >= 2 and not any(t.removes for t in why.tried)


def test_every_collective_of_the_transformer_block_is_explained():
    report = shardviz.analyze(examples.transformer_block, examples.transformer_plan(),
                              inputs=(8, 16, 64))
    assert len(report.collectives) >= 2
    rule_keys = set(report.plan.rule_keys)
    for i, why in enumerate(report.explanations()):
        assert source_exists(report.collectives.loc[i, "source"]), report.collectives.loc[i]
        assert why.text.strip()
        assert (any(f"`{k}`" in why.text for k in rule_keys)
                or "no rule: the default replicated layout" in why.text)
        assert why.rules and set(why.rules) <= rule_keys


class _OwnMatmul(keras.layers.Layer):
    """A layer whose matmul is written in this file: its source is ours."""

    def build(self, shape):
        self.kernel = self.add_weight(shape=(shape[-1], 32), name="kernel")

    def call(self, x):
        return keras.ops.matmul(x, self.kernel)  # the line the source must name


class _OwnModel(keras.Model):
    def __init__(self):
        super().__init__(name="own")
        self.up = keras.layers.Dense(64, name="up")
        self.mix = _OwnMatmul(name="mix")

    def call(self, x):
        return self.mix(self.up(x))


def test_a_subclassed_models_own_line_is_the_source():
    def build():
        model = _OwnModel()
        model(keras.ops.zeros((8, 16)))
        return model

    plan = Plan({"batch": 2, "model": 4}, {".*up/kernel": (None, "model"),
                                          ".*mix/kernel": (None, "model")})
    report = shardviz.analyze(build, plan, inputs=X8)
    rows = report.collectives
    assert len(rows) >= 1
    source = rows.loc[0, "source"]
    file, line = source.rsplit(":", 1)
    assert os.path.samefile(file, __file__)
    with open(__file__, encoding="utf-8") as f:
        assert "the line the source must name" in f.read().splitlines()[int(line) - 1]


def test_a_collective_with_no_rule_says_so():
    report = shardviz.analyze(examples.mlp, Plan.data_parallel(8), inputs=X8, train_step=True)
    rows = report.collectives
    assert len(rows) and "all-reduce" in rows["kind"].tolist()
    i = rows.index[rows["kind"] == "all-reduce"][0]
    why = explain_collective(report, int(i), search=False)
    assert "no rule: the default replicated layout" in why.text
    assert why.rules == ()


def test_bad_questions_get_clear_errors():
    report = shardviz.analyze(examples.mlp, WRONG_PAIR, inputs=X8)
    with pytest.raises(ShardvizError, match="there is no collective 5"):
        report.why(5)
    with pytest.raises(ShardvizError, match="no collective"):
        report.why("up")
    no_pass = shardviz.analyze(examples.mlp, WRONG_PAIR)
    with pytest.raises(ShardvizError, match="forward pass did not run"):
        no_pass.why(0)


def test_a_row_of_another_report_is_refused():
    report = shardviz.analyze(examples.mlp, WRONG_PAIR, inputs=X8)
    other = shardviz.analyze(examples.mlp, examples.megatron_plan(2, 4), inputs=X8)
    assert other.collectives.iloc[0]["kind"] != report.collectives.iloc[0]["kind"]
    with pytest.raises(ShardvizError, match="comes from another report") as info:
        report.why(other.collectives.iloc[0])
    assert "other_report.why(row)" in info.value.hint
    # Its own rows, and an equal report's, are explained.
    assert explain_collective(report, report.collectives.iloc[0], search=False).layer == "down"
    again = shardviz.analyze(examples.mlp, WRONG_PAIR, inputs=X8)
    assert explain_collective(report, again.collectives.iloc[0], search=False).layer == "down"


def test_a_bad_output_rule_is_named_where_it_causes_the_collective():
    """The site's own /output rule is part of the cause: the explanation and
    its rules name it, and the fix that drops it follows from them."""
    plan = Plan({"batch": 2, "model": 4}, {".*up/kernel": (None, "model"),
                                           ".*down/kernel": ("model", None),
                                           ".*down/output": (None, "model")})
    report = shardviz.analyze(examples.mlp, plan, inputs=X8)
    c = report.collectives
    (i,) = c.index[(c["kind"] == "all-gather") & (c["layer"] == "down")]
    why = report.why(i)
    assert why.fix_change == "drop /output rule `.*down/output`"
    assert ".*down/output" in why.rules
    assert "rule 2 `.*down/output` asks its result `down/output` (8, 16) to be " \
        "P(None, 'model')" in why.text
    assert any(m.kind == "result" and m.rule == ".*down/output" for m in why.meetings)


def _reshaper():
    inp = keras.Input((8,))
    h = keras.layers.Dense(16, name="dense")(inp)
    return keras.Model(inp, keras.layers.Reshape((4, 4), name="reshape")(h), name="reshaper")


def test_xla_resharding_warnings_become_problems_with_their_layer(capfd):
    """Moving a split to another dim and another mesh axis at once is what
    XLA's partitioner cannot do efficiently: it logs an involuntary full
    rematerialization on stderr. shardviz reports it with its layer."""
    plan = Plan({"batch": 2, "model": 4}, {"dense/kernel": (None, "model"),
                                          "dense/output": ("batch", None),
                                          "reshape/output": (None, None, "model")})
    capfd.readouterr()
    report = shardviz.analyze(_reshaper, plan, inputs=(8, 8))
    (problem,) = report.problems_of("xla-resharding")
    assert problem.severity == "warning" and problem.layer == "reshape"
    assert "replicates the whole tensor" in problem.message
    assert "reshape.py:" in problem.message
    assert "`dense/output`" in problem.message and "`reshape/output`" in problem.message
    assert "Involuntary" not in capfd.readouterr().err  # taken, not printed

    calm = shardviz.analyze(_reshaper, plan.without_rule("reshape/output"), inputs=(8, 8))
    assert not calm.problems_of("xla-resharding")


def test_a_gradient_reduction_is_the_price_of_data_parallelism_and_has_no_model_source():
    report = shardviz.analyze(examples.mlp, WRONG_PAIR, inputs=X8, train_step=True)
    rows = report.collectives
    backward = rows.index[(rows["pass"] == "backward") & (rows["axes"] == ("batch",))]
    assert len(backward)
    why = report.why(int(backward[0]))
    assert "price of data parallelism" in why.text and why.fix is None
    assert "forward-pass collectives" in why.fix_cost
    for source in rows["source"]:  # never the line that called analyze
        assert not source or not source.startswith(__file__)
    with pytest.raises(ShardvizError, match="one collective, and this is a table"):
        report.why(rows.iloc[0:1])


def test_on_a_train_step_plans_are_compared_on_forward_passes_compiled_once():
    """A train step costs several forward passes to compile: why() judges
    plans by their forward passes (where the collective is), says so, tells
    progress, and compiles no plan twice for the report's other rows."""
    plan = Plan({"batch": 2, "model": 4}, {".*up/kernel": (None, "model"),
                                           ".*down/kernel": (None, "model")})
    report = shardviz.analyze(examples.mlp, plan, inputs=X8, train_step=True)
    forward = report.collectives.index[report.collectives["pass"] == "forward"].tolist()
    assert len(forward) >= 1
    lines: list[str] = []
    why = report.why(forward[0], progress=lines.append)
    assert why.tried and all(not t.report.trace.train_step for t in why.tried if t.report)
    assert why.fix is not None and "train step was not recompiled" in why.fix_cost
    assert lines[0].startswith(f"why({forward[0]}): plan 1 of ")
    assert lines[0].endswith("compiling this plan's forward pass")
    assert any("trying" in line for line in lines) and "plans tried" in lines[-1]

    calls = []
    real = report._reanalyse
    report._reanalyse = lambda *a, **k: calls.append(a) or real(*a, **k)
    again = explain_collective(report, forward[0])
    assert calls == [] and again.fix == why.fix


CTRL_C = """
import os, signal, sys, threading, time
import shardviz
shardviz.simulate_devices(8)
from shardviz import Plan, examples
plan = Plan({"batch": 2, "model": 4}, {".*up/kernel": (None, "model"),
                                       ".*down/kernel": (None, "model")})
report = shardviz.analyze(examples.transformer_block, examples.transformer_plan(),
                          inputs=(8, 16, 64), train_step=True)
real = report._reanalyse
calls = []
def slow(*a, **k):
    # Ctrl-C during why's second recompile, while it waits: a load on the machine
    # cannot move it outside why.
    calls.append(1)
    print("compiling", flush=True)
    if len(calls) == 2:
        threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        time.sleep(5)
    return real(*a, **k)
report._reanalyse = slow
try:
    report.why(0, progress=False)
    print("not interrupted", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
report._reanalyse = real
why = report.why(0, progress=False)
print("explained", why.kind, flush=True)
other = shardviz.analyze(examples.mlp, plan, inputs=(8, 16))
print("analysed", len(other.collectives), other.why(0, progress=False).fix is not None, flush=True)
sys.stderr.write("stderr works\\n")
"""


def test_ctrl_c_during_why_leaves_the_process_usable(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    # Ctrl-C may land inside a print, so "interrupted" can end a line.
    lines = done.stdout.splitlines()
    assert "not interrupted" not in done.stdout, done.stdout
    assert any(line.endswith("interrupted") for line in lines), done.stdout
    assert "explained" in done.stdout and "analysed 1 True" in done.stdout, done.stdout
    assert "stderr works" in done.stderr


def test_explaining_leaves_the_report_as_analyze_made_it():
    """Explanations live in a cache of their own: the Report's attributes
    are the same before and after why()."""
    report = shardviz.analyze(examples.mlp, WRONG_PAIR, inputs=X8)
    before = dict(vars(report))
    why = report.why(0, progress=False)
    after = {k: v for k, v in vars(report).items() if k in before}
    import functools

    from shardviz import Report

    cached = {n for n, v in vars(Report).items() if isinstance(v, functools.cached_property)}
    assert set(vars(report)) - set(before) <= cached  # frames computed on demand, nothing else
    assert all(after[k] is before[k] for k in before)
    assert report.explained == {0: why} and report.why(0) is why
