"""The records made on a real TPU v5e chip (``bench/chip/record.py``;
``tests/data/chip/v5e-1x1.jsonl``) say what made them and hold what a
comparison needs: whether ``model.fit`` ran or the compiler refused it, and
the chip compiler's ``memory_analysis()`` of the program fit ran.
``bench/chip/compare.py`` prints shardviz's answers beside them.
"""

import json
import pathlib
import sys

import shardviz  # noqa: F401

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "chip"))
import importlib.util  # noqa: E402

import compare  # noqa: E402
import pytest  # noqa: E402

HAVE_LIBTPU = importlib.util.find_spec("libtpu") is not None

RECORDS = {r["case"]: r for r in compare.records()}


def test_the_records_say_what_made_them():
    for r in RECORDS.values():
        assert r["chip"] == "TPU v5 lite"
        assert r["date"]
        for key in ("jax", "keras", "libtpu"):
            assert r["versions"][key], key
        assert r["ran"] == (not r.get("error"))
        if r["ran"] and r["kind"] == "fit":
            assert r["step_seconds"] > 0 and r["memory"]["alias_bytes"] > 0


def test_records_are_json_lines():
    text = (ROOT / "tests" / "data" / "chip" / "v5e-1x1.jsonl").read_text()
    assert all(json.loads(line) for line in text.splitlines() if line.strip())


# A case whose train step compiles in about a minute here; the decoder's take longer
# (run bench/chip/compare.py for every record).
CASES = ["dict_model_fit_b32"]


@pytest.mark.parametrize("case", CASES)
def test_verdict_and_memory_agree_with_the_chip(case):
    if not HAVE_LIBTPU:
        pytest.skip("libtpu is not installed")
    record = RECORDS[case]
    report = compare.shardviz_answer(record)
    assert report.fits is record["ran"], report.problems_of("does-not-fit")
    ours = int(report.memory.iloc[0]["total_bytes"])
    theirs = compare.chip_bytes(record)
    assert abs(ours - theirs) <= 0.01 * theirs, (ours, theirs)
    if record["ran"]:
        mem = report.memory.iloc[0]
        for key in ("argument_bytes", "output_bytes", "alias_bytes"):
            assert abs(mem[key] - record["memory"][key]) <= 0.01 * record["memory"][key], key
