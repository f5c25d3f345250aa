"""shardviz's buffer assignment on this machine beside the chip's own
(``tests/data/chip/v5e-1x1-peak.jsonl``, made by ``peak_record.py``): the
peak's total and its buffers, for each recorded case.

    .venv/bin/python bench/records/chip/compare_peak.py [--cases a,b]

Prints, per case: the chip's total, shardviz's, and how many of the live
buffers agree by name and bytes.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
PEAKS = HERE.parents[2] / "tests" / "data" / "chip" / "v5e-1x1-peak.jsonl"


def peaks() -> dict[str, dict]:
    return {r["case"]: r for r in map(json.loads, PEAKS.read_text().splitlines())}


def compared(case: str) -> tuple[dict, object]:
    """The chip's record and shardviz's report of the same step."""
    sys.path.insert(0, str(HERE))
    import compare

    records = {r["case"]: r for r in compare.records()}
    return peaks()[case], compare.shardviz_answer(records[case])


def kinds(live) -> list[tuple[str, int]]:
    """The buffers by instruction kind and bytes (instruction numbers differ
    with what a process traced before)."""
    import re

    return sorted((re.sub(r"\.\d+", "", name), size) for name, size in live)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    args = parser.parse_args()
    cases = [c for c in args.cases.split(",") if c] or list(peaks())
    for case in cases:
        chip, report = compared(case)
        ours = report.peak_source.buffer_peak
        same = kinds(chip["live"]) == kinds(ours.live)
        print(f"{case}: chip {chip['total']:,} bytes at the peak, shardviz {ours.total:,} "
              f"({ours.total - chip['total']:+,}); {len(ours.live)} buffers, "
              f"{'the same' if same else 'NOT the same'} kinds and bytes; verdict chip "
              f"{'ran' if chip['ran'] else 'refused'}, shardviz {report.fits}")


if __name__ == "__main__":
    main()
