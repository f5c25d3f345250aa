"""shardviz.fit on Llama 3.1 8B (keras-hub, published configuration): the
smallest v5e slice for a LoRA fine-tune in bfloat16, and the largest batch
on that slice, each from the TPU compiler (libtpu), on a machine with no TPU.

No remat: Keras's RematScope fails on keras-hub's attention layers (it makes
their Python arguments traced values), and shardviz says so, naming the layer.

Run:  .venv/bin/python bench/bench_fit.py [--largest]

With ``--largest``, also the largest batch on the slice found, with its plan
(several compiles of about two minutes each at this size).

Prints each answer with its compiles and wall time (targets: the smallest
slice in at most 4 compiles and 5 minutes).
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SEQ = 2048


def llama_8b_compiled():
    """Llama 3.1 8B built with keras-hub at its published configuration, with
    its output projection, compiled as a causal LM trains (AdamW, cross-entropy
    on token ids; bench/calibrate_step_time.py)."""
    from calibrate_step_time import llama31_8b

    return llama31_8b()


def main() -> None:
    import jax

    import shardviz

    labels = jax.ShapeDtypeStruct((1, SEQ), "int32")
    settings = dict(seq=SEQ, labels=labels, lora_rank=8, dtype="bfloat16")
    t = time.perf_counter()
    smallest = shardviz.fit(llama_8b_compiled, target="v5e", batch=16, **settings)
    seconds = time.perf_counter() - t
    print(smallest)
    print(f"smallest v5e slice for batch 16 x {SEQ}: {smallest.compile_count} compiles, "
          f"{seconds:.0f} s (targets <= 4 compiles, <= 300 s)")
    print(smallest.compiles.to_string(index=False))
    (row,) = smallest.answers.to_dict("records")
    if "--largest" in sys.argv and isinstance(row["target"], str) and ":" in row["target"]:
        # On the slice found, with the plan found (its model axis too).
        t = time.perf_counter()
        largest = shardviz.fit(llama_8b_compiled, smallest.report.plan, target=row["target"],
                               precision=0.05, **settings)
        print(largest)
        print(f"largest batch on {row['target']}: {largest.compile_count} compiles, "
              f"{time.perf_counter() - t:.0f} s")
        print(largest.compiles.to_string(index=False))


if __name__ == "__main__":
    main()
