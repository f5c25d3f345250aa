"""Results draw themselves one way: each of FitAnswer, Suggestions,
Candidate, Audit and Explanation shows itself (``_repr_html_``, ``str``)
with its renderer under ``shardviz/render/``, whose ``html`` and ``text``
are what the notebook, the terminal, the Explorer and the CLI show. The
objects are cheap: nothing here compiles a train step."""

import pandas as pd
import pytest

import shardviz
from shardviz import Plan, examples
from shardviz.explain import explain_collective
from shardviz.model.tuning import Tuning
from shardviz.planner.fit_answer import ANSWER_COLUMNS, COMPILE_COLUMNS, FitAnswer
from shardviz.render import audit_view, candidate_view, explanation_view, fit_view, suggest_view

shardviz.simulate_devices(8)


@pytest.fixture(scope="module")
def report():
    return shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=(8, 16))


@pytest.fixture(scope="module")
def suggestions():
    return shardviz.suggest(examples.mlp, devices=8, top=2)


def an_answer(report=None):
    rows = pd.DataFrame([
        dict(remat=None, target="v5e:2x4", mesh="batch=8", batch=1336,
             bytes_per_device=14 * 2**30, capacity_bytes=15 * 2**30, next="batch 1337",
             next_bytes_per_device=16 * 2**30, compiles=2, peak_bytes_per_device=None),
        dict(remat="full", target="v5e:2x4", mesh="batch=8", batch=None, bytes_per_device=None,
             capacity_bytes=15 * 2**30, next="batch 1", next_bytes_per_device=None, compiles=1,
             peak_bytes_per_device=None)], columns=ANSWER_COLUMNS)
    compiles = pd.DataFrame([
        dict(remat=None, target="v5e:2x4", mesh="batch=8", batch=1336,
             bytes_per_device=14 * 2**30, capacity_bytes=15 * 2**30, fits=True, compiled=True,
             seconds=2.5, from_cache=True),
        dict(remat=None, target="v5e:2x4", mesh="batch=8", batch=1337,
             bytes_per_device=16 * 2**30, capacity_bytes=15 * 2**30, fits=False, compiled=True,
             seconds=3.0, from_cache=False)], columns=COMPILE_COLUMNS)
    return FitAnswer("largest batch", rows, compiles, report, Tuning(), notes=["a <note>"])


def same_views(result, view):
    """The result shows itself with its renderer, and nothing else."""
    assert result._repr_html_() == view.html(result)
    assert str(result) == view.text(result)
    return view.html(result), view.text(result)


@pytest.mark.parametrize("with_report", [False, True])
def test_a_fit_answer_draws_itself_with_fit_view(with_report, request):
    answer = an_answer(request.getfixturevalue("report") if with_report else None)
    html, text = same_views(answer, fit_view)
    for header in ("remat", "per chip", "chip holds", "refused next", "it needs", "verdict"):
        assert f"<th>{header}</th>" in html
    # One HTML form: the head line is the text's, the note is escaped.
    assert html.startswith(f"<p><b>{text.splitlines()[0]}</b></p>")
    assert "<li>a &lt;note&gt;</li>" in html and "<summary>2 compiles</summary>" in html
    assert "1 read from the compile cache" in text
    assert "batch 1336 on v5e:2x4 (mesh batch=8), 14.0 GiB of 15.0 GiB per chip" in text
    assert "full: nothing fits (batch 1 is refused)" in text
    if not with_report:
        page = fit_view.html_file(answer, title="a <fit>")
        assert page.startswith("<!DOCTYPE html>") and "<title>a &lt;fit&gt;</title>" in page
        assert html in page


def test_suggestions_and_their_candidates_draw_themselves(suggestions):
    assert len(suggestions) == 2
    html, text = same_views(suggestions, suggest_view)
    for header in ("plan", "mesh", "per device", "communicated", "step (estimate)", "estimates"):
        assert f"<th>{header}</th>" in html
    assert text.startswith("[0] ") and "\n\n[1] " in text
    for candidate in suggestions:
        html, text = same_views(candidate, candidate_view)
        assert html.startswith(f"<div><b>{candidate.name}</b> on ")
        assert text.startswith(f"{candidate.name} on ") and text in str(suggestions)
        assert "(estimated; reasons unchecked)" in text  # no inputs: nothing compiled
        for rule in candidate.plan.rules:
            assert f"  {rule.key!r}: " in text


def test_an_audit_draws_itself_with_audit_view():
    typo = Plan({"batch": 2, "model": 4}, {"up/kernal": (None, "model")})
    audit = shardviz.audit(examples.mlp, typo)
    html, text = same_views(audit, audit_view)
    for header in ("kind", "severity", "where", "message", "fix"):
        assert f"<th>{header}</th>" in html
    assert "unused-rule" in html and "up/kernal" in html
    assert text.startswith("shardviz.audit of mlp on {'batch': 2, 'model': 4}: ")
    assert "  unused-rule: Rule 'up/kernal'" in text and "    fix: " in text


def test_an_explanation_draws_itself_with_explanation_view(report):
    why = explain_collective(report, 0, search=False)
    html, text = same_views(why, explanation_view)
    assert html.startswith("<div class='shardviz-why'") and "<b>No local fix.</b>" in html
    assert text.startswith(f"Collective 0: {why.kind} at ") and "No local fix." in text
    assert why.text_block(50) == explanation_view.text(why, 50) != text

    class Printer:
        printed = ""

        def text(self, value):
            self.printed += value

    printer = Printer()
    why._repr_pretty_(printer, False)
    assert printer.printed == text
