"""Beyond one host: per-host views, exported multi-host code, and
``shardviz verify`` on a real multi-process JAX cluster on 127.0.0.1."""

import os
import re
import subprocess
import sys

import pytest

import shardviz
from shardviz import ShardvizError, examples
from shardviz.multihost import _compare, _predicted

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
MEGATRON = ["--mesh", "batch=2,model=4", "--rule", ".*up/kernel=None,model",
            "--rule", ".*up/bias=model", "--rule", ".*down/kernel=model,None"]


MARK = f"shardviz-test-{os.getpid()}"
"""In the environment of every process this test module starts, so that a
leftover worker is found even while other tests run their own."""


def run(*args, timeout=300):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, HERE]), "SHARDVIZ_TEST_MARK": MARK}
    env.pop("XLA_FLAGS", None)
    out = subprocess.run([sys.executable, "-m", "shardviz", *args], capture_output=True,
                         text=True, cwd=ROOT, env=env, timeout=timeout)
    assert "Traceback" not in out.stderr, out.stderr
    return out


def workers_left() -> list[int]:
    """Pids of this module's verify workers still running (none may be)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"shardviz.multihost_worker" not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"SHARDVIZ_TEST_MARK={MARK}".encode() in f.read():
                    out.append(int(pid))
        except OSError:
            pass
    return out


def test_per_host_bytes_are_the_sum_over_each_hosts_devices():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan(batch=4, model=2),
                              inputs=(8, 16), processes=2, train_step=True)
    hosts = report.hosts
    assert hosts["devices"].tolist() == [(0, 1, 2, 3), (4, 5, 6, 7)]
    by_process = report.devices.groupby("process")["variable_bytes"].sum()
    assert hosts["variable_bytes"].tolist() == by_process.tolist()
    assert hosts["batch_rows"].tolist() == [((0, 4),), ((4, 8),)]
    rows = report.collectives
    crossing = rows[rows["crosses_hosts"]]
    # The gradient all-reduce over `batch` leaves each host; the one over `model` stays.
    assert set(crossing["axes"]) == {("batch",)}
    assert not rows[rows["axes"] == ("model",)]["crosses_hosts"].any()
    assert hosts["cross_host_bytes"].tolist() == [int(crossing["bytes_per_device"].sum())] * 2
    assert report.show_memory()._repr_png_()[:4] == b"\x89PNG"
    from matplotlib.collections import LineCollection

    mesh = report.show_mesh()  # hosts are separated by lines
    assert any(isinstance(a, LineCollection) for a in mesh.artists)


def test_a_device_count_that_does_not_split_is_refused():
    with pytest.raises(ShardvizError, match="do not split evenly over 3 processes"):
        shardviz.analyze(examples.mlp, examples.megatron_plan(), processes=3)
    with pytest.raises(ShardvizError, match="do not split evenly"):
        examples.megatron_plan().to_python(processes=3)


def test_exported_multihost_code_names_what_a_host_needs():
    code = examples.megatron_plan().to_python(processes=2)
    compile(code, "<plan>", "exec")
    for needed in ("keras.distribution.initialize()", "auto_shard_dataset=False",
                   "make_array_from_process_local_data", "process_allgather",
                   "jax.process_count() != 2"):
        assert needed in code


def test_verify_agrees_for_the_megatron_mlp():
    out = run("verify", "shardviz.examples:mlp", *MEGATRON, "--processes", "2",
              "--inputs", "8x16")
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"verified on 2 processes: \d+ shards agree", out.stdout)
    assert "gathered output matches the single-process run" in out.stdout
    assert not workers_left()


def test_verify_agrees_for_the_transformer_block(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(examples.transformer_plan().to_json())
    out = run("verify", "shardviz.examples:transformer_block", "--plan", str(plan),
              "--processes", "2", "--inputs", "8x16x64")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "gathered output matches" in out.stdout
    assert not workers_left()


def test_a_plan_keras_refuses_exits_2_with_its_message():
    out = run("verify", "shardviz.examples:mlp", "--mesh", "batch=2,model=4",
              "--rule", ".*down/kernel=None,model,batch", "--processes", "2", "--inputs", "8x16")
    assert out.returncode == 2
    assert "Keras refuses this plan" in out.stderr and "down/kernel" in out.stderr
    assert not workers_left()


def test_usage_errors_exit_2_and_start_nothing():
    out = run("verify", "shardviz.examples:mlp", *MEGATRON, "--processes", "3",
              "--inputs", "8x16")
    assert out.returncode == 2 and "do not split evenly over 3 processes" in out.stderr
    out = run("verify", "shardviz.examples:mlp", *MEGATRON, "--processes", "2")
    assert out.returncode == 2 and "--inputs" in out.stderr
    assert not workers_left()


def test_a_crashing_worker_is_reported_with_its_last_lines():
    out = run("verify", "verify_builders:crashes", *MEGATRON, "--processes", "2",
              "--inputs", "8x16")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAIL worker 0 crashed (exit 3)" in out.stdout
    assert "building the model, then the worker dies" in out.stdout
    assert not workers_left()


def test_a_hanging_worker_is_stopped_at_the_time_limit():
    out = run("verify", "verify_builders:hangs", *MEGATRON, "--processes", "2",
              "--inputs", "8x16", "--timeout", "25")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAIL workers 0, 1 did not finish within 25 s" in out.stdout
    assert not workers_left()


def test_a_disagreement_is_one_line_naming_host_device_and_tensor():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=(8, 16),
                              processes=2)
    variables, outputs = _predicted(report)
    results = []
    for host, devices in ((0, [0, 1, 2, 3]), (1, [4, 5, 6, 7])):
        results.append({
            "process": host, "local_devices": devices,
            "variables": {p: [[d, shards[d]] for d in devices] for p, shards in variables.items()},
            "outputs": [[[d, out[d]] for d in devices] for out in outputs]})
    assert _compare(report, results, 2) == ([], 2 * 4 * (len(variables) + len(outputs)))
    results[1]["variables"]["up/kernel"][0][1] = [[0, 16], [0, 64]]  # a whole copy
    lines, _ = _compare(report, results, 2)
    assert lines == ["host 1, mesh position 4: up/kernel holds [0:16, 0:64], shardviz "
                     "predicted [0:16, 0:16]"]


def test_verify_needs_a_builder_the_workers_can_import():
    def local():
        return examples.mlp()

    with pytest.raises(ShardvizError, match="worker processes can import"):
        shardviz.verify(local, examples.megatron_plan(), processes=2, inputs=(8, 16))


def test_verify_feeds_every_input_of_a_model_with_two():
    out = run("verify", "verify_builders:two_inputs", *MEGATRON, "--processes", "2",
              "--inputs", "8x16", "--inputs", "8x16")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "gathered output matches" in out.stdout
    assert not workers_left()
