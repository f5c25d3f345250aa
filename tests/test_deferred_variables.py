"""A model shardviz builds only to plan is never allocated later: its
variables are not left on Keras's list of variables to initialize, which
the user's next ``fit`` would otherwise fill with random weights."""

from __future__ import annotations

import subprocess
import sys

import shardviz
from shardviz import Plan, examples

SCRIPT = """
import os, threading, time
import numpy as np
import shardviz
shardviz.simulate_devices(8)
import keras
from shardviz import Plan, examples

def watch():
    while True:
        rss = int(open(f"/proc/{os.getpid()}/statm").read().split()[1]) * 4096
        if rss > 3e9:
            print("ALLOCATED", rss, flush=True)
            os._exit(3)
        time.sleep(0.2)

threading.Thread(target=watch, daemon=True).start()
# 16 GiB of float32 kernels, planned, never allocated.
shardviz.analyze(lambda: examples.mlp(d_model=16384, hidden=131072), Plan({"batch": 4}))
x = np.zeros((8, 16), "float32")
with examples.megatron_plan().to_keras().scope():
    m = examples.mlp()
    m.compile(optimizer="adam", loss="mse")
    m.fit(x, x, batch_size=8, epochs=1, verbose=0)
print("small fit ran", flush=True)
"""


def test_a_planned_model_is_not_allocated_by_the_next_fit(tmp_path):
    script = tmp_path / "plan_then_fit.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert "ALLOCATED" not in done.stdout, done.stdout
    assert done.returncode == 0 and "small fit ran" in done.stdout, done.stderr[-2000:]


def test_analyze_leaves_kerass_list_of_variables_to_initialize_as_it_was():
    from keras.src.backend.common import global_state

    before = list(global_state.get_global_attribute("uninitialized_variables") or [])
    shardviz.analyze(examples.mlp, Plan({"batch": 8}), inputs=(8, 16), train_step=True)
    after = global_state.get_global_attribute("uninitialized_variables") or []
    assert [id(v) for v in after] == [id(v) for v in before]
