"""What reading the compiler's buffer assignment costs: the same compile
with and without its dump, and the reading itself.

An 8B Llama-shaped model's forward pass (shardviz.examples.llama_8b, inputs
16 x 2048) on a 2 x 8 mesh of v5e:4x4, and a 16-block, 1024-wide decoder's
train step on v5e:2x4, each analysed twice with the compile cache off: once
as shardviz does (the dump written and read), once with the dump turned
off. Each pair runs in one process after a first analysis that warms
tracing, in alternating order.

Run:  .venv/bin/python bench/bench_peak.py

Prints, per program: the seconds with and without the dump, the added
share (target: at most 10%), the seconds spent reading the dump, and the
buffers live at the peak.
"""

from __future__ import annotations

import os
import time

os.environ["SHARDVIZ_CACHE"] = "off"

import shardviz  # noqa: E402
from shardviz import examples  # noqa: E402
from shardviz.trace import buffer_dump  # noqa: E402

shardviz.simulate_devices(8)

read_seconds: list[float] = []
_read = buffer_dump.read_or_why


def timed_read(directory, function=None):
    t = time.perf_counter()
    try:
        return _read(directory, function)
    finally:
        read_seconds.append(time.perf_counter() - t)


buffer_dump.read_or_why = timed_read
_options = buffer_dump.dump_options


def analyse(case, dump: bool):
    buffer_dump.dump_options = _options if dump else (lambda directory: {})
    build, plan, inputs, target, train = case
    t = time.perf_counter()
    report = shardviz.analyze(build, plan, inputs=inputs, target=target, train_step=train)
    return time.perf_counter() - t, report


CASES = {
    "llama_8b forward, v5e:4x4": (examples.llama_8b, examples.llama_plan(data=2, model=8),
                                  (16, 2048), "v5e:4x4", False),
    "16-block decoder train step, v5e:2x4": (
        lambda: examples.llama(n_blocks=16, d_model=1024, ff=4096, heads=16, kv_heads=8,
                               vocab=32000),
        examples.llama_plan(data=2, model=4), (16, 512), "v5e:2x4", True),
}

for name, case in CASES.items():
    analyse(case, dump=False)  # tracing warmed
    with_dump, without = [], []
    for order in ((True, False), (False, True)):
        for dump in order:
            read_seconds.clear()
            seconds, report = analyse(case, dump)
            (with_dump if dump else without).append(seconds)
            if dump:
                reading = sum(read_seconds)
                live = len(report.peak)
    a, b = min(with_dump), min(without)
    print(f"{name}: {a:.1f} s with the dump, {b:.1f} s without ({(a - b) / b:+.1%}); "
          f"reading it {reading:.2f} s; {live:,} buffers live at the peak")
