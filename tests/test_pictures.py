"""Pictures: the geometry behind them is JAX's, and every figure renders headless."""

import io
import math
import subprocess
import sys

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import shardviz
from shardviz import Plan, ShardvizError, examples
from shardviz.render.palette import HATCHES, HUES, device_style
from shardviz.render.tiles import tile_layout

AXES = ("a", "b", "c")


@st.composite
def layouts(draw):
    """A mesh of 1 to 3 axes (at most 8 devices), a tensor of rank 0 to 5
    whose split dims divide, and a spec using each axis at most once."""
    n_axes = draw(st.integers(1, 3))
    sizes = draw(st.lists(st.sampled_from([1, 2, 4]), min_size=n_axes, max_size=n_axes)
                 .filter(lambda s: math.prod(s) <= 8))
    rank = draw(st.integers(0, 5))
    free = list(AXES[:n_axes])
    spec = []
    for _ in range(rank):
        choice = draw(st.sampled_from([None] + free))
        if choice is not None:
            free.remove(choice)
        spec.append(choice)
    shape = []
    for axis in spec:
        k = sizes[AXES.index(axis)] if axis else 1
        shape.append(k * draw(st.integers(1, 3)))
    return tuple(sizes), tuple(shape), tuple(spec)


def jax_indices(sizes, shape, spec):
    devices = np.array(jax.devices()[: math.prod(sizes)]).reshape(sizes)
    sharding = NamedSharding(Mesh(devices, AXES[: len(sizes)]), PartitionSpec(*spec))
    return {d.id: idx for d, idx in sharding.devices_indices_map(shape).items()}


def span(index, size):
    return (index.start or 0, size if index.stop is None else index.stop)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts())
def test_tiles_match_jax_devices_indices_map(case):
    sizes, shape, spec = case
    indices = jax_indices(sizes, shape, spec)
    layout = tile_layout(shape, indices)
    holder = {d: t for t in layout.tiles for d in t.devices}
    assert sorted(holder) == sorted(indices)  # every device is drawn, exactly once
    assert sum(len(t.devices) for t in layout.tiles) == len(indices)
    for device, idx in indices.items():
        tile = holder[device]
        if layout.row_dim is not None:
            assert tile.rows == span(idx[layout.row_dim], shape[layout.row_dim])
        if layout.col_dim is not None:
            assert tile.cols == span(idx[layout.col_dim], shape[layout.col_dim])
        for d, r in zip(layout.panel_dims, tile.panel):
            assert r == span(idx[d], shape[d])
        for d in layout.unsplit_dims:  # a dim stated as "not split" is whole on every device
            assert span(idx[d], shape[d]) == (0, shape[d])
    for panel in layout.panels:  # the tiles of a panel cover it exactly once
        area = sum((t.rows[1] - t.rows[0]) * (t.cols[1] - t.cols[0]) for t in layout.tiles_in(panel))
        assert area == layout.n_rows * layout.n_cols


@settings(max_examples=60, deadline=None)
@given(layouts())
def test_report_geometry_agrees_with_jax_for_concrete_and_abstract_meshes(case):
    sizes, shape, spec = case
    from shardviz.layout.geometry import MeshModel, tensor_geometry

    mesh_axes = tuple(zip(AXES, sizes))
    concrete = tensor_geometry(shape, "float32", spec, MeshModel(mesh_axes, abstract=False))
    abstract = tensor_geometry(shape, "float32", spec, MeshModel(mesh_axes, abstract=True))
    truth = jax_indices(sizes, shape, spec)
    assert concrete.indices() == truth
    assert abstract.indices() == truth  # flat mesh positions = device ids here


def concrete_report():
    model = examples.transformer_block()
    x = np.ones((8, 16, 64), "float32")
    return shardviz.analyze(model, examples.transformer_plan(), inputs=x, mode="concrete")


@pytest.fixture(scope="module")
def report():
    return concrete_report()


def test_text_equals_jax_own_for_1d_and_2d(report, capsys):
    for path in ("up/kernel", "up/bias", "ln1/gamma", "attn/query/bias"):
        ours = report.text(path)
        capsys.readouterr()
        jax.debug.visualize_array_sharding(report.values[path], use_color=False)
        assert ours == capsys.readouterr().out, path


def test_text_refuses_ranks_jax_cannot_draw(report):
    with pytest.raises(ShardvizError, match="only 1-D and 2-D") as info:
        report.text("attn/query/kernel")
    assert "report.show('attn/query/kernel')" in info.value.hint


def test_picture_of_a_3d_kernel_and_a_4d_activation(report):
    fig = report.show("attn/query/kernel")  # (64, 8, 8), split on heads
    layout = fig.shardviz_layout
    assert layout.shape == (64, 8, 8) and (layout.row_dim, layout.col_dim) == (1, 0)
    assert len(layout.tiles) == 4 and all(len(t.devices) == 2 for t in layout.tiles)
    act = report.show("attn/query/output").shardviz_layout  # (8, 16, 8, 8)
    assert (act.row_dim, act.col_dim, act.panel_dims) == (0, 2, ())
    assert len(act.tiles) == 8
    chosen = report.show("attn/query/kernel", rows=2, cols=0).shardviz_layout
    assert (chosen.row_dim, chosen.col_dim, chosen.panel_dims) == (2, 0, (1,))
    assert len(chosen.panels) == 4


def test_replicated_tensor_shows_all_its_devices(report):
    layout = report.show("ln1/gamma").shardviz_layout
    assert len(layout.tiles) == 1 and layout.tiles[0].devices == tuple(range(8))


def test_scalar_draws(report):
    fig = shardviz.show_sharding(jax.ShapeDtypeStruct(
        (), "float32", sharding=NamedSharding(report.mesh.jax_mesh, PartitionSpec())))
    assert fig.shardviz_layout.tiles[0].devices == tuple(range(8))


def test_show_sharding_of_a_real_array_matches_its_shards(report):
    value = report.values["attn/query/kernel"]
    layout = shardviz.show_sharding(value, title="q").shardviz_layout
    for shard in value.addressable_shards:
        tile = next(t for t in layout.tiles if shard.device.id in t.devices)
        assert tile.rows == span(shard.index[1], 8)


@pytest.mark.parametrize("kind", ["show", "mesh", "memory", "flow", "grid", "compare"])
def test_every_figure_renders_headless_to_png_and_svg(report, kind):
    other = shardviz.analyze(report.scan, Plan.data_parallel(8), inputs=(8, 16, 64))
    fig = {
        "show": lambda: report.show("up/kernel"),
        "mesh": report.show_mesh,
        "memory": report.show_memory,
        "flow": report.show_flow,
        "grid": report.show_grid,
        "compare": lambda: shardviz.compare(report, other, ("megatron", "data")),
    }[kind]()
    from matplotlib.figure import Figure

    assert isinstance(fig, Figure)
    png = fig._repr_png_()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    buf = io.BytesIO()
    fig.savefig(buf, format="svg")
    assert b"<svg" in buf.getvalue()[:2000]


def test_meshes_of_one_two_and_three_axes():
    for mesh in ({"x": 8}, {"batch": 2, "model": 4}, {"a": 2, "b": 2, "c": 2}):
        report = shardviz.analyze(examples.mlp, Plan(mesh))
        assert report.show_mesh()._repr_png_()[:4] == b"\x89PNG"


def test_memory_picture_stacks_read_the_report(report):
    stacks = report.memory_parts
    assert stacks["variables"] == report.variable_bytes_per_device
    assert stacks["temporaries"] == report.trace.memory["temp_bytes"]
    assert report.memory["activation_bytes"].iloc[0] == report.activations[
        "bytes_per_device"].sum()
    assert report.memory["input_bytes"].iloc[0] == stacks.get("inputs", 0)
    # The parts add up to what XLA's memory analysis counts.
    assert sum(stacks.values()) == report.memory["total_bytes"].iloc[0]


def test_huge_tensors_and_256_device_meshes_still_draw():
    plan = Plan({"data": 16, "model": 16}, {".*kernel": ("data", "model"), ".*bias": ("model",)})
    report = shardviz.analyze(lambda: examples.mlp(d_model=65536, hidden=65536), plan)
    assert report.mesh.abstract
    fig = report.show("up/kernel")
    assert len(fig.shardviz_layout.tiles) == 256
    assert fig._repr_png_()[:4] == b"\x89PNG"
    fig = report.show("up/bias")  # 16 shards, each on 16 devices
    assert all(len(t.devices) == 16 for t in fig.shardviz_layout.tiles)
    assert report.show_mesh()._repr_png_()[:4] == b"\x89PNG"
    assert report.show_memory()._repr_png_()[:4] == b"\x89PNG"


def test_bad_choices_give_clear_errors(report):
    with pytest.raises(ShardvizError, match="No variable or output path") as info:
        report.show("up/kernal")
    assert "up/kernel" in info.value.hint
    with pytest.raises(ShardvizError, match="rows=5 is not a dim of a rank-2 tensor"):
        report.show("up/kernel", rows=5)
    with pytest.raises(ShardvizError, match="both dim 0"):
        report.show("attn/query/kernel", rows=0, cols=0)
    with pytest.raises(ShardvizError, match="needs a jax.Array"):
        shardviz.show_sharding(np.zeros(3))
    static = shardviz.analyze(examples.mlp, examples.megatron_plan())
    with pytest.raises(ShardvizError, match="needs a forward pass"):
        static.show_flow()


def test_palette_keeps_devices_apart():
    styles = [device_style(d) for d in range(len(HUES) * len(HATCHES))]
    assert len(set(styles)) == len(styles) == 72
    # Styles repeat only after every hue has met every hatch.
    assert device_style(0) == device_style(len(HUES) * len(HATCHES))
    assert device_style(1)[1] == device_style(0)[1] != device_style(len(HUES))[1]


def test_drawing_leaves_no_pyplot_state():
    # Keras itself imports pyplot; shardviz's figures must never register with it.
    code = (
        "import shardviz\n"
        "shardviz.simulate_devices(8)\n"
        "from shardviz import examples\n"
        "r = shardviz.analyze(examples.mlp, examples.megatron_plan(), inputs=(8, 16))\n"
        "figs = [r.show('up/kernel'), r.show_mesh(), r.show_memory(), r.show_flow()]\n"
        "for fig in figs:\n"
        "    fig._repr_png_()\n"
        "import matplotlib.pyplot as plt\n"
        "print(plt.get_fignums(), type(figs[0].canvas).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "MPLBACKEND": "Agg"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[] FigureCanvasAgg"


def test_labels_scale_with_the_resolution_they_are_saved_at():
    """The Explorer and the HTML file save pictures at twice the pixels; the
    labels must grow with them, not keep their 1x size in pixels."""
    from PIL import Image

    from shardviz.render.mpl import Board, new_figure

    fig = new_figure(3, 1)
    Board(fig, (0, 0, 1, 1), (0, 3), (0, 1)).labels([(1.5, 0.5, "up/kernel", "black", 12)])

    def extent(dpi):
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
        rows, cols = np.nonzero(np.asarray(Image.open(buf).convert("L")) < 128)
        return cols.max() - cols.min(), rows.max() - rows.min()

    (w1, h1), (w2, h2) = extent(80), extent(160)
    assert w2 / w1 == pytest.approx(2, rel=0.1) and h2 / h1 == pytest.approx(2, rel=0.15)

