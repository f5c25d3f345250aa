"""Pictures of anything with a sharding, and of two reports side by side.

>>> import jax, numpy as np, shardviz
>>> mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("batch", "model"))
>>> sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch", None, "model"))
>>> fig = shardviz.show_sharding(jax.ShapeDtypeStruct((4, 8, 16), "float32", sharding=sharding))
>>> len(fig.shardviz_layout.tiles)
8
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ShardvizError

if TYPE_CHECKING:
    import jax
    import pandas as pd

    from ..report import Report
    from .mpl import ShardvizFigure


def _coords(sharding: object) -> dict | None:
    mesh = getattr(sharding, "mesh", None)
    devices: Any = getattr(mesh, "devices", None)  # an array of jax Devices
    if devices is None:
        return None
    devices = np.asarray(devices)
    return {int(devices[idx].id): tuple(int(i) for i in idx) for idx in np.ndindex(devices.shape)}


def show_sharding(x: jax.Array | jax.ShapeDtypeStruct, *, rows: int | None = None,
                  cols: int | None = None, title: str = "") -> ShardvizFigure:
    """A picture of how ``x`` lands on its devices, for any rank.

    Args:
        x: a ``jax.Array``, or a ``jax.ShapeDtypeStruct`` with a sharding.
        rows, cols: the tensor dims to draw as rows and columns.
        title: a name for the tensor.
    """
    sharding = getattr(x, "sharding", None)
    shape = getattr(x, "shape", None)
    if sharding is None or shape is None:
        raise ShardvizError(
            f"show_sharding needs a jax.Array or a jax.ShapeDtypeStruct with a sharding, got "
            f"{type(x).__name__}.",
            hint="For a ShapeDtypeStruct pass sharding=NamedSharding(mesh, spec).",
        )
    from ..layout.geometry import spec_from_sharding
    from .mpl import tensor_figure

    shape = tuple(int(d) for d in shape)
    indices = {d.id: idx for d, idx in sharding.devices_indices_map(shape).items()}
    spec = spec_from_sharding(sharding, len(shape)) if hasattr(sharding, "spec") else None
    return tensor_figure(shape, str(x.dtype), indices, coords=_coords(sharding), title=title,
                         spec=spec, rows=rows, cols=cols)


def compare(a: Report, b: Report, labels: tuple[str, str] = ("A", "B")) -> ShardvizFigure:
    """Two reports side by side: memory per device, collective bytes, problems."""
    from .mpl import compare_figure

    two_reports(a, b, labels)
    return compare_figure(a, b, labels)


def two_reports(a: object, b: object, labels: object) -> None:
    """Refuses what :func:`compare` cannot draw, naming it and what to give."""
    for which, r in (("first", a), ("second", b)):
        if not all(hasattr(r, n) for n in ("summary", "totals", "memory", "plan")):
            raise ShardvizError(
                f"compare takes two reports from shardviz.analyze; the {which} is "
                f"{type(r).__name__} {r!r:.40}.",
                hint="e.g. shardviz.compare(shardviz.analyze(model, plan_a, inputs), "
                     "shardviz.analyze(model, plan_b, inputs)).")
    if (not isinstance(labels, (tuple, list)) or len(labels) != 2
            or not all(isinstance(x, str) for x in labels)):
        raise ShardvizError(f"compare's labels={labels!r:.60} are not two names.",
                            hint="e.g. labels=('FSDP', 'Megatron').")


def compare_table(a: Report, b: Report, labels: tuple[str, str] = ("A", "B")) -> pd.DataFrame:
    """The figures behind :func:`compare`, as a DataFrame (one column per report)."""
    import pandas as pd

    two_reports(a, b, labels)
    def column(r: Report) -> dict[str, object]:
        s = r.summary()
        return {
            "mesh": str(r.plan.mesh_dict),
            "variable bytes per device": s["variable_bytes_per_device"],
            "memory per device (XLA)": r.memory["total_bytes"].iloc[0] if r.totals.compiled else None,
            "collectives": s["collectives"],
            "collective bytes per device": s["collective_bytes"],
            "errors": s["problems"]["error"],
            "warnings": s["problems"]["warning"],
        }

    return pd.DataFrame({labels[0]: column(a), labels[1]: column(b)})


def show_sweep(frame: Any) -> ShardvizFigure:
    """Draw a :func:`shardviz.sweep`: bytes per device and collective bytes
    per mesh shape, and where the rules fail."""
    import pandas as pd


    needed = {"mesh", "errors", "bytes_per_device", "collective_bytes"}
    if not isinstance(frame, pd.DataFrame) or not needed <= set(frame.columns):
        what = (f"a DataFrame without {sorted(needed - set(frame.columns))}"
                if isinstance(frame, pd.DataFrame) else f"{type(frame).__name__} {frame!r:.40}")
        raise ShardvizError(f"show_sweep() draws what shardviz.sweep returns, not {what}.",
                            hint="Pass the frame of shardviz.sweep(model, rules, devices=...).")
    from .mpl import sweep_figure

    return sweep_figure(frame)
