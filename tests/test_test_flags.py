"""The test run compiles for the CPU at LLVM's level 0 (conftest.py says why).
That flag must reach only machine code: the optimized program, its memory and
its collectives are the same with and without it, for the simulated CPU
devices and for the TPU compiler, forward pass and Keras's train step."""

import json
import os
import subprocess
import sys

from needs import tpu

PROGRAMS = r"""
import hashlib, json
import numpy as np
import shardviz
shardviz.simulate_devices(8)
from shardviz import examples
out = {}
for target in (None, "v5e:2x4"):
    for train in (False, True):
        kw = {"target": target} if target else {}
        r = shardviz.analyze(lambda: examples.llama(), examples.llama_plan(),
                             inputs=np.zeros((8, 16), "int32"), train_step=train, **kw)
        assert r.hlo_text, r.problems
        out[f"{target} {train}"] = [hashlib.sha256(r.hlo_text.encode()).hexdigest(),
                                    r.memory_parts, r.collectives.to_dict("records")]
print(json.dumps(out, default=str))
"""


def compiled(flags: str) -> dict:
    env = {**os.environ, "XLA_FLAGS": flags, "SHARDVIZ_CACHE": "off"}
    run = subprocess.run([sys.executable, "-c", PROGRAMS], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@tpu
def test_the_test_runs_code_generation_flag_changes_no_program_and_no_figure():
    from conftest import TEST_FLAG

    assert TEST_FLAG in os.environ["XLA_FLAGS"]
    plain, flagged = compiled(""), compiled(TEST_FLAG)
    assert set(plain) == {"None False", "None True", "v5e:2x4 False", "v5e:2x4 True"}
    for key in plain:
        assert flagged[key] == plain[key], key
