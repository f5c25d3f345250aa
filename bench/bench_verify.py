"""``shardviz verify`` end to end: the Megatron MLP and the transformer block
on 2 local processes, run as a user runs it (a fresh ``shardviz verify``
command, start-up, the single-process reference and both workers included).

Run:  .venv/bin/python bench/bench_verify.py

Target: the MLP on 2 processes in <= 60 s.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = {
    "Megatron MLP": ["shardviz.examples:mlp", "--mesh", "batch=2,model=4",
                     "--rule", ".*up/kernel=None,model", "--rule", ".*up/bias=model",
                     "--rule", ".*down/kernel=model,None", "--inputs", "8x16"],
    "transformer block": ["shardviz.examples:transformer_block", "--mesh", "batch=2,model=4",
                          "--rule", ".*attn/(query|key|value)/kernel=None,model,None",
                          "--rule", ".*attn/attention_output/kernel=model,None,None",
                          "--rule", ".*up/kernel=None,model", "--rule", ".*down/kernel=model,None",
                          "--inputs", "8x16x64"],
}


def main(repeats: int = 3) -> None:
    env = {**os.environ, "PYTHONPATH": ROOT}
    for name, args in CASES.items():
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "shardviz", "verify", *args,
                                  "--processes", "2", "-q"], capture_output=True, text=True,
                                 env=env, cwd=ROOT, timeout=600)
            times.append(time.perf_counter() - t)
            if out.returncode != 0:
                print(out.stdout, out.stderr)
                raise SystemExit(f"{name}: shardviz verify exited {out.returncode}")
        print(f"{name}: median {statistics.median(times):.1f} s, "
              f"min {min(times):.1f} s over {repeats} runs (target for the MLP <= 60 s); "
              f"{out.stdout.strip().splitlines()[0]}")


if __name__ == "__main__":
    main()
