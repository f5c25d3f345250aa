"""shardviz.fit for the chip-record models: the largest batch of Keras's own
train step on one v5e chip, from the TPU compiler on this machine (no TPU),
with the compiles it took, against what model.fit did on a real v5e chip
(tests/data/chip/v5e-1x1.jsonl).

Run:  .venv/bin/python bench/bench_fit.py [--models decoder,decoder_lora,hub_gpt2]
      .venv/bin/python bench/bench_fit.py --llama   (Llama 3.1 8B LoRA: the smallest slice)

Each search runs with a compile cache of its own, empty, so every compile is
a compile. Prints, per model: the answer, the chip's edge, the compiles (how
many took the program) and the seconds (target: at most 4 compiles, 2 of
them fitting, where the bytes grow linearly in the batch; the decoder's
answer equal to the chip's).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "records" / "chip"))

SEQ = 1024


def chip_edge(builder: str) -> tuple[int | None, int | None]:
    """The largest batch model.fit ran at on the chip, and the smallest it
    was refused at, for a builder at its recorded defaults."""
    ran, refused = [], []
    for line in (HERE.parent / "tests" / "data" / "chip" / "v5e-1x1.jsonl").open():
        r = json.loads(line)
        if r["builder"] != builder or r.get("builder_kwargs") or r["kind"] != "fit":
            continue
        (ran if r["ran"] else refused).append(r["batch"])
    return max(ran, default=None), min(refused, default=None)


def largest(name: str) -> None:
    import jax
    import models

    import shardviz

    builder = getattr(models, name)
    labels = jax.ShapeDtypeStruct((1, SEQ), "int32")
    with tempfile.TemporaryDirectory(prefix="shardviz-bench-fit-") as cache:
        shardviz.configure_cache(directory=cache)
        t = time.perf_counter()
        answer = shardviz.fit(builder, target="v5e:1x1", seq=SEQ, labels=labels,
                              progress=True)
        seconds = time.perf_counter() - t
    (row,) = answer.answers.to_dict("records")
    c = answer.compiles
    fitting = int(c[c.compiled].fits.sum())
    ran, refused = chip_edge(name)
    agrees = "agrees" if (row["batch"], row["next"]) == (ran, f"batch {refused}") else \
        "DIFFERS"
    print(f"{name}: batch {row['batch']} fits, {row['next']} refused; the chip ran {ran} and "
          f"refused {refused} ({agrees}); {answer.compile_count} compiles ({fitting} fitting), "
          f"{seconds:.0f} s")
    print("  batches compiled: " + ", ".join(
        f"{b} {'fits' if f else 'refused'} ({s:.0f} s)"
        for b, f, s in zip(c.batch, c.fits, c.seconds)))
    for note in answer.notes:
        print(f"  note: {note}")


def llama_8b_compiled():
    """Llama 3.1 8B built with keras-hub at its published configuration, with
    its output projection, compiled as a causal LM trains (AdamW, cross-entropy
    on token ids; bench/records/calibrate_step_time.py)."""
    from calibrate_step_time import llama31_8b

    return llama31_8b()


def smallest_slice() -> None:
    import jax

    import shardviz

    seq = 2048
    labels = jax.ShapeDtypeStruct((1, seq), "int32")
    t = time.perf_counter()
    answer = shardviz.fit(llama_8b_compiled, target="v5e", batch=16, seq=seq, labels=labels,
                          lora_rank=8, dtype="bfloat16")
    print(answer)
    print(f"smallest v5e slice for batch 16 x {seq}: {answer.compile_count} compiles, "
          f"{time.perf_counter() - t:.0f} s (targets <= 4 compiles, <= 300 s)")
    print(answer.compiles.to_string(index=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="decoder,decoder_lora")
    parser.add_argument("--llama", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "jax")
    if args.llama:
        smallest_slice()
        return
    for name in filter(None, args.models.split(",")):
        largest(name)


if __name__ == "__main__":
    main()
