"""Beyond one host: per-host views, exported multi-host code, and
``shardviz verify`` on a real multi-process JAX cluster on 127.0.0.1."""

import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import shardviz
from shardviz import ShardvizError, examples
from shardviz.multihost import compare_shards, predicted_shards

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
MEGATRON = ["--mesh", "batch=2,model=4", "--rule", ".*up/kernel=None,model",
            "--rule", ".*up/bias=model", "--rule", ".*down/kernel=model,None"]


MARK = f"shardviz-test-{os.getpid()}"
"""In the environment of every process this test module starts, so that a
leftover worker is found even while other tests run their own."""


def environment(tmp=None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, HERE]), "SHARDVIZ_TEST_MARK": MARK}
    env.pop("XLA_FLAGS", None)
    if tmp is not None:  # the workers' folder, kept when verification fails
        env["TMPDIR"] = str(tmp)
    return env


def run(*args, timeout=300, cwd=ROOT, tmp=None):
    out = subprocess.run([sys.executable, "-m", "shardviz", *args], capture_output=True,
                         text=True, cwd=cwd, env=environment(tmp), timeout=timeout)
    assert "Traceback" not in out.stderr, out.stderr
    return out


def write(folder, name: str, source: str) -> str:
    """A builder module written under the test's own folder; its path."""
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return str(path)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


IN_WORKER = 'os.environ.get("KERAS_DISTRIBUTION_PROCESS_ID") is not None'


def workers_left() -> list[int]:
    """Pids of this module's verify workers still running (none may be)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"shardviz.multihost.worker" not in f.read():
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
    hosts = out.stdout.splitlines()[-2:]  # each host's share, its batch rows as slices
    assert [line.split()[0] for line in hosts] == ["0", "1"]
    assert " 0:4 " in hosts[0] and " 4:8 " in hosts[1] and "KiB" in hosts[0]
    assert out.stderr.index("predicting each process's shards") < \
        out.stderr.index("running the plan on 2 local processes")
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
    assert "running the plan" not in out.stderr  # no worker started, and none is said to
    assert not workers_left()


def test_usage_errors_exit_2_and_start_nothing():
    out = run("verify", "shardviz.examples:mlp", *MEGATRON, "--processes", "3",
              "--inputs", "8x16")
    assert out.returncode == 2 and "do not split evenly over 3 processes" in out.stderr
    out = run("verify", "shardviz.examples:mlp", *MEGATRON, "--processes", "2")
    assert out.returncode == 2 and "--inputs" in out.stderr
    assert not workers_left()


def test_a_crashing_worker_is_reported_with_its_last_lines(tmp_path):
    out = run("verify", "verify_builders:crashes", *MEGATRON, "--processes", "2",
              "--inputs", "8x16", tmp=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAIL worker 0 crashed (exit 3)" in out.stdout
    assert "building the model, then the worker dies" in out.stdout
    assert not workers_left()


def test_a_hanging_worker_is_stopped_at_the_time_limit_saying_what_it_was_doing(tmp_path):
    out = run("verify", "verify_builders:hangs", *MEGATRON, "--processes", "2",
              "--inputs", "8x16", "--timeout", "20", tmp=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert ("FAIL timed out after 20 s: worker 0 was building the model; worker 1 was "
            "building the model" in out.stdout), out.stdout
    assert not workers_left()


def test_a_disagreement_is_one_line_naming_host_device_and_tensor():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=(8, 16),
                              processes=2)
    variables, outputs = predicted_shards(report)
    results = []
    for host, devices in ((0, [0, 1, 2, 3]), (1, [4, 5, 6, 7])):
        results.append({
            "process": host, "local_devices": devices,
            "variables": {p: [[d, shards[d]] for d in devices] for p, shards in variables.items()},
            "outputs": [[[d, out[d]] for d in devices] for out in outputs]})
    assert compare_shards(report, results, 2) == ([], 2 * 4 * (len(variables) + len(outputs)))
    results[1]["variables"]["up/kernel"][0][1] = [[0, 16], [0, 64]]  # a whole copy
    lines, _ = compare_shards(report, results, 2)
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


def test_a_builder_file_given_by_a_relative_path_is_what_every_worker_loads(tmp_path):
    write(tmp_path, "m.py", """
        from shardviz import examples

        def build():
            return examples.mlp()
        """)
    out = run("verify", "m.py:build", *MEGATRON, "--processes", "2", "--inputs", "8x16",
              cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "gathered output matches" in out.stdout
    from shardviz.model.builders import builder_ref, load_builder

    assert builder_ref("m.py:build") == f"{os.path.abspath('m.py')}:build"
    loaded = load_builder(str(tmp_path / "m.py") + ":build")
    assert builder_ref(loaded) == f"{tmp_path / 'm.py'}:build"
    assert not workers_left()


def test_a_worker_that_cannot_import_the_builder_says_so(tmp_path):
    path = write(tmp_path, "only_here.py", f"""
        import os

        if {IN_WORKER}:
            raise RuntimeError("this module refuses to load in a worker")
        from shardviz import examples

        def build():
            return examples.mlp()
        """)
    out = run("verify", f"{path}:build", *MEGATRON, "--processes", "2", "--inputs", "8x16",
              tmp=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert re.search(r"FAIL worker \d failed while importing the builder: .*refuses to load "
                     "in a worker", out.stdout), out.stdout
    assert "Keras refused" not in out.stdout + out.stderr
    assert not workers_left()


DICT_MODEL = """
    import keras

    def build():
        ids = keras.Input((12,), dtype="int32", name="token_ids")
        mask = keras.Input((12,), dtype="int32", name="padding_mask")
        h = keras.layers.Embedding(32, 16, name="embed")(ids)
        h = keras.layers.Dense(64, name="up")(h)
        h = h * keras.ops.expand_dims(keras.ops.cast(mask, "float32"), -1)
        out = keras.layers.Dense(16, name="down")(h)
        return keras.Model({"token_ids": ids, "padding_mask": mask}, out, name="dict_model")
    """


def test_verify_feeds_a_model_that_takes_a_dict_from_the_command_line(tmp_path):
    path = write(tmp_path, "dict_model.py", DICT_MODEL)
    out = run("verify", f"{path}:build", *MEGATRON, "--processes", "2",
              "--inputs", "token_ids=8x12:int32", "--inputs", "padding_mask=8x12:int32")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "gathered output matches" in out.stdout
    out = run("verify", f"{path}:build", *MEGATRON, "--processes", "2",
              "--inputs", "token_ids=8x12:int32", "--inputs", "8x12:int32")
    assert out.returncode == 2 and "name every input" in out.stderr
    assert not workers_left()


def test_verify_takes_a_dict_of_shape_dtype_structs(tmp_path):
    path = write(tmp_path, "dict_model.py", DICT_MODEL)
    code = textwrap.dedent(f"""
        import jax
        import shardviz
        from shardviz import examples

        spec = jax.ShapeDtypeStruct((8, 12), "int32")
        result = shardviz.verify({path + ":build"!r}, examples.megatron_plan(), processes=2,
                                 inputs={{"token_ids": spec, "padding_mask": spec}})
        print(result)
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env=environment(), timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "verified on 2 processes" in out.stdout and "gathered output matches" in out.stdout
    assert not workers_left()


def test_workers_end_when_the_process_that_called_verify_is_killed(tmp_path):
    path = write(tmp_path, "blocks.py", f"""
        import os
        import time

        from shardviz import examples

        def build():
            if {IN_WORKER}:
                open(os.path.join(os.path.dirname(__file__), f"sleeping-{{os.getpid()}}"), "w")
                time.sleep(600)
            return examples.mlp()
        """)
    code = (f"import shardviz\nfrom shardviz import examples\n"
            f"shardviz.verify({path + ':build'!r}, examples.megatron_plan(), processes=2, "
            f"inputs=(8, 16), timeout=300, workdir={str(tmp_path)!r})\n")
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=environment(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sleeping: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(sleeping) < 2 and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.2)
            sleeping = [int(p.name.split("-")[1]) for p in tmp_path.glob("sleeping-*")]
        assert len(sleeping) == 2, f"the workers did not reach the builder: {parent.poll()}"
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while any(alive(p) for p in sleeping) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in sleeping if alive(p)]
        assert not workers_left()
    finally:
        parent.kill()
        parent.wait()
        kill(sleeping + workers_left())


def test_what_a_builder_starts_in_a_worker_is_stopped_with_it(tmp_path):
    path = write(tmp_path, "starts_a_child.py", f"""
        import os
        import subprocess
        import sys

        from shardviz import examples

        def build():
            if {IN_WORKER}:
                child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
                open(os.path.join(os.path.dirname(__file__), f"child-{{child.pid}}"), "w")
            return examples.mlp()
        """)
    children: list[int] = []
    try:
        out = run("verify", f"{path}:build", *MEGATRON, "--processes", "2", "--inputs", "8x16")
        children = [int(p.name.split("-")[1]) for p in tmp_path.glob("child-*")]
        assert out.returncode == 0, out.stdout + out.stderr
        assert len(children) == 2
        assert not [p for p in children if alive(p)]
    finally:
        kill(children)


def test_a_builder_with_different_weights_in_each_process_is_told_to_seed(tmp_path):
    path = write(tmp_path, "unseeded.py", """
        import keras
        import numpy as np

        def build():
            seed = int(np.random.default_rng().integers(2**31))  # differs in every process
            init = keras.initializers.RandomNormal(seed=seed)
            x = keras.Input((16,))
            h = keras.layers.Dense(64, name="up", kernel_initializer=init)(x)
            return keras.Model(x, keras.layers.Dense(16, name="down")(h))
        """)
    out = run("verify", f"{path}:build", *MEGATRON, "--processes", "2", "--inputs", "8x16",
              tmp=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "different weights in each process" in out.stderr
    assert "keras.utils.set_random_seed(0)" in out.stderr
    assert "Keras refused" not in out.stderr
    assert not workers_left()


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5"])
def test_a_time_limit_that_is_not_a_positive_number_is_refused(value):
    out = run("verify", "shardviz.examples:mlp", *MEGATRON, "--processes", "2",
              "--inputs", "8x16", "--timeout", value, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"--timeout {value}" in out.stderr and "finite number of seconds above 0" in out.stderr
    assert not workers_left()


def test_verify_refuses_a_time_limit_that_is_not_a_positive_number():
    for bad in (math.nan, math.inf, 0, -1.0, True, "10"):
        with pytest.raises(ShardvizError, match="timeout="):
            shardviz.verify("shardviz.examples:mlp", examples.megatron_plan(), processes=2,
                            inputs=(8, 16), timeout=bad)
    assert not workers_left()


def test_a_workdir_that_is_a_file_or_cannot_be_made_is_refused_before_any_work(tmp_path):
    import time

    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for bad, words in ((a_file, "cannot hold the workers' files"),
                       (a_file / "below", "cannot hold the workers' files"),
                       (42, "is not a path")):
        start = time.perf_counter()
        with pytest.raises(ShardvizError, match=words) as raised:
            # A builder that would fail if it ran: the workdir is checked before any work.
            shardviz.verify("shardviz.examples:nothing_here", examples.megatron_plan(),
                            processes=2, inputs=(8, 16), workdir=bad)
        assert "workdir" in str(raised.value) and time.perf_counter() - start < 5
    made = tmp_path / "new" / "dir"
    from shardviz.multihost.processes import check_workdir

    assert check_workdir(made) == str(made) and made.is_dir()
    assert not workers_left()


def test_a_builder_that_never_returns_is_stopped_at_the_time_limit(tmp_path):
    path = write(tmp_path, "never.py", """
        import time

        def build():
            time.sleep(3600)
        """)
    start = time.monotonic()
    out = run("verify", f"{path}:build", *MEGATRON, "--processes", "2", "--inputs", "8x16",
              "--timeout", "6", timeout=60, tmp=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAIL verify timed out after 6 s in this process while building the model" in out.stdout
    assert "--timeout" in out.stdout
    assert time.monotonic() - start < 30
    assert not workers_left()


def test_verify_runs_a_train_step_on_every_process_and_compares_it_with_one():
    out = run("verify", "shardviz.examples:mlp", *MEGATRON, "--processes", "2",
              "--inputs", "8x16", "--train-step")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "the train step's loss and every updated variable match" in out.stdout
    bad = run("verify", "shardviz.examples:mlp", *MEGATRON, "--processes", "2",
              "--inputs", "8x16", "--labels", "8x16")
    assert bad.returncode == 2 and "add --train-step" in bad.stderr
    assert not workers_left()


def test_the_single_process_step_moves_every_trainable_variable():
    """The comparison is not of weights the step left alone: one SGD step of
    the reference run changes every trainable variable."""
    from shardviz.multihost.train_check import SEED, arrays, reference_step

    loss, updated = reference_step(examples.mlp, None, [[[8, 16], "float32"]],
                                   [[8, 16], "float32"])
    import keras

    keras.utils.set_random_seed(SEED)
    initial = {v.path: v.numpy() for v in examples.mlp().trainable_variables}
    assert loss > 0 and set(updated) == set(initial)
    for path, value in updated.items():
        assert abs(value - initial[path]).max() > 1e-6, path
    assert arrays([[[3], "int32"]], SEED)[0].max() <= 1  # ids and masks stay valid


HUB_LLAMA = """
import keras
import keras_hub


def small():
    keras.utils.set_random_seed(0)
    return keras_hub.models.LlamaBackbone(
        vocabulary_size=256, num_layers=2, num_query_heads=8, hidden_dim=128,
        intermediate_dim=256, num_key_value_heads=2, name="small_llama")
"""


def test_a_keras_hub_backbone_with_its_own_map_verifies_forward_and_train_step(tmp_path):
    pytest.importorskip("keras_hub")
    path = write(tmp_path, "hub_llama.py", HUB_LLAMA)
    code = textwrap.dedent(f"""
        import shardviz
        shardviz.simulate_devices(8)
        import jax, keras, keras_hub
        from shardviz import Plan

        mesh = keras.distribution.DeviceMesh((2, 4), ("batch", "model"),
                                             keras.distribution.list_devices())
        plan = Plan.from_keras(keras_hub.models.LlamaBackbone.get_layout_map(mesh))
        spec = jax.ShapeDtypeStruct((8, 32), "int32")
        result = shardviz.verify({path + ":small"!r}, plan, processes=2, train_step=True,
                                 inputs={{"token_ids": spec, "padding_mask": spec}})
        print(result)
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env=environment(), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "gathered output matches" in out.stdout
    assert "the train step's loss and every updated variable match" in out.stdout
    assert not workers_left()
