"""The import path notebook 02 once taught: ``from shardviz.match import match_path``.

Rule matching lives in :mod:`shardviz.matching.match`; ``shardviz.match_path``
is the public name.
"""

from .matching.match import match_path

__all__ = ["match_path"]
