"""Training settings (dtype policy, LoRA, quantization, remat, optimizer by
name) are analysed as the program ``model.fit`` runs with them. Truth comes
from outside shardviz: the model built as a user builds it (the global dtype
policy, a ``keras.RematScope``, ``model.quantize``, ``layer.enable_lora``),
trained with ``fit`` under the plan's distribution, and Keras's own jitted
step lowered and compiled here on the same state."""

import contextlib
import re

import numpy as np
import pytest
from keras_programs import fit_and_compile

import shardviz
from shardviz import ShardvizError, examples
from shardviz.model.tuning import Tuning
from shardviz.trace import hlo

shardviz.simulate_devices(8)
import keras  # noqa: E402

X = np.linspace(-1, 1, 8 * 16, dtype="float32").reshape(8, 16)
PLAN = examples.megatron_plan()


def _compiled_mlp(optimizer="adam"):
    m = examples.mlp()
    m.compile(optimizer=optimizer, loss="mse")
    return m


@contextlib.contextmanager
def _as_a_user_builds(dtype=None, remat=None):
    before = keras.config.dtype_policy()
    if dtype:
        keras.config.set_dtype_policy(dtype)
    try:
        with keras.RematScope(**remat) if remat else contextlib.nullcontext():
            yield
    finally:
        keras.config.set_dtype_policy(before)


def _users_program(dtype=None, lora_rank=None, quantize=None, remat=None, optimizer="adam"):
    """The model built and tuned by hand, fit once, and the step fit ran,
    compiled here; with the model's variables and optimizer slots."""
    dist = PLAN.to_keras()
    with dist.scope():
        with _as_a_user_builds(dtype, remat):
            model = _compiled_mlp(optimizer)
        if quantize:
            model.quantize(quantize)
        if lora_rank:
            for layer in model.layers:
                layer.trainable = False
            for layer in model.layers:
                if isinstance(layer, keras.layers.Dense):
                    layer.trainable = True
                    layer.enable_lora(lora_rank)
        compiled = fit_and_compile(dist, model, X, X)
    variables = sorted((v.path, str(v.dtype), tuple(v.shape), bool(v.trainable))
                       for v in model.variables)
    slots = sorted((_slot(v.path), str(v.dtype), tuple(v.shape))
                   for v in model.optimizer.variables)
    return compiled, variables, slots


def _instructions(text):
    """The entry computation's instructions, names and order left out."""
    entry = text[text.index("\nENTRY"):]
    entry = re.sub(r", metadata=\{[^}]*\}|%[\w.-]+|param[.\d]*|stack_frame_id=\d+", "", entry)
    return sorted(entry.splitlines())


def _slot(path):
    """A slot's path without its optimizer's name, which Keras numbers per process."""
    return path.partition("/")[2]


SETTINGS = [
    dict(dtype="bfloat16"),
    dict(dtype="mixed_bfloat16"),
    dict(dtype="float16"),
    dict(lora_rank=4),
    dict(quantize="int8"),
    dict(quantize="int4"),
    dict(quantize="float8"),
    dict(remat="full"),
    dict(remat="activations"),
    dict(optimizer="adamw"),
    dict(dtype="bfloat16", quantize="int8", lora_rank=2),
]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in
                                                                      s.items()))
def test_each_setting_is_the_program_fit_runs_with_it(setting):
    remat = {"mode": setting["remat"]} if "remat" in setting else None
    own, variables, slots = _users_program(**{**setting, "remat": remat})
    kw = {k: v for k, v in setting.items() if k != "optimizer"}
    report = shardviz.analyze(lambda: _compiled_mlp(setting.get("optimizer", "adam")), PLAN,
                              inputs=X.shape, labels=X.shape, train_step=True, **kw)
    assert report.trace_error is None, report.trace_error
    theirs = hlo.memory(own)
    row = report.memory.iloc[0]
    for key in ("argument_bytes", "output_bytes", "alias_bytes"):
        assert row[key] == theirs[key], key
    if row["temp_bytes"] != theirs["temp_bytes"]:
        # float16 on the CPU: XLA schedules the same instructions in another order
        # (its float16 normalisation), and the temporaries differ by a few bytes.
        # The programs must be the same, instruction for instruction.
        assert setting.get("dtype") == "float16", "temp_bytes"
        assert _instructions(own.as_text()) == _instructions(report.hlo_text)
        assert abs(row["temp_bytes"] - theirs["temp_bytes"]) <= 0.05 * theirs["temp_bytes"]
    mesh = report.mesh_view
    expected = sorted((c.kind, c.bytes_per_device) for c in hlo.collectives(
        own.as_text(), mesh.axis_names, mesh.shape))
    assert sorted(zip(report.collectives.kind, report.collectives.bytes_per_device)) == expected
    v = report.variables
    mine = sorted(zip(v.path, v.dtype, v["shape"].map(tuple), v.trainable.map(bool)))
    assert mine == variables
    o = report.optimizer_variables
    assert sorted(zip(o.path.map(_slot), o.dtype, o["shape"].map(tuple))) == slots
    assert report.summary()["tuning"] == Tuning(**kw).describe()


def test_lora_slots_belong_to_the_lora_variables_only():
    report = shardviz.analyze(_compiled_mlp, PLAN, inputs=X.shape, labels=X.shape,
                              train_step=True, lora_rank=4)
    refs = set(report.optimizer_variables.reference.dropna())
    lora = {p for p in report.variables.path if "lora_kernel" in p}
    assert lora and lora <= refs
    frozen = set(report.variables.path[~report.variables.trainable])
    assert {p for p in frozen if p.endswith("/kernel")} and not (frozen & refs)


def test_remat_lowers_the_temporaries_of_the_same_plan():
    plain = shardviz.analyze(examples.transformer_block, PLAN, inputs=(8, 16, 64),
                             train_step=True)
    remat = shardviz.analyze(examples.transformer_block, PLAN, inputs=(8, 16, 64),
                             train_step=True, remat="full")
    assert remat.memory.temp_bytes.max() < plain.memory.temp_bytes.max()


@pytest.mark.parametrize("kw, words", [
    (dict(lora_rank=0), "lora_rank=0 is not a LoRA rank"),
    (dict(lora_rank=2.5), "lora_rank=2.5 is not a LoRA rank"),
    (dict(lora_rank=4096), "larger than layer"),
    (dict(dtype="bfloat17"), "dtype='bfloat17' is not a dtype policy"),
    (dict(quantize="int3"), "quantize='int3' is not a quantization mode"),
    (dict(remat="sometimes"), "remat='sometimes' is not a remat mode"),
    (dict(remat="larger_than:0"), "is not a remat mode"),
    (dict(lora_layers=["up"]), "lora_layers is given without lora_rank"),
    (dict(lora_rank=2, lora_layers=["nothing"]), "No layer of"),
])
def test_a_bad_setting_is_named_with_what_to_change(kw, words):
    with pytest.raises(ShardvizError) as info:
        shardviz.analyze(examples.mlp, PLAN, **kw)
    assert words in str(info.value) and info.value.hint


def test_a_built_model_is_not_changed_behind_the_users_back():
    model = examples.mlp()
    before = [(v.path, str(v.dtype)) for v in model.variables]
    with pytest.raises(ShardvizError, match="Pass the function that builds"):
        shardviz.analyze(model, PLAN, lora_rank=4)
    assert [(v.path, str(v.dtype)) for v in model.variables] == before
    assert keras.config.dtype_policy().name == "float32"


def test_the_global_dtype_policy_is_put_back():
    shardviz.analyze(examples.mlp, PLAN, dtype="bfloat16", remat="full")
    assert keras.config.dtype_policy().name == "float32"
    assert examples.mlp().layers[-1].kernel.dtype == "float32"


def test_a_rule_that_no_longer_fits_an_int4_kernel_names_rule_and_variable():
    plan = examples.transformer_plan()
    report = shardviz.analyze(examples.transformer_block, plan, quantize="int4")
    problem = report.problems_of("rank-mismatch")[0]
    assert problem.severity == "error" and problem.path == "attn/query/kernel"
    assert problem.rule == ".*attn/(query|key|value)/kernel"
    assert "int4 quantization stores this kernel packed" in problem.message
    assert "'attn/query/kernel'" in problem.hint
    # What Keras does with it: it refuses to create the quantized kernel.
    with plan.to_keras().scope():
        model = examples.transformer_block()
        with pytest.raises(ValueError, match="rank"):
            model.quantize("int4")


def test_lora_factors_no_rule_reaches_are_named_and_suggest_splits_them():
    from shardviz.model.scan import scan
    from shardviz.strategy.strategies import candidate_plans

    lora = scan(examples.transformer_block, tuning=Tuning(lora_rank=4))
    missed = shardviz.analyze(lora, examples.transformer_plan())
    (note,) = missed.problems_of("lora-unmatched")
    assert note.path == "attn/query/lora_kernel_a" and "(None, 'model', None)" in note.hint
    plan = next(p for label, p, _ in candidate_plans(lora, 8) if label == "data × tensor parallel")
    assert any("lora_kernel" in r.key for r in plan.rules)
    without = plan.with_rules([(r.key, r.axes) for r in plan.rules if "lora" not in r.key])
    split = shardviz.analyze(lora, plan, inputs=(8, 16, 64), train_step=True)
    loose = shardviz.analyze(lora, without, inputs=(8, 16, 64), train_step=True)
    assert not split.problems_of("lora-unmatched") and loose.problems_of("lora-unmatched")
    # What splitting them buys, in the compiled train step:
    assert split.totals.collective_bytes < loose.totals.collective_bytes
    assert split.totals.collectives < loose.totals.collectives
