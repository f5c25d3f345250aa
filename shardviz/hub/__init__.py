"""keras-hub's transformer backbones as shardviz proves their layout maps:
each one's smallest published preset's configuration and a reduced one that
keeps its structure, built without weights.

The configurations are data (``shardviz/hub/data/*.json``, read by
:mod:`~shardviz.hub.catalogue`, one :class:`HubBackbone` each); the lookup
and the builders are :mod:`~shardviz.hub.backbones`. Nothing else in
shardviz imports this package: it only uses the layers below it.

>>> from shardviz import hub
>>> len(hub.BACKBONES), hub.BACKBONES[0]
(62, 'GemmaBackbone')
>>> hub.entry("GemmaBackbone").preset, hub.entry("GemmaBackbone").params
('gemma_2b_en', 2506172416)
>>> hub.builder("LlamaBackbone").__name__
'LlamaBackbone_reduced'
"""

from .backbone import HubBackbone
from .backbones import (
    BACKBONES,
    DISAGREES,
    HUB_BACKBONES,
    NOT_PROVEN,
    builder,
    config,
    entry,
    inputs,
    scan,
)

__all__ = ["BACKBONES", "DISAGREES", "HUB_BACKBONES", "HubBackbone", "NOT_PROVEN", "builder",
           "config", "entry", "inputs", "scan"]
