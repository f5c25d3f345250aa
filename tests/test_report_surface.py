"""Outer code (renderers, widgets, the CLI, notebooks) reads a Report
through its public surface: frames, row views, totals, the mesh view and
named accessors; never its trace, mesh or scan objects."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re

import pytest

import shardviz
from shardviz import examples

ROOT = pathlib.Path(shardviz.__file__).parent
OUTER = ["render", "widgets", "cli"]
REACH = re.compile(r"\b(report|rep|r|traced|forgot|pod|two|self\.report|self\.traced|"
                   r"state\.traced)\.(trace|mesh|scan)\b(?!_)")


def reaches(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if REACH.search(line)]


def _sources():
    for package in OUTER:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield str(path.relative_to(ROOT.parent)), path.read_text()
    for path in sorted((ROOT.parent / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        yield path.name, "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def test_outer_code_reads_only_the_reports_public_surface():
    found = [f"{name}: {line}" for name, text in _sources() for line in reaches(text)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("line", ["n = report.mesh.size", "if report.trace is None:",
                                  "paths = self.traced.scan.paths", "m = traced.trace.memory"])
def test_the_surface_check_sees_a_reach_inside(line):
    assert reaches(line)
    assert not reaches(line.replace(".mesh.", ".mesh_view.").replace(".trace.", ".trace_error.")
                       .replace(".trace ", ".pass_mode ").replace(".scan.", ".scan_paths."))


def test_the_accessors_say_what_outer_code_needs():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=(8, 16),
                              train_step=True)
    view = report.mesh_view
    assert (view.axis_names, view.shape, view.size, view.abstract) == \
        (("batch", "model"), (2, 4), 8, False)
    assert sorted(view.coords) == list(range(8)) and set(view.slice_of_position) == {0}
    assert report.pass_mode == "abstract" and "HloModule" in report.hlo_text
    assert report.xla_memory["argument_bytes"] > 0 and (report.timings.get("train_step_compile")
                                                      or report.timings["train_step_cache"]) > 0
    assert "loss" in report.step_setup.describe().lower()
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.size = 2  # type: ignore[misc]
    bare = shardviz.analyze(examples.mlp, examples.megatron_plan())
    assert (bare.pass_mode, bare.hlo_text, bare.xla_memory, bare.timings, bare.step_setup) == \
        (None, "", None, {}, None)


def test_renderers_never_call_back_into_the_reports_display_methods():
    """The Report's display methods hand renderers frames; a renderer that
    called one back would make the two a circle again."""
    back = re.compile(r"\b(report|rep|r|a|b|self)\.(show|show_mesh|show_memory|show_flow|"
                      r"show_grid|pictures|text|_repr_html_)\(")
    found = [f"{name}: {line.strip()}" for name, text in _sources() if "/render/" in name
             for line in text.splitlines() if back.search(line) and "``" not in line]
    assert not found, found


def test_sizes_and_reports_are_taken_as_analyze_takes_them():
    """replicated_large takes a size as analyze's replicated_threshold does;
    compare names what it takes."""
    report = shardviz.analyze(examples.mlp(), shardviz.Plan({"batch": 8}, {}), inputs=(8, 16))
    assert report.replicated_large("1KB") == report.replicated_large(1000)
    assert report.replicated_large("1KB") and not report.replicated_large("1GiB")
    with pytest.raises(shardviz.ShardvizError, match="threshold='lots' is not a size"):
        report.replicated_large("lots")
    with pytest.raises(shardviz.ShardvizError, match="the second is int 42"):
        shardviz.compare(report, 42)
    with pytest.raises(shardviz.ShardvizError, match="the first is str"):
        shardviz.compare_table("report", report)
    with pytest.raises(shardviz.ShardvizError, match="are not two names"):
        shardviz.compare(report, report, labels="AB")
