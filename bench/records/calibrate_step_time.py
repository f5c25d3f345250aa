"""The published runs the expected step time is calibrated with, analysed by
shardviz: each shape built with keras-hub classes at its published
configuration (no weights), its train step compiled for ``v6e:2x4`` by the
TPU compiler on this machine, and its bound and expected time printed beside
the published step time.

Run:  .venv/bin/python bench/records/calibrate_step_time.py

The ``bound`` column is what :data:`shardviz.target.MEASURED_STEPS` holds for
each run; ``leave-one-out`` is the expected time calibrated without the run
itself (the honest test of the calibration). Takes about 2 minutes.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

SEQ = 8192
TARGET = "v6e:2x4"


def causal_lm(backbone):
    """A backbone with its output projection and a causal LM's loss, compiled
    as a keras-hub causal LM trains: AdamW, cross-entropy on token ids."""
    import keras

    logits = backbone.token_embedding(backbone.output, reverse=True)
    model = keras.Model(backbone.input, logits)
    model.compile(optimizer=keras.optimizers.AdamW(),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def llama31_8b():
    """Llama 3.1 8B's published configuration."""
    import keras_hub

    return causal_lm(keras_hub.models.Llama3Backbone(
        vocabulary_size=128256, num_layers=32, num_query_heads=32, hidden_dim=4096,
        intermediate_dim=14336, num_key_value_heads=8, rope_max_wavelength=500000,
        layer_norm_epsilon=1e-5, tie_word_embeddings=False))


def mistral_7b():
    """Mistral 7B's published configuration."""
    import keras_hub

    return causal_lm(keras_hub.models.MistralBackbone(
        vocabulary_size=32000, num_layers=32, num_query_heads=32, hidden_dim=4096,
        intermediate_dim=14336, num_key_value_heads=8, sliding_window=4096,
        layer_norm_epsilon=1e-5))


RUNS = {
    "llama3.1-8b_v6e-8_b24x8192": (llama31_8b, 24),
    "mistral-7b_v6e-8_b48x8192": (mistral_7b, 48),
}
"""Each published run's case name (as in MEASURED_STEPS): its builder and global batch."""


def analyse(case: str):
    """shardviz's report of the run's train step: mixed_bfloat16, every
    variable split over the 8 chips (the plan ``shardviz.fit`` uses by default)."""
    import jax

    import shardviz
    from shardviz.model.tuning import Tuning
    from shardviz.planner.fit_search import default_plan

    builder, batch = RUNS[case]
    scan = shardviz.scan(builder, tuning=Tuning(dtype="mixed_bfloat16"))
    spec = jax.ShapeDtypeStruct((batch, SEQ), "int32")
    return shardviz.analyze(scan, default_plan(scan, 8, batch),
                            {"token_ids": spec, "padding_mask": spec}, labels=spec,
                            train_step=True, target=TARGET)


def main() -> None:
    from shardviz.target import MEASURED_STEPS, expected_step

    print(f"{'case':28} {'published s':>11} {'bound s':>8} {'stored':>8} {'expected s':>10} "
          f"{'error':>7} {'leave-one-out s':>15} {'error':>7} {'analyse s':>9}")
    for case in RUNS:
        (step,) = [s for s in MEASURED_STEPS if s.case == case]
        t = time.perf_counter()
        report = analyse(case)
        seconds = time.perf_counter() - t
        est = report.estimate
        bound = float(est[est.bound]["seconds"].iloc[0])
        expected = float(est[est.part == "expected"]["seconds"].iloc[0])
        alone = expected_step("v6e", "train step", bound, exclude=(case,))
        assert alone is not None
        print(f"{case:28} {step.seconds:11.3f} {bound:8.4f} {step.bound:8.4f} {expected:10.3f} "
              f"{expected / step.seconds - 1:+7.1%} {alone.seconds:15.3f} "
              f"{alone.seconds / step.seconds - 1:+7.1%} {seconds:9.0f}")
        print(f"  fits: {report.fits}; {report.trace_error or ''}".splitlines()[0])


if __name__ == "__main__":
    main()
