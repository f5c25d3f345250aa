"""Explaining collectives: the time of ``report.why(i)`` on a transformer block,
counterfactual compiles included.

Run:  .venv/bin/python bench/bench_why.py

Prints, for the Megatron transformer block and for the same block with
``down/kernel`` split the wrong way, each collective's explanation time
(the first call: nothing cached), how many plans it compiled, and whether
it found a fix. Target: <= 5 s for each ``why()``.

Then the train step of a 2-block Llama (d_model 512) on ``v5e:4x4`` with
the TPU compiler (needs libtpu): each ``why()`` in turn, plans compiled by
earlier calls reused. Target: <= 20 s for each.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    import shardviz

    shardviz.simulate_devices(8)
    from shardviz import examples

    plan = examples.transformer_plan(batch=2, model=4)
    wrong = plan.with_rule_at(plan.rule_index(".*down/kernel"), axes=(None, "model"))
    shardviz.analyze(examples.transformer_block, plan, inputs=(8, 16, 64))  # warm up JAX
    worst = 0.0
    for name, p in (("Megatron block", plan), ("down/kernel split wrongly", wrong)):
        t = time.perf_counter()
        report = shardviz.analyze(examples.transformer_block, p, inputs=(8, 16, 64))
        analysed = time.perf_counter() - t
        print(f"{name}: analyse {analysed:.2f} s, {len(report.collectives)} collectives")
        worst = max(worst, explain_each(report))
    print(f"slowest why(): {worst:.2f} s (target <= 5 s)")
    train_step_on_tpu()


def explain_each(report) -> float:
    """Explain every collective of ``report`` in turn, printing each
    explanation's time (plans compiled by earlier calls reused); the slowest."""
    worst = 0.0
    for i, row in report.collectives.iterrows():
        t = time.perf_counter()
        why = report.why(i, progress=False)
        took = time.perf_counter() - t
        worst = max(worst, took)
        fix = f"fix: {why.fix_change}" if why.fix is not None else "no local fix"
        print(f"  why({i}) {row['kind']:>10} at {row['layer']:<34} {row['pass']:<8} "
              f"{took:5.2f} s, {len(why.tried)} plans compiled; {fix}")
    return worst


def train_step_on_tpu() -> None:
    import importlib.util

    import jax

    import shardviz
    from shardviz import examples

    if importlib.util.find_spec("libtpu") is None:
        print("train step on v5e:4x4: skipped (libtpu is not installed)")
        return
    t = time.perf_counter()
    report = shardviz.analyze(lambda: examples.llama(2, 512, 1024, 8, 4, 1024),
                              examples.llama_plan(4, 4),
                              inputs=jax.ShapeDtypeStruct((16, 128), "int32"),
                              target="v5e:4x4", train_step=True)
    print(f"Llama 2x512 train step on v5e:4x4: analyse {time.perf_counter() - t:.1f} s, "
          f"{len(report.collectives)} collectives")
    total = time.perf_counter()
    worst = explain_each(report)
    print(f"slowest why(): {worst:.1f} s (target <= 20 s); all {len(report.collectives)}: "
          f"{time.perf_counter() - total:.1f} s")


if __name__ == "__main__":
    main()
