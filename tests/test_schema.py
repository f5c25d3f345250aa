"""The frames agree with shardviz/report/schema.py, their one description: the
Report's frames, their docstrings, the JSON export and the table in
docs/ARCHITECTURE.md. Each test also plants a violation and sees itself fail."""

import dataclasses
import inspect
import os
import re

import pytest

import shardviz
from shardviz import Report, examples
from shardviz.report import schema
from shardviz.report.serialize import report_to_dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def reports():
    """No forward pass; a forward pass on the simulated CPUs; a train step
    on a GPU target over two hosts. Between them each nullable column is
    seen with its dtype and as object."""
    plan = examples.megatron_plan()
    return (shardviz.analyze(examples.mlp, plan),
            shardviz.analyze(examples.mlp, plan, inputs=(8, 16)),
            shardviz.analyze(examples.mlp, plan, inputs=(8, 16), target="h100:8",
                             train_step=True, processes=2))


def built(report, name):
    """``report.<name>`` as column name to dtype name."""
    frame = getattr(report, name)
    return {str(c): str(frame[c].dtype) for c in frame.columns}


def assert_agrees(name, columns, axes, words):
    """No difference from the schema whose message holds ``words``."""
    found = [d for d in schema.frame(name).differences(columns, axes) if words in d]
    assert not found, found


def plant(monkeypatch, name, change):
    """Make the schema's frame ``name`` have the columns ``change(columns)``."""
    frames = tuple(dataclasses.replace(f, columns=tuple(change(f.columns)))
                   if f.name == name else f for f in schema.FRAMES)
    monkeypatch.setattr(schema, "FRAMES", frames)


def check_all(reports, name, words):
    for report in reports:
        assert_agrees(name, built(report, name), tuple(report.mesh.axis_names), words)


@pytest.mark.parametrize("name", schema.NAMES)
def test_a_frame_has_no_column_the_schema_does_not_describe(name, reports, monkeypatch):
    check_all(reports, name, "does not describe")
    plant(monkeypatch, name, lambda columns: columns[1:])
    with pytest.raises(AssertionError, match="does not describe"):
        check_all(reports, name, "does not describe")


@pytest.mark.parametrize("name", schema.NAMES)
def test_a_frame_has_every_column_the_schema_describes_in_order(name, reports, monkeypatch):
    check_all(reports, name, "lacks")
    check_all(reports, name, "order")
    plant(monkeypatch, name, lambda columns: columns + (schema.Column("planted", "int64", "."),))
    with pytest.raises(AssertionError, match="lacks the column 'planted'"):
        check_all(reports, name, "lacks")
    monkeypatch.undo()
    plant(monkeypatch, name, lambda columns: columns[::-1])
    with pytest.raises(AssertionError, match="order"):
        check_all(reports, name, "order")


@pytest.mark.parametrize("name", schema.NAMES)
def test_every_column_has_the_schema_dtype(name, reports, monkeypatch):
    check_all(reports, name, "schema says")
    for column in schema.frame(name).columns:
        seen = {dtype for report in reports for c, dtype in built(report, name).items()
                if schema.frame(name).by_name(tuple(report.mesh.axis_names))[c] == column}
        assert column.dtype in seen, f"report.{name}.{column.name} is never {column.dtype}"
    plant(monkeypatch, name, lambda columns: [
        dataclasses.replace(c, dtype="int64" if c.dtype == "float64" else "float64",
                            nullable=False) for c in columns])
    with pytest.raises(AssertionError, match="schema says float64"):
        check_all(reports, name, "schema says")


def exported(data, axes):
    """Every frame of the schema is in the JSON export, as the schema says."""
    missing = [name for name in schema.NAMES if name not in data["frames"]]
    assert not missing, f"the JSON export lacks {missing}"
    for name in schema.NAMES:
        assert_agrees(name, data["frames"][name]["dtypes"], axes, "")


def test_the_json_export_holds_every_frame_of_the_schema(reports):
    for report in reports:
        exported(report_to_dict(report), tuple(report.mesh.axis_names))
    data = report_to_dict(reports[-1])
    del data["frames"]["hosts"]
    with pytest.raises(AssertionError, match=r"lacks \['hosts'\]"):
        exported(data, tuple(reports[-1].mesh.axis_names))


def documented(name):
    """Report.<name>'s docstring says what a row is and describes every
    column as the schema does."""
    doc = " ".join((inspect.getdoc(getattr(Report, name)) or "").split())
    f = schema.frame(name)
    assert doc.startswith(f"One row per {f.row}."), doc[:80]
    missing = [c.name for c in f.columns if " ".join(c.describe().split()) not in doc]
    assert not missing, f"Report.{name}'s docstring does not describe {missing}"


@pytest.mark.parametrize("name", schema.NAMES)
def test_every_frame_property_describes_its_columns(name, monkeypatch):
    documented(name)
    plant(monkeypatch, name, lambda columns: columns + (schema.Column("planted", "int64", "."),))
    with pytest.raises(AssertionError, match="planted"):
        documented(name)


def architecture_table():
    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md")) as f:
        text = f.read()
    found = re.search(r"^\| frame \| one row per \| columns \|\n(?:\|.*\n)*", text, re.M)
    assert found, "docs/ARCHITECTURE.md has no frame table"
    return found.group(0)


def test_the_architecture_doc_has_the_schemas_frame_table(monkeypatch):
    assert architecture_table() == schema.markdown_table(), \
        "paste schema.markdown_table() into docs/ARCHITECTURE.md"
    plant(monkeypatch, "hosts", lambda columns: columns[:-1])
    assert architecture_table() != schema.markdown_table()
