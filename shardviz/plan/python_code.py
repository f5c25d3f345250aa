"""A plan as Python source: the code that builds its Keras distribution.

:func:`plan_to_python` is the body of :meth:`Plan.to_python
<shardviz.plan.value.Plan.to_python>`: the devices, the mesh, the layout map
and the ``ModelParallel``, and, for several hosts, the initialisation and the
helpers that feed each host its rows of the batch and gather the outputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from .bounds import check_processes

if TYPE_CHECKING:
    from .value import Plan


def plan_to_python(plan: Plan, devices_expr: str | None = None,
                   processes: int | None = None) -> str:
    """What :meth:`Plan.to_python <shardviz.plan.value.Plan.to_python>` returns."""
    plan.refuse_errors()
    if processes is not None:
        return multihost_python(plan, processes, devices_expr)
    lines = ["import keras", "", *layout_lines(plan, devices_expr)]
    lines += [
        "distribution = keras.distribution.ModelParallel(",
        f"    layout_map=layout_map, batch_dim_name={plan.batch_axis!r}",
        ")",
    ]
    return "\n".join(lines)


def layout_lines(plan: Plan, devices_expr: str | None) -> list[str]:
    """The devices, mesh and layout map of :func:`plan_to_python`'s code."""
    devices_expr = devices_expr or f"keras.distribution.list_devices()[:{plan.mesh_size}]"
    return [
        f"devices = {devices_expr}",
        "mesh = keras.distribution.DeviceMesh(",
        f"    shape={plan.mesh_shape!r}, axis_names={plan.axis_names!r}, devices=devices",
        ")",
        "layout_map = keras.distribution.LayoutMap(mesh)",
        *(f"layout_map[{r.key!r}] = {tuple(r.axes)!r}" for r in plan.rules),
    ]


def multihost_python(plan: Plan, processes: int, devices_expr: str | None) -> str:
    """The code of :func:`plan_to_python` for ``processes`` hosts: one copy runs
    on every host."""
    processes = cast(int, check_processes(processes, plan.mesh_size))
    lines = [
        f"# One copy of this code runs on each of the {processes} hosts.",
        "import jax",
        "import keras",
        "import numpy as np",
        "from jax.experimental import multihost_utils",
        "",
        "# The coordinator's address, the process count and this process's id come from",
        "# KERAS_DISTRIBUTION_JOB_ADDRESSES, KERAS_DISTRIBUTION_NUM_PROCESSES and",
        "# KERAS_DISTRIBUTION_PROCESS_ID (or pass them as arguments).",
        "keras.distribution.initialize()",
        f"if jax.process_count() != {processes}:",
        f"    raise RuntimeError(f'This plan is for {processes} processes; "
        "{jax.process_count()} joined.')",
        "",
        "# Every host lists the same global devices, its own among them.",
        *layout_lines(plan, devices_expr),
    ]
    lines += [
        "# Each host feeds only its own rows of the batch (see local_batch), so Keras",
        "# must not shard the dataset again.",
        "distribution = keras.distribution.ModelParallel(",
        f"    layout_map=layout_map, batch_dim_name={plan.batch_axis!r}, "
        "auto_shard_dataset=False",
        ")",
        "keras.distribution.set_distribution(distribution)",
        "",
        "",
        "def global_batch(local, batch_size):",
        '    """This host\'s rows (from local_batch) as one global array of batch_size rows,',
        '    laid out as Keras lays out inputs."""',
        "    shape = (batch_size,) + tuple(local.shape[1:])",
        "    layout = distribution.get_data_layout(shape).backend_layout",
        "    return jax.make_array_from_process_local_data(layout, local, shape)",
        "",
        "",
        "def local_batch(batch):",
        '    """The rows of a global batch (every host has all of it) this host feeds."""',
        "    layout = distribution.get_data_layout(batch.shape).backend_layout",
        "    mine = {d for d in jax.local_devices()}",
        "    rows = sorted({(i[0].start or 0, i[0].stop or batch.shape[0])",
        "                   for d, i in layout.devices_indices_map(batch.shape).items()",
        "                   if d in mine})",
        "    return np.concatenate([batch[a:b] for a, b in rows])",
        "",
        "",
        "def gather(outputs):",
        '    """Global outputs as NumPy on every host: each host holds only its shards."""',
        "    return multihost_utils.process_allgather(outputs, tiled=True)",
    ]
    return "\n".join(lines)
