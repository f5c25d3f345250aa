"""A keras-hub preset named as the model (``hub:gpt2_base_en``) against a
builder of the same model written by hand: the largest batch of the train
step ``model.fit`` runs on one v5e chip, by the TPU compiler on this machine
(no TPU, no network: the preset comes from shardviz's catalogue), with the
chip's own edge for the same model beside it (``hub_gpt2_default`` in
tests/data/chip/v5e-1x1.jsonl: keras-hub's GPT2CausalLM at gpt2_base_en's
configuration as keras-hub compiles it, mixed bfloat16, sequence 1024).

Run:  .venv/bin/python bench/bench_hub_preset.py

Both searches share one compile cache, empty at the start: the preset's
search compiles, and the builder's, the same programs, reads them back.
Both are compiled as keras-hub compiles a task by default (Adam(2e-5),
sparse cross-entropy and a SparseCategoricalAccuracy metric on the logits).
The chip ran that model (``hub_gpt2_default``), and also the same
configuration built otherwise (``hub_gpt2``: Adam(1e-4) and the loss alone,
keras-hub's default dropout; bench/records/chip/models.py); a third search
on that builder is put beside its own edge. Prints each answer, its
compiles and seconds, and the chip's edges.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

os.environ["SHARDVIZ_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-hub-preset-")

import shardviz  # noqa: E402

PRESET = "gpt2_base_en"
SEQ = 1024


def by_hand():
    """The same model as a user writes it: keras-hub's GPT2CausalLM over a
    GPT2Backbone with gpt2_base_en's published configuration."""
    with shardviz.quiet_start_up():
        import keras_hub

    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=50257, num_layers=12, num_heads=12, hidden_dim=768,
        intermediate_dim=3072, max_sequence_length=1024, dropout=0.0)
    return keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)


def chip_edge(builder: str) -> tuple[int | None, int | None]:
    path = HERE.parent / "tests" / "data" / "chip" / "v5e-1x1.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    hub = [r for r in rows if r.get("builder") == builder]
    ran = [r["batch"] for r in hub if r.get("ran")]
    refused = [r["batch"] for r in hub if not r.get("ran")]
    return (max(ran) if ran else None), (min(refused) if refused else None)


def main() -> None:
    shardviz.simulate_devices(8)
    answers = {}
    sys.path.insert(0, str(HERE / "records" / "chip"))
    import models

    searches = (("hub:" + PRESET, "hub:" + PRESET), ("builder", by_hand),
                ("as the record compiled it", models.hub_gpt2))
    for name, model in searches:
        start = time.perf_counter()
        answer = shardviz.fit(model, target="v5e:1x1", seq=SEQ, dtype="mixed_bfloat16")
        seconds = time.perf_counter() - start
        row = answer.answers.iloc[0]
        answers[name] = int(row.batch)
        print(f"{name:>20}: batch {int(row.batch)} fits, {row.next} refused; "
              f"{answer.compile_count} compiles ({answer.cached_count} read from the cache), "
              f"{seconds:.0f} s")
        if name.startswith("hub:"):
            print(" " * 22 + "; ".join(answer.report.notes[:1]))
    ran, refused = chip_edge("hub_gpt2_default")
    print(f"{'chip, as keras-hub compiles it':>20}: batch {ran} ran, batch {refused} refused")
    print("preset and builder, same batch as the chip:",
          answers["hub:" + PRESET] == answers["builder"] == ran)
    ran, refused = chip_edge("hub_gpt2")
    print(f"{'chip, as the record compiled it':>20}: batch {ran} ran, batch {refused} refused")
    print("the record's program, same edge as the chip:",
          answers["as the record compiled it"] == ran)


if __name__ == "__main__":
    main()
