"""Targets are one protocol: outside ``shardviz/target/`` nothing asks which
kind of target it has; it asks the target (its devices, capacity, slices,
networks, and whether its figures are estimates, timed, or can run)."""

from __future__ import annotations

import pathlib
import re

import pytest

import shardviz
from shardviz import Plan, ShardvizError, examples
from shardviz.target import GpuNodes, SimulatedCpu, Target, TpuSlices, parse_target

PACKAGE = pathlib.Path(shardviz.__file__).parent
KIND_TEST = re.compile(r"\.is_tpu\b|\.is_cpu\b|\.is_gpu\b|\bfamily\s*(==|!=|in\b)|"
                       r"isinstance\([^)]*\b(TpuSlices|GpuNodes|SimulatedCpu)\b")


def kind_tests(path: pathlib.Path, source: str | None = None) -> list[str]:
    text = source if source is not None else path.read_text()
    return [f"{path.relative_to(PACKAGE.parent)}:{n}: {line.strip()}"
            for n, line in enumerate(text.splitlines(), 1) if KIND_TEST.search(line)]


def test_nothing_outside_the_target_package_asks_for_the_kind_of_target():
    found = [hit for path in sorted(PACKAGE.rglob("*.py"))
             if "target" not in path.relative_to(PACKAGE).parts[:1]
             for hit in kind_tests(path)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("line", [
    "if report.target.is_tpu:", "timed = not target.is_cpu",
    "if target.hardware.family == 'gpu':", "isinstance(t, TpuSlices)"])
def test_the_kind_check_sees_a_planted_question(line):
    assert kind_tests(PACKAGE / "report" / "__init__.py", f"x = 1\n{line}\n")


@pytest.mark.parametrize("name, kind", [("cpu", SimulatedCpu), ("v5e:2x2", TpuSlices),
                                        ("h100:8", GpuNodes), ("v5litepod-8", TpuSlices)])
def test_each_kind_of_target_answers_the_protocol(name, kind):
    target = parse_target(name)
    assert isinstance(target, kind) and isinstance(target, Target)
    assert target.plan_devices() >= 1
    assert isinstance(target.estimated, bool) and isinstance(target.timed, bool)
    assert target.label.startswith(target.name)


def test_the_kinds_differ_in_their_answers_not_in_flags():
    cpu, gpu = parse_target("cpu"), parse_target("h100:4")
    assert (cpu.timed, cpu.estimated, cpu.can_execute, cpu.capacity_bytes()) == \
        (False, False, True, None)
    assert (gpu.timed, gpu.estimated, gpu.can_execute) == (True, True, True)
    assert gpu.capacity_bytes() == gpu.hardware.hbm_bytes
    assert gpu.plan_devices() == 4 and cpu.plan_devices() == 8  # the simulated devices
    with pytest.raises(ShardvizError, match="has 4 GPUs"):
        gpu.mesh_devices(("batch",), (8,), ("batch",))
    two = parse_target("h100:4", slices=2)
    assert two.slice_of_positions(("batch", "model"), (2, 4), ("batch",), None) == \
        (0, 0, 0, 0, 1, 1, 1, 1)


def test_a_report_on_each_kind_reads_the_protocol():
    plan = Plan({"batch": 2, "model": 4}, examples.megatron_plan().rules)
    on_gpu = shardviz.analyze(examples.mlp, plan, inputs=(8, 16), target="h100:8")
    on_cpu = shardviz.analyze(examples.mlp, plan, inputs=(8, 16))
    assert on_gpu.memory["estimate"].all() and not on_cpu.memory["estimate"].any()
    assert len(on_gpu.estimate) and not len(on_cpu.estimate)
    assert on_gpu.device_count == 8 and on_cpu.device_count == 8
