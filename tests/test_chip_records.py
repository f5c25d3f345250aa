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
import compare  # noqa: E402

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
