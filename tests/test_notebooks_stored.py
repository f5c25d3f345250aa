"""The tutorial notebooks are stored executed, so that nbval checks every cell.

nbval skips a code cell whose stored execution_count is None, so a notebook
saved without running would pass `pytest --nbval` while checking nothing.
"""

import glob
import os

import nbformat
import pytest

NOTEBOOKS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "notebooks", "*.ipynb")))


def test_there_are_notebooks():
    names = [os.path.basename(p) for p in NOTEBOOKS]
    assert names == [
        "01_quickstart.ipynb", "02_layout_rules.ipynb", "03_activation_layouts.ipynb",
        "04_tensor_parallel_transformer.ipynb", "05_debugging_layouts.ipynb",
        "06_planning_large_models.ipynb", "07_will_it_fit.ipynb", "08_fine_tune.ipynb",
        "09_keras_hub.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_every_code_cell_is_stored_executed_in_order(path):
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    assert cells, "a notebook without code"
    counts = [c.execution_count for c in cells]
    unexecuted = [i for i, n in enumerate(counts) if n is None]
    assert not unexecuted, f"code cells {unexecuted} are stored unexecuted: run `make notebooks`"
    assert counts == list(range(1, len(cells) + 1)), "cells were not run once, top to bottom"
    for c in cells:
        for out in c.outputs:
            assert out.output_type != "error", f"a stored error in cell {c.execution_count}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_ignored_outputs_say_why(path):
    nb = nbformat.read(path, as_version=4)
    for c in nb.cells:
        if c.cell_type == "code" and "NBVAL_IGNORE_OUTPUT" in c.source:
            lines = c.source.splitlines()
            marker = next(i for i, line in enumerate(lines) if "NBVAL_IGNORE_OUTPUT" in line)
            why = lines[marker + 1] if marker + 1 < len(lines) else ""
            assert why.startswith("# Why:") and len(why) > 20, \
                "say in the next comment line (# Why: ...) why the output truly varies"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_stored_widget_state_is_absent_or_shown(path):
    """Widget state in a notebook's metadata is either none, or the state of
    widgets its outputs display (so that it renders without a kernel)."""
    nb = nbformat.read(path, as_version=4)
    state = nb.metadata.get("widgets", {}).get(
        "application/vnd.jupyter.widget-state+json", {}).get("state", {})
    shown = {o.get("data", {}).get("application/vnd.jupyter.widget-view+json", {}).get("model_id")
             for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])}
    shown.discard(None)
    if state:
        assert shown and shown <= set(state), \
            "the stored widget state holds none of the widgets the outputs display"
