"""Tiles: the geometry behind every picture of one tensor.

A tensor of any rank is drawn as tiles on a grid: one tensor dim along the
rows, one along the columns, and every other split dim as a separate panel
(small multiples). A tile is one distinct shard and lists every device that
holds it. The tiles are read off JAX's ``devices_indices_map`` (through
:meth:`~shardviz.layout.geometry.TensorGeometry.indices`), so a picture can only be
as right as JAX.

>>> from shardviz.layout.geometry import MeshModel, tensor_geometry
>>> mesh = MeshModel((("batch", 2), ("model", 4)), abstract=True)
>>> g = tensor_geometry((8, 16, 32), "float32", ("batch", None, "model"), mesh)
>>> layout = tile_layout(g.shape, g.indices())
>>> layout.row_dim, layout.col_dim, layout.panel_dims, len(layout.tiles)
(0, 2, (), 8)
"""

from __future__ import annotations

import dataclasses

from ..errors import ShardvizError


@dataclasses.dataclass(frozen=True)
class Tile:
    """One distinct shard.

    Attributes:
        panel: the index ranges of the panel dims, ``((start, stop), ...)``.
        rows: ``(start, stop)`` along the row dim (``(0, 1)`` if none).
        cols: ``(start, stop)`` along the column dim (``(0, 1)`` if none).
        devices: the ids of every device holding this shard, sorted.
    """

    panel: tuple
    rows: tuple[int, int]
    cols: tuple[int, int]
    devices: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class TileLayout:
    shape: tuple[int, ...]
    row_dim: int | None
    col_dim: int | None
    panel_dims: tuple[int, ...]
    panels: tuple
    """The panel keys, in index order."""
    tiles: tuple[Tile, ...]

    @property
    def unsplit_dims(self) -> tuple[int, ...]:
        """Dims that are neither rows, columns nor panels (never split)."""
        used = {self.row_dim, self.col_dim, *self.panel_dims}
        return tuple(d for d in range(len(self.shape)) if d not in used)

    @property
    def n_rows(self) -> int:
        return self.shape[self.row_dim] if self.row_dim is not None else 1

    @property
    def n_cols(self) -> int:
        return self.shape[self.col_dim] if self.col_dim is not None else 1

    def tiles_in(self, panel) -> list[Tile]:
        return [t for t in self.tiles if t.panel == panel]


def _range(index: slice, size: int) -> tuple[int, int]:
    start = 0 if index.start is None else int(index.start)
    stop = size if index.stop is None else int(index.stop)
    return start, stop


def split_dims(shape, indices) -> tuple[int, ...]:
    """The dims some device holds only a part of."""
    out = []
    for d, size in enumerate(shape):
        if any(_range(idx[d], size) != (0, size) for idx in indices.values()):
            out.append(d)
    return tuple(out)


def choose_dims(shape, indices, rows: int | None = None, cols: int | None = None):
    """``(row_dim, col_dim, panel_dims)``: the user's choice, checked, or by
    default the split dims (rank 1: one row; rank 2: rows then columns, as
    ``jax.debug.visualize_sharding`` draws them)."""
    rank = len(shape)
    for name, d in (("rows", rows), ("cols", cols)):
        if d is not None and not (isinstance(d, int) and -rank <= d < rank):
            raise ShardvizError(
                f"{name}={d!r} is not a dim of a rank-{rank} tensor {tuple(shape)}.",
                hint=f"Pick {name} from 0 to {rank - 1}" if rank else "A scalar has no dims to pick.",
            )
    rows = rows % rank if rows is not None else None
    cols = cols % rank if cols is not None else None
    if rows is not None and rows == cols:
        raise ShardvizError(
            f"rows and cols are both dim {rows}; pick two different dims of {tuple(shape)}.")
    split = split_dims(shape, indices)
    if rank == 0:
        return None, None, ()
    if rank == 1:
        return (rows, None, ()) if rows is not None else (None, 0, ())
    if rank == 2:
        order = [0, 1]
    else:  # split dims first, then the longest unsplit ones
        unsplit = sorted((d for d in range(rank) if d not in split), key=lambda d: -shape[d])
        order = list(split) + unsplit
    pool = [d for d in order if d not in (rows, cols)]
    if rows is None:
        rows = pool.pop(0)
    if cols is None:
        cols = pool.pop(0)
    panels = tuple(d for d in split if d not in (rows, cols))
    return rows, cols, panels


def tile_layout(shape, indices, rows: int | None = None, cols: int | None = None) -> TileLayout:
    """Lay the shards of a tensor out as tiles.

    Args:
        shape: the tensor's shape.
        indices: device id to the index tuple it holds, as from
            ``NamedSharding.devices_indices_map``.
        rows, cols: the tensor dims to use as rows and columns.
    """
    shape = tuple(int(d) for d in shape)
    row_dim, col_dim, panel_dims = choose_dims(shape, indices, rows, cols)
    groups: dict = {}
    for device, idx in indices.items():
        panel = tuple(_range(idx[d], shape[d]) for d in panel_dims)
        r = _range(idx[row_dim], shape[row_dim]) if row_dim is not None else (0, 1)
        c = _range(idx[col_dim], shape[col_dim]) if col_dim is not None else (0, 1)
        groups.setdefault((panel, r, c), []).append(int(device))
    tiles = tuple(
        Tile(panel, r, c, tuple(sorted(devs)))
        for (panel, r, c), devs in sorted(groups.items())
    )
    panels = tuple(sorted({t.panel for t in tiles}))
    return TileLayout(shape, row_dim, col_dim, panel_dims, panels, tiles)
