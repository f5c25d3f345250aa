"""Which attention Keras runs on a target, and the report's word on it,
checked against the compiled program: Keras's splash-attention kernel is a
TPU custom call in the HLO, and XLA's attention keeps every head's scores."""

import pytest
from needs import HAVE_HUB, tpu

import shardviz
from shardviz import Plan, examples


def small_llama():
    """keras-hub computes its attention mask from the padding mask, inside the step."""
    import keras_hub

    return keras_hub.models.LlamaBackbone(vocabulary_size=256, num_layers=2, num_query_heads=4,
                                          hidden_dim=64, intermediate_dim=128,
                                          num_key_value_heads=2, name="small_llama")


def attention_problems(report):
    return [p for p in report.problem_list if p.kind == "attention"]


@tpu
@pytest.mark.skipif(not HAVE_HUB, reason="keras-hub is not installed")
def test_a_mask_computed_in_the_step_keeps_the_scores_on_a_tpu_and_the_report_says_so():
    report = shardviz.analyze(small_llama, Plan({"batch": 8}), batch=16, seq=128,
                              train_step=True, labels=(16, 128, 64), target="v5e:2x4")
    assert report.trace_error is None
    calls = report.trace.attention
    assert len(calls) == 2 and not any(c.kernel for c in calls)  # one per block
    assert all(c.platform == "tpu" and c.traced_mask for c in calls)
    # What the compiler compiled: no kernel, so XLA's attention.
    assert "tpu_custom_call" not in report.trace.hlo_text
    (problem,) = attention_problems(report)
    assert problem.severity == "info"
    assert "2 calls of keras.ops.dot_product_attention run XLA's attention on v5e:2x4" in \
        problem.message
    assert "mask is computed inside the step" in problem.message
    # 16 x 4 heads x 128 x 128 float32 scores per call: 4 MiB, 8 MiB for both.
    assert "16 x 4 x 128 x 128 float32" in problem.message and "8.0 MiB in all" in \
        problem.message
    assert "split the batch over more devices" in problem.hint


def block():
    return examples.transformer_block(seq=256, d_model=256, heads=2)


@tpu
def test_attention_without_a_mask_runs_keras_kernel_on_one_chip_and_it_is_causal():
    report = shardviz.analyze(block, Plan({"batch": 1}), inputs=(4, 256, 256), target="v5e:1x1")
    assert report.trace_error is None
    (call,) = report.trace.attention
    assert call.kernel and call.platform == "tpu" and not call.masked and not call.causal
    assert call.layer == "attn"
    assert "tpu_custom_call" in report.trace.hlo_text  # the kernel the chip runs
    # What the chip computed on that path (tests/data/chip/v5e-1x1-attention.jsonl).
    (problem,) = attention_problems(report)
    assert problem.severity == "warning" and problem.layer == "attn"
    assert "causal attention without the 1/sqrt(head_dim) scale" in problem.message
    assert "disable_flash_attention" in problem.hint


def test_a_length_the_kernel_refuses_falls_back_without_a_traceback_on_stderr(capfd):
    # 16 tokens: Keras's splash kernel wants a multiple of its 128-row block, logs the
    # error with its traceback and runs XLA's attention; the call is recorded as such.
    def short():
        return examples.transformer_block(seq=16, d_model=256, heads=2)

    report = shardviz.analyze(short, Plan({"batch": 1}), inputs=(4, 16, 256), target="v5e:1x1")
    assert report.trace_error is None
    (call,) = report.trace.attention
    assert not call.kernel
    err = capfd.readouterr().err
    assert "Failed to apply Splash kernel" not in err and "Traceback" not in err


def test_the_chip_record_shows_keras_kernel_path_causal_and_unscaled():
    """On a v5e chip, keras.ops.dot_product_attention's kernel path equals
    XLA's causal attention with scale=1, for is_causal False and True, and
    differs from what was asked by up to 4.6 (bench/probes/chip_attention.py)."""
    import json
    import pathlib

    path = pathlib.Path(__file__).parent / "data" / "chip" / "v5e-1x1-attention.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 6 and {r["device_kind"] for r in records} == {"TPU v5 lite"}
    for r in records:
        asked = f"diff_to_{'causal' if r['is_causal'] else 'noncausal'}_scaled"
        assert r["diff_to_causal_unscaled"] < 0.05, r  # bfloat16: 0.03
        assert r[asked] > 3 and r["max_abs_ref"] < 0.9, r
    assert max(r[f"diff_to_{'causal' if r['is_causal'] else 'noncausal'}_scaled"]
               for r in records) < 4.6


@tpu
def test_keras_kernel_cannot_be_split_over_chips_and_the_error_says_what_to_do():
    import keras

    report = shardviz.analyze(block, Plan({"batch": 8}), inputs=(16, 256, 256),
                              target="v5e:2x4")
    error = report.trace_error
    assert "does not compile for 8 TPU devices" in error.message and "(attn)" in error.message
    assert error.layer == "attn" and "disable_flash_attention" in error.hint
    keras.config.disable_flash_attention()
    try:
        report = shardviz.analyze(block, Plan({"batch": 8}), inputs=(16, 256, 256),
                                  target="v5e:2x4")
    finally:
        keras.config.enable_flash_attention()
    assert report.trace_error is None
    assert "tpu_custom_call" not in report.trace.hlo_text
    (problem,) = attention_problems(report)
    assert "runs XLA's attention on v5e:2x4" in problem.message
    assert "flash attention is disabled" in problem.message


def test_on_simulated_devices_standing_in_for_gpus_the_report_says_how_far_off_it_may_be():
    report = shardviz.analyze(examples.transformer_block, Plan({"batch": 8}),
                              inputs=(16, 16, 64), target="h100:8")
    (call,) = report.trace.attention
    assert call.platform == "cpu" and not call.kernel
    (problem,) = attention_problems(report)
    assert "simulated CPU devices that stand in for h100:8" in problem.message
    # 16 x 8 heads x 16 x 16 float32: 128 KiB that cuDNN's fused attention would not keep.
    assert "up to 128.0 KiB" in problem.message and "estimates" in problem.hint


def test_without_a_target_attention_is_recorded_but_not_reported():
    report = shardviz.analyze(examples.transformer_block, Plan({"batch": 8}),
                              inputs=(16, 16, 64))
    assert len(report.trace.attention) == 1
    assert not attention_problems(report)
