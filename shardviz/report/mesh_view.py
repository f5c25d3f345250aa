"""The frozen view of a report's mesh (:class:`MeshView`) that renderers,
widgets and notebooks read instead of JAX's mesh."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class MeshView:
    """What renderers, widgets and notebooks read of a report's mesh: a
    frozen view, so that nothing outside the core holds JAX's mesh."""

    axis_names: tuple[str, ...]
    shape: tuple[int, ...]
    size: int
    abstract: bool
    """Whether the mesh has no devices here (layouts are exact; nothing runs)."""
    coords: dict[int, tuple[int, ...]]
    """Device id to its coordinates in the mesh."""
    slice_of_position: tuple[int, ...]
    """Per mesh position (flat), the slice (or node) it is in."""
