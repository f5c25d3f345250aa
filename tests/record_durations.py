"""Write tests/durations.json from the durations pytest printed: the seconds
each test (setup, call and teardown together) or notebook cell took, which
conftest.py reads to start the longest first.

Run:  .venv/bin/python -m pytest ... --durations=0 -vv > run.log
      .venv/bin/python tests/record_durations.py run.log
"""

import json
import re
import sys
from pathlib import Path

LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(setup|call|teardown)\s+(\S.*?)\s*$")


def main() -> None:
    seconds: dict[str, float] = {}
    for line in Path(sys.argv[1]).read_text().splitlines():
        m = LINE.match(line)
        if m:
            seconds[m.group(3)] = seconds.get(m.group(3), 0.0) + float(m.group(1))
    kept = {k: round(v, 1) for k, v in sorted(seconds.items()) if v >= 0.5}
    out = Path(__file__).with_name("durations.json")
    out.write_text(json.dumps(kept, indent=0, sort_keys=True) + "\n")
    print(f"{len(kept)} tests of at least 0.5 s, {sum(kept.values()):.0f} s in all -> {out}")


if __name__ == "__main__":
    main()
