"""Write tests/durations.json from the durations pytest printed: the seconds
each test (setup, call and teardown together) or notebook cell took, which
conftest.py reads to start the longest first.

Run:  .venv/bin/python -m pytest ... --durations=0 -vv > run.log
      .venv/bin/python tests/record_durations.py run.log
or, from a JUnit XML file (``make test PYTEST_ADDOPTS=--junitxml=run.xml``):
      .venv/bin/python tests/record_durations.py run.xml
"""

import json
import re
import sys
from pathlib import Path

LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(setup|call|teardown)\s+(\S.*?)\s*$")


def from_junit(path: Path) -> dict[str, float]:
    """Each test case's seconds, by its node id, from a JUnit XML file."""
    import xml.etree.ElementTree as ET

    seconds: dict[str, float] = {}
    for case in ET.parse(path).iter("testcase"):
        folder, _, stem = (case.get("classname") or "").partition(".")
        if folder == "notebooks":  # notebooks.01_quickstart.ipynb
            node = f"{folder}/{stem}::{case.get('name')}"
        else:  # tests.test_fit, or tests.test_fit.TestClass
            module, _, cls = stem.partition(".")
            node = f"{folder}/{module}.py::" + (f"{cls}::" if cls else "") + str(case.get("name"))
        seconds[node] = seconds.get(node, 0.0) + float(case.get("time") or 0)
    return seconds


def main() -> None:
    seconds: dict[str, float] = {}
    path = Path(sys.argv[1])
    if path.suffix == ".xml":
        seconds = from_junit(path)
    for line in ([] if path.suffix == ".xml" else path.read_text().splitlines()):
        m = LINE.match(line)
        if m:
            seconds[m.group(3)] = seconds.get(m.group(3), 0.0) + float(m.group(1))
    kept = {k: round(v, 1) for k, v in sorted(seconds.items()) if v >= 0.5}
    out = Path(__file__).with_name("durations.json")
    out.write_text(json.dumps(kept, indent=0, sort_keys=True) + "\n")
    print(f"{len(kept)} tests of at least 0.5 s, {sum(kept.values()):.0f} s in all -> {out}")


if __name__ == "__main__":
    main()
