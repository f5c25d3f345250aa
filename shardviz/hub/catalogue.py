"""The published configurations, read from the package's data files
(``shardviz/hub/data/*.json``, described in its ``README.md``), as
:class:`~shardviz.hub.backbone.HubBackbone` entries in the files' order:

* ``listed``: the backbones the issue of proving them names, in its order
  (the seven that ship ``get_layout_map`` first);
* ``text``: every other text and audio backbone with transformer blocks;
* ``vision``: every vision, multimodal, video, detection and diffusion one.

JSON has no tuples: a tuple is written ``{"__tuple__": [...]}`` and read
back as a tuple, so that a configuration is what keras-hub is given.

>>> [e.name for e in load("listed")][:2]
['GemmaBackbone', 'LlamaBackbone']
>>> [e.name for e in load("text")][:2]
['AlbertBackbone', 'DistilBertBackbone']
>>> [e.name for e in load("vision")][:2]
['CLIPBackbone', 'SigLIPBackbone']
>>> load("listed")[-1].preset_config["num_mels"]
80
>>> load("vision")[0].reduced_config["vision_encoder"]["config"]["image_shape"]
(32, 32, 3)
"""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from typing import Any

from ..errors import ShardvizError
from .backbone import HubBackbone

FILES = ("listed", "text", "vision")
"""The data files, in the catalogue's order."""

_FIELDS = {f.name for f in dataclasses.fields(HubBackbone)}
_REQUIRED = {f.name for f in dataclasses.fields(HubBackbone)
             if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
_NOTES = {"count_why"}
"""Keys an entry may have that are notes for its readers, not loaded: why its
``counted`` and ``extra`` are what they are."""


def _tuples(obj: dict[str, Any]) -> Any:
    """A JSON object as read: ``{"__tuple__": [...]}`` is a tuple."""
    return tuple(obj["__tuple__"]) if list(obj) == ["__tuple__"] else obj


def load(stem: str) -> list[HubBackbone]:
    """The entries of one data file (one of :data:`FILES`), in its order."""
    if stem not in FILES:
        raise ShardvizError(f"{stem!r} is not one of the hub's data files.",
                            hint=f"Give one of {', '.join(FILES)}.")
    path = resources.files("shardviz.hub") / "data" / f"{stem}.json"
    data = json.loads(path.read_text(encoding="utf-8"), object_hook=_tuples)
    return [_entry(raw, stem) for raw in data["entries"]]


def _entry(raw: dict[str, Any], stem: str) -> HubBackbone:
    missing, unknown = _REQUIRED - set(raw), set(raw) - _FIELDS - _NOTES
    if missing or unknown:
        raise ShardvizError(
            f"shardviz/hub/data/{stem}.json: the entry {raw.get('name')!r} "
            + (f"lacks {sorted(missing)}" if missing else f"has unknown keys {sorted(unknown)}")
            + ".", hint=f"An entry's keys are {sorted(_FIELDS | _NOTES)}.")
    return HubBackbone(**{k: v for k, v in raw.items() if k in _FIELDS})


def entries() -> list[HubBackbone]:
    """Every entry of every data file, in the catalogue's order."""
    return [e for stem in FILES for e in load(stem)]
