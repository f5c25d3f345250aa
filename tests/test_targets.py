"""Target hardware: the TPU compiler's own answers for a topology with no TPU
here, published figures for GPUs (labelled estimates), and the fit.

Truth comes from outside shardviz: the same Keras model compiled directly
with ``jax.jit(...).lower(...).compile()`` on the topology's devices, and
the compiler's own out-of-memory refusal.
"""

import os

import jax
import keras
import needs
import pytest
from jax.sharding import NamedSharding

import shardviz
from shardviz import Plan, ShardvizError, examples
from shardviz.target import HARDWARE, collective_seconds, parse_target

HAVE_LIBTPU = needs.HAVE_LIBTPU
needs_tpu = needs.tpu


def test_the_table_of_targets_has_every_figure_and_its_source():
    table = shardviz.targets()
    assert set(table.name) == {"v4", "v5e", "v5p", "v6e", "h100", "h200", "b200", "cpu"}
    chips = table[table.family != "cpu"]
    for column in ("hbm_bytes", "hbm_bandwidth", "peak_bf16_flops", "link_bandwidth",
                   "between_bandwidth"):
        assert (chips[column] > 0).all(), column
    assert chips.source.str.contains("https://").all()
    assert set(chips.link) == {"ici", "nvlink"} and set(chips.between) == {"dcn", "infiniband"}


@pytest.mark.parametrize("text, words", [
    ("v9x:4x4", "Unknown target 'v9x:4x4'"),
    ("v5e", "has 2 dims"),
    ("v5p:4x4", "has 3 dims"),
    ("v5e:32x32", "at most 256 chips"),
    ("h100:16", "1 to 8 GPUs"),
    ("h100", "names the GPUs of one node"),
    ("cpu:8", "takes no topology"),
])
def test_bad_target_names_are_explained(text, words):
    with pytest.raises(ShardvizError, match=words) as info:
        parse_target(text)
    assert "Known targets" in info.value.hint or info.value.hint


def test_bad_slices_are_explained():
    for slices in (0, -1, 1.5, True):
        with pytest.raises(ShardvizError, match="slices must be a whole number"):
            parse_target("v5e:2x2", slices)


def test_collective_time_follows_the_published_cost_rules():
    w = 1e11
    assert collective_seconds("all-gather", 4 * 10**8, 8, w) == 4e8 / w
    assert collective_seconds("reduce-scatter", 4 * 10**8, 8, w) == 4e8 / w
    assert collective_seconds("all-reduce", 4 * 10**8, 8, w) == 2 * 4e8 / w
    assert collective_seconds("all-to-all", 4 * 10**8, 8, w) == 4e8 / (4 * w)
    assert collective_seconds("all-reduce", 64, 8, w) == pytest.approx(7e-6)  # latency floor
    assert collective_seconds("all-reduce", 64, 8, None) is None


# ------------------------------------------------------------------- TPU
def _direct_compile(model, plan, mesh_devices, inputs_shape):
    """Compile the model's forward pass on the TPU topology without shardviz:
    Keras's own distribution gives every layout."""
    dist = plan.to_keras(devices=list(mesh_devices.flat))
    mesh = dist.device_mesh.backend_mesh

    def placed(variables):
        return [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype,
                                     sharding=dist.get_variable_layout(v).backend_layout)
                for v in variables]

    x = jax.ShapeDtypeStruct(inputs_shape, "float32", sharding=NamedSharding(
        mesh, jax.sharding.PartitionSpec(*dist.get_data_layout(inputs_shape).axes)))

    def forward(tv, ntv, x):
        return model.stateless_call(tv, ntv, x)[0]

    lowered = jax.jit(forward).lower(placed(model.trainable_variables),
                                     placed(model.non_trainable_variables), x)
    return lowered.compile()


def _topology_mesh(name, shape):
    from jax.experimental import mesh_utils, topologies

    devices = topologies.get_topology_desc(platform="tpu", topology_name=name).devices
    return mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True)


@needs_tpu
def test_memory_per_chip_equals_the_tpu_compilers_own():
    plan = examples.megatron_plan()
    build = lambda: examples.mlp(d_model=512, hidden=2048)  # noqa: E731
    report = shardviz.analyze(build, plan, inputs=(16, 512), target="v5e:2x4")
    assert report.trace is not None and report.target.hardware.family == "tpu"
    assert "TPU" in report.trace.hlo_text or "T(8,128)" in report.trace.hlo_text  # TPU tiles
    compiled = _direct_compile(report.scan.model, plan, _topology_mesh("v5e:2x4", (2, 4)),
                               (16, 512))
    stats = compiled.memory_analysis()
    row = report.memory.iloc[0]
    assert row["argument_bytes"] == stats.argument_size_in_bytes
    assert row["output_bytes"] == stats.output_size_in_bytes
    assert row["temp_bytes"] == stats.temp_size_in_bytes
    # The capacity is the compiler's own (15.75 GiB of a 16 GB chip), so that
    # shardviz's verdict is the compiler's.
    assert 15 * 2**30 < row["capacity_bytes"] <= 16 * 2**30 and bool(row["fits"])
    assert not row["estimate"]
    # The collectives are the TPU compiler's: one all-reduce over `model`, on ICI.
    text = compiled.as_text()
    assert text.count(" all-reduce(") + text.count(" all-reduce-start(") == len(
        report.collectives) == 1
    assert report.collectives[["kind", "axes", "network"]].values.tolist() == [
        ["all-reduce", ("model",), "ici"]]
    assert (report.memory["total_bytes"] <= report.memory["capacity_bytes"]).all()


@needs_tpu
def test_the_fit_verdict_agrees_with_the_compilers_out_of_memory():
    # 2 x 8 GiB of fp32 kernels: replicated they overflow a 16 GB v5e chip,
    # split four ways they fit.
    build = lambda: examples.mlp(d_model=16384, hidden=131072)  # noqa: E731
    replicated = Plan({"batch": 4})
    report = shardviz.analyze(build, replicated, inputs=(4, 16384), target="v5e:2x2")
    (p,) = report.problems_of("does-not-fit")
    assert p.severity == "error" and "v5e:2x2" in p.message or "compiler" in p.message
    assert report.trace is None and len(report.variables) == 4  # the variables are kept
    with pytest.raises(Exception, match="RESOURCE_EXHAUSTED"):
        _direct_compile(report.scan.model, replicated, _topology_mesh("v5e:2x2", (4,)),
                        (4, 16384))
    split = Plan({"model": 4}, {".*up/kernel": (None, "model"), ".*down/kernel": ("model", None)},
                 batch_axis=None)
    fits = shardviz.analyze(build, split, inputs=(4, 16384), target="v5e:2x2")
    assert not fits.problems_of("does-not-fit") and bool(fits.memory["fits"].all())


@needs_tpu
def test_variables_alone_that_overflow_a_chip_do_not_fit_without_a_forward_pass():
    build = lambda: examples.mlp(d_model=16384, hidden=131072)  # noqa: E731
    report = shardviz.analyze(build, Plan({"batch": 4}), target="v5e:2x2")
    (p,) = report.problems_of("does-not-fit")
    assert "variables alone" in p.message and "16.0 GiB" in p.message
    assert "Shard" in p.hint and "up/kernel" in p.hint or "down/kernel" in p.hint
    assert not bool(report.memory["fits"].iloc[0])


@needs_tpu
def test_two_slices_put_the_data_parallel_all_reduce_on_dcn_and_the_model_one_on_ici():
    plan = Plan({"batch": 4, "model": 4}, examples.megatron_plan().rules)
    report = shardviz.analyze(examples.mlp, plan, inputs=(8, 16), target="v5e:2x4", slices=2,
                              train_step=True)
    c = report.collectives
    assert set(c.loc[c["axes"].map(lambda a: a == ("model",)), "network"]) == {"ici"}
    dcn = c[c.network == "dcn"]
    assert len(dcn) and set(dcn["axes"]) == {("batch",)} and set(dcn.kind) == {"all-reduce"}
    # Every DCN row is one transfer the TPU compiler hands to the multi-slice runtime.
    text = report.trace.hlo_text
    assert text.count('_xla_megascale_transfer_type="ALL_REDUCE"') >= len(dcn)
    assert len({d.slice_index for d in report.mesh.devices.flat}) == 2
    # Hand calculation of the estimates from the cost rules.
    v5e = HARDWARE["v5e"]
    for row in c.to_dict("records")[:3]:
        bandwidth = v5e.between_bandwidth if row["network"] == "dcn" else v5e.link_bandwidth
        group = 2 if row["network"] == "dcn" else row["group_size"]
        factor = {"all-reduce": 2.0, "all-to-all": 0.25}.get(row["kind"], 1.0)
        expected = max(factor * row["bytes_per_device"] / bandwidth, (group - 1) * 1e-6)
        assert row["seconds"] == pytest.approx(expected), row


@needs_tpu
def test_an_fsdp_gather_across_slices_counts_the_gathered_weight():
    """With the weights split over both slices, each cross-slice all-gather
    receives the two slices' parts: its bytes are the gathered buffer, twice
    what one slice sends."""
    plan = Plan({"fsdp": 16}, {"up/kernel": ("fsdp", None), "down/kernel": (None, "fsdp")},
                batch_axis="fsdp")
    report = shardviz.analyze(examples.mlp, plan, inputs=(32, 16), target="v5e:2x4",
                              slices=2)
    c = report.collectives
    dcn = c[c.network == "dcn"]
    assert len(dcn) and set(dcn.kind) == {"all-gather"}
    for row in dcn.to_dict("records"):
        assert row["bytes_per_device"] == row["result_bytes"] == 2 * row["operand_bytes"], row


@needs_tpu
@pytest.mark.parametrize("family", ["v4", "v5e", "v5p", "v6e"])
def test_the_published_hbm_holds_what_the_compiler_allows(family):
    """The table's HBM is the chip's memory in bytes as the compiler counts
    it (the published "GB" of these chips are GiB): never below what the
    compiler lets one program use, and within 5% of it."""
    from shardviz.target import sold_topologies
    from shardviz.target.tpu import tpu_usable_bytes

    topology = sold_topologies(HARDWARE[family])[0]
    usable = tpu_usable_bytes(family, topology)
    published = HARDWARE[family].hbm_bytes
    assert usable is not None and usable <= published < usable * 1.05, (usable, published)


NOISY_SCRIPT = """
import shardviz
from shardviz import examples
shardviz.analyze(examples.mlp, examples.megatron_plan(1, 4), inputs=(8, 16))
r = shardviz.analyze(examples.mlp, examples.megatron_plan(1, 4), inputs=(8, 16),
                     target="v5e:2x2", train_step=True)
print("fits", r.fits)
"""


@needs_tpu
def test_a_plain_script_prints_no_tpu_runtime_start_up_lines_unless_verbose(tmp_path):
    """With no chip here, libtpu's start-up warnings would read as errors;
    they appear only when SHARDVIZ_VERBOSE asks for them."""
    import subprocess
    import sys

    script = tmp_path / "plain.py"
    script.write_text(NOISY_SCRIPT)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TPU_", "SHARDVIZ_")) and k != "JAX_PLATFORMS"}
    quiet = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                           text=True, timeout=300, cwd=tmp_path)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert "fits True" in quiet.stdout
    for noise in ("host bounds", "worker hostname", "E0000", "InitGoogle"):
        assert noise not in quiet.stderr, quiet.stderr[-2000:]
    loud = subprocess.run([sys.executable, str(script)], env={**env, "SHARDVIZ_VERBOSE": "1"},
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert loud.returncode == 0 and "host bounds" in loud.stderr


@needs_tpu
def test_a_mesh_that_does_not_match_the_chips_is_a_clear_error():
    with pytest.raises(ShardvizError, match="has 8 devices, but the target v5e:4x4 has 16"):
        shardviz.analyze(examples.mlp, examples.megatron_plan(), target="v5e:4x4")
    with pytest.raises(ShardvizError, match="dcn_axes names none"):
        shardviz.analyze(examples.mlp, Plan({"batch": 2, "model": 8}), target="v5e:2x4",
                         slices=2, dcn_axes=())
    with pytest.raises(ShardvizError, match="does not have"):
        shardviz.analyze(examples.mlp, Plan({"batch": 2, "model": 8}), target="v5e:2x4",
                         slices=2, dcn_axes=("data",))
    with pytest.raises(ShardvizError, match="does not divide among them"):
        shardviz.analyze(examples.mlp, Plan({"batch": 1, "model": 16}), target="v5e:2x4",
                         slices=2)
    run = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=(8, 16),
                           target="v5e:2x4", mode="concrete")
    assert "compiled for, not run" in run.trace_error.message
    assert run.problems_of("trace-failed") and len(run.variables) == 4


def test_a_missing_libtpu_says_how_to_get_it(monkeypatch):
    from jax.experimental import topologies

    from shardviz.target import tpu as devices

    def refuse(**kwargs):
        raise RuntimeError("Unable to initialize backend 'tpu': no libtpu found")

    import importlib.util

    from shardviz.layout.geometry import mesh_model

    find_spec = importlib.util.find_spec
    devices.tpu_topology_devices.cache_clear()
    mesh_model.cache_clear()
    monkeypatch.setattr(topologies, "get_topology_desc", refuse)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "libtpu" else find_spec(name, *a))
    with pytest.raises(ShardvizError, match="needs libtpu") as info:
        shardviz.analyze(examples.mlp, examples.megatron_plan(), target="v5e:2x4")
    assert 'pip install "shardviz[tpu]"' in info.value.hint
    devices.tpu_topology_devices.cache_clear()
    mesh_model.cache_clear()


# ------------------------------------------------------------------- GPU
def test_a_gpu_target_labels_every_figure_an_estimate():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=(8, 16),
                              target="h100:8")
    row = report.memory.iloc[0]
    assert bool(row["estimate"]) and row["capacity_bytes"] == 80 * 10**9 and bool(row["fits"])
    assert report.collectives[["axes", "network"]].values.tolist() == [[("model",), "nvlink"]]
    assert set(report.estimate.part) == {"compute", "memory", "collectives"}
    assert report.estimate.bound.sum() == 1


def test_a_gpu_node_is_the_devices_a_plan_is_for_not_the_simulated_ones():
    """On h100:4 the plan is for the node's 4 GPUs: a mesh of 4 uses them
    all, with no advice to grow it to the 8 simulated devices (a mesh the
    node refuses)."""
    full = shardviz.analyze(examples.mlp, examples.megatron_plan(1, 4), target="h100:4")
    assert not full.problems_of("mesh-size"), full.problems_of("mesh-size")
    for other in (examples.megatron_plan(2, 4), examples.megatron_plan(1, 2)):
        with pytest.raises(ShardvizError, match="the target h100:4 has 4 GPUs"):
            shardviz.analyze(examples.mlp, other, target="h100:4")


def test_two_gpu_nodes_put_the_batch_axis_on_infiniband():
    plan = Plan({"batch": 2, "model": 4}, examples.megatron_plan().rules)
    report = shardviz.analyze(examples.mlp, plan, inputs=(8, 16), target="h100:4", slices=2,
                              train_step=True)
    c = report.collectives
    assert set(c.loc[c["axes"].map(lambda a: a == ("batch",)), "network"]) == {"infiniband"}
    assert set(c.loc[c["axes"].map(lambda a: a == ("model",)), "network"]) == {"nvlink"}


def test_without_a_target_nothing_changes():
    report = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=(8, 16))
    assert report.target.hardware.family == "cpu" and set(report.collectives.network) == {"host"}
    assert report.collectives.seconds.isna().all() and report.estimate.empty
    assert report.memory["capacity_bytes"].isna().all()
    assert keras.backend.backend() == "jax"


@needs_tpu
def test_on_a_tpu_target_the_hosts_come_from_the_topology():
    report = shardviz.analyze(examples.mlp, Plan({"batch": 4, "model": 4}, {
        ".*up/kernel": (None, "model"), ".*down/kernel": ("model", None)}), target="v5e:4x4")
    hosts = report.hosts
    assert len(hosts) == 4 and hosts["device_count"].tolist() == [4, 4, 4, 4]
    chips = {int(d.id): int(d.process_index) for d in report.mesh.devices.flat}
    for process, devices in zip(hosts["process"], hosts["devices"]):
        assert all(chips[d] == process for d in devices)
    by_process = report.devices.groupby("process")["variable_bytes"].sum()
    assert hosts["variable_bytes"].tolist() == by_process.tolist()


@needs_tpu
@pytest.mark.parametrize("target", ["v5e:1x1", "v6e:1x1"])
def test_a_single_chip_compiles(target):
    report = shardviz.analyze(examples.mlp, shardviz.Plan({"batch": 1}, {}), inputs=(8, 16),
                              target=target, train_step=True)
    assert report.trace_error is None and report.fits is True
    assert report.mesh.capacity_bytes > 15 * 2**30


HUGE = """
import keras

def build():
    x = keras.Input((32768,))
    return keras.Model(x, keras.layers.Dense(65536, name="huge")(x))
"""


def _huge():
    namespace: dict = {}
    exec(HUGE, namespace)
    return namespace["build"]


@needs_tpu
def test_one_verdict_when_the_compiler_refuses_for_memory(tmp_path, capsys):
    """Every place a verdict is shown says the same: the frame, the summary,
    the problems, the text and HTML reports, the CLI (JSON and text) and the
    Explorer, for both spellings of the target."""
    import json

    from shardviz.cli import main

    build = _huge()
    report = shardviz.analyze(build, shardviz.Plan({"batch": 1}, {}), inputs=(8, 32768),
                              target="v5e:1x1", train_step=True)
    (problem,) = report.problems_of("does-not-fit")
    mem = report.memory.iloc[0]
    assert report.fits is False and not mem["fits"]
    assert report.summary()["fits"] is False
    needed = report.trace_error.needed
    assert needed > mem["capacity_bytes"] and mem["total_bytes"] == needed
    from shardviz.render.text import fit_text

    for shown in (str(report), report._repr_html_(), fit_text(report)):
        assert "DOES NOT FIT" in shown and "fits" not in shown.replace("DOES NOT FIT", "")

    module = tmp_path / "huge_model.py"
    module.write_text(HUGE)
    args = ["report", f"{module}:build", "--mesh", "batch=1", "--inputs", "8x32768",
            "--train-step", "--target", "v5litepod-1"]
    main(args + ["--json", str(tmp_path / "r.json")])
    text = capsys.readouterr().out
    assert "DOES NOT FIT" in text and "fits" not in text.replace("DOES NOT FIT", "")
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["summary"]["fits"] is False
    memory = saved["frames"]["memory"]
    assert memory["rows"][0][memory["columns"].index("fits")] is False
    assert main(args + ["--fail-on", "does-not-fit", "-q"]) == 1

    from shardviz.widgets.explorer import Explorer

    app = Explorer(build, inputs=(8, 32768), plan=shardviz.Plan({"batch": 1}, {}),
                   target="v5litepod-1", train_step=True, auto_run=False)
    assert app.target == "v5e:1x1" and app.run_button.description == "Run train step"
    app.run()
    status = app.run_status.value
    assert "DOES NOT FIT" in status and "fits" not in status.replace("DOES NOT FIT", "")
    assert app.report.fits is False


def test_product_names_are_targets_too():
    from shardviz.target import parse_target

    assert parse_target("v5litepod-1").name == "v5e:1x1"
    assert parse_target("v6e-8").name == "v6e:2x4"
    assert parse_target("v5p-8").chips == 4
    with pytest.raises(shardviz.ShardvizError, match="Unknown target"):
        parse_target("v5litepod-3")


@needs_tpu
def test_every_product_is_a_slice_of_one_device_per_chip():
    """Each published slice, by its product name: libtpu describes one JAX
    device per chip (v4 and v5p as megacore), on the hosts Cloud TPU gives
    it (one VM for v5litepod-8 and v6e-8)."""
    from shardviz.target import PRODUCT_NAMES
    from shardviz.target.tpu import tpu_topology_devices

    for product, name in PRODUCT_NAMES.items():
        target = parse_target(product)
        devices = tpu_topology_devices(*name.split(":"))
        assert len(devices) == target.chips, product
        hosts = len({d.process_index for d in devices})
        assert hosts == (1 if target.chips <= 8 and target.hardware.name in ("v5e", "v6e")
                         else max(1, target.chips // 4)), product


@needs_tpu
def test_a_v4_chip_is_one_device():
    report = shardviz.analyze(examples.mlp, Plan({"batch": 4}, {}), inputs=(8, 16),
                              target="v4-8", train_step=True)
    assert report.trace_error is None and report.fits
    assert report.mesh.devices.size == 4


@pytest.mark.parametrize("target,words", [
    ("v5e:3x3", ["No v5e slice", "'3x3'", "v5e:4x4"]),
    ("v5e:1x2", ["No v5e slice", "v5e:2x2"]),
    ("v5p:2x2x3", ["No v5p slice", "whole 4x4x4 cubes", "v5p:2x2x4"]),
    ("v6e:4x2", ["No v6e slice", "2x4"]),
])
def test_a_topology_no_tpu_sells_is_refused_with_one_that_is(target, words):
    with pytest.raises(ShardvizError) as e:
        shardviz.analyze(examples.mlp, Plan({"batch": 4}, {}), inputs=(8, 16), target=target)
    shown = str(e.value)
    assert all(w in shown for w in words), shown


@needs_tpu
def test_where_nothing_was_compiled_the_verdict_is_unknown_everywhere(tmp_path, capsys):
    """Keras refuses the plan (4 key/value heads over an 8-wide axis), so no
    pass runs: the verdict is unknown in the frame, the summary, the text and
    HTML reports, the CLI (text, JSON and its fit guard) and the Explorer,
    and never reads as fitting."""
    import json

    import numpy as np

    from shardviz.cli import main
    from shardviz.render.text import fit_text

    plan = Plan({"batch": 1, "model": 8}, {".*_k/kernel": (None, "model", None)})
    tokens = np.zeros((8, 16), "int32")
    report = shardviz.analyze(lambda: examples.llama(), plan, inputs=tokens, target="v5e:2x4")
    assert report.trace_error is not None and report.problems_of("indivisible")
    assert report.fits is None and report.memory.iloc[0]["fits"] is None
    assert report.summary()["fits"] is None and report.totals.fits is None
    unknown = "UNKNOWN, nothing was compiled"
    for shown in (str(report), report._repr_html_(), fit_text(report)):
        shown = " ".join(shown.split())  # the terminal's lines wrap
        assert unknown in shown and "fits" not in shown.replace(unknown, ""), shown

    args = ["report", "shardviz.examples:llama", "--mesh", "batch=1,model=8",
            "--rule", ".*_k/kernel=None,model,None", "--inputs", "8x16:int32",
            "--target", "v5e:2x4"]
    assert main(args + ["--json", str(tmp_path / "r.json")]) == 1
    text = " ".join(capsys.readouterr().out.split())
    assert unknown in text and "fits" not in text.replace(unknown, "")
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["fits"] is None
    assert main(args + ["--fail-on", "does-not-fit", "-q"]) == 1

    from shardviz.widgets.explorer import Explorer

    app = Explorer(lambda: examples.llama(), inputs=tokens, plan=plan, target="v5e:2x4",
                   auto_run=False)
    app.run()
    assert "fits" not in app.run_status.value and app.report.fits is None
