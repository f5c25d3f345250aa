"""A report's totals are computed once (``report.totals``), and the summary,
sweep, suggest and the fix search read them rather than adding frames up."""

from __future__ import annotations

import shardviz
from shardviz import Plan, examples


def test_the_totals_add_up_the_frames_once():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=(8, 16),
                              target="h100:8")
    t = report.totals
    assert t.compiled and t.collectives == len(report.collectives)
    assert t.collective_bytes == int(report.collectives["bytes_per_device"].sum())
    assert t.bytes_per_device == int(report.memory["total_bytes"].max())
    bound = report.estimate[report.estimate["bound"]]
    assert t.step_seconds == float(bound["seconds"].iloc[0])
    assert t.fits is report.fits is True
    s = report.summary()
    assert (s["collectives"], s["collective_bytes"], s["fits"]) == \
        (t.collectives, t.collective_bytes, t.fits)


def test_untraced_totals_are_the_variables_alone():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan())
    t = report.totals
    assert not t.compiled and t.collectives is None and t.collective_bytes is None
    assert t.bytes_per_device == report.variable_bytes_per_device and t.step_seconds is None


def test_sweep_rows_are_each_plans_totals():
    rules = examples.megatron_plan().rules
    frame = shardviz.sweep(examples.mlp, [(r.key, r.axes) for r in rules], devices=8,
                           inputs=(8, 16), target="h100:8")
    row = frame[frame["mesh"] == "batch=2 × model=4"].iloc[0]
    report = shardviz.analyze(examples.mlp, Plan({"batch": 2, "model": 4}, rules),
                              inputs=(8, 16), target="h100:8")
    t = report.totals
    assert (row["bytes_per_device"], row["collective_bytes"], row["fits"], row["compiled"]) == \
        (t.bytes_per_device, t.collective_bytes, t.fits, t.compiled)
    assert row["seconds"] == t.step_seconds
