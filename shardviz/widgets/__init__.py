"""ipywidgets editors for plans, and the Explorer app.

Importing this package imports ipywidgets; the rest of shardviz never does.
"""

from .explorer import Explorer

__all__ = ["Explorer"]
