"""One colour per device, the same in every figure.

Colours come from two published colour-blind-safe qualitative schemes (12
hues that stay apart under the common colour-vision deficiencies). From
device 12 on, a hatch pattern is added, so 72 devices get distinct
(colour, hatch) pairs; tiles are also labelled with device ids, which stay
the source of truth on larger meshes.

>>> device_style(0), device_style(12), device_style(13)
(('#88CCEE', ''), ('#88CCEE', '///'), ('#CC6677', '///'))
"""

from __future__ import annotations

HUES = (
    "#88CCEE", "#CC6677", "#DDCC77", "#117733", "#332288", "#AA4499",
    "#44AA99", "#999933", "#882255", "#EE8866", "#77AADD", "#BBCC33",
)
HATCHES = ("", "///", "...", "xxx", "\\\\\\", "+++")

KIND_COLOURS = {
    "all-reduce": "#CC6677",
    "all-gather": "#332288",
    "reduce-scatter": "#117733",
    "all-to-all": "#DDCC77",
    "collective-permute": "#AA4499",
}
"""Colours of collective kinds in flow and comparison figures."""

NETWORK_COLOURS = {
    "ici": "#117733",
    "nvlink": "#117733",
    "dcn": "#CC3311",
    "infiniband": "#CC3311",
    "host": "#888888",
}
"""Colours of the networks collectives run over, in the flow figure of a
target: links within a slice or node in green, between them in red."""

STACK_COLOURS = {
    "variables": "#332288",
    "optimizer state": "#88CCEE",
    "inputs": "#DDCC77",
    "outputs": "#44AA99",
    "temporaries": "#CC6677",
}


ROLE_COLOURS = {
    "weight": "#332288",
    "optimizer state": "#88CCEE",
    "gradient": "#AA4499",
    "activation": "#CC6677",
    "logits and loss": "#882255",
    "input": "#DDCC77",
    "label": "#999933",
    "optimizer update": "#44AA99",
    "metric state": "#117733",
    "workspace": "#BBBBBB",
    "other": "#DDDDDD",
}
"""What a buffer at the program's peak holds (``report.peak``'s roles); the
arguments keep the colours of :data:`STACK_COLOURS`."""


STATUS_COLOURS = {
    "ok": "#1b7f3b",
    "warning": "#8a5a00",
    "error": "#b00020",
    "info": "#005a8a",
}
"""Text colours of a status (a fine rule, a warning, an error, a note), in
every report, widget and message; dark enough to read on white."""

FIGURE_STATUS_COLOURS = {"ok": "#1b7f3b", "error": "#CC3311", "unknown": "#777777"}
"""A status in figures (a chip's capacity line, a failing mesh or tensor):
the error red is the one of :data:`NETWORK_COLOURS`'s slow links."""


def device_style(device: int) -> tuple[str, str]:
    """``(face colour, hatch)`` of a device id."""
    return HUES[device % len(HUES)], HATCHES[(device // len(HUES)) % len(HATCHES)]


def text_colour(face: str) -> str:
    """Black or white, whichever reads better on ``face`` (a ``#rrggbb``).

    >>> text_colour("#332288"), text_colour("#DDCC77")
    ('white', 'black')
    """
    r, g, b = (int(face[i:i + 2], 16) / 255 for i in (1, 3, 5))
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "black" if luminance > 0.45 else "white"
