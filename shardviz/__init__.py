"""shardviz: see how a Keras 3 model is laid out over a device mesh.

shardviz wraps ``keras.distribution`` on the JAX backend. Describe a
distribution as a :class:`Plan` (mesh axes, layout rules, batch axis), hand
it a model or a builder, and :func:`analyze` reports how every variable lands
on every device, which rule matched it, and every silent mistake: a rule that
matches nothing, a conflict, a dimension that does not divide.

>>> import shardviz
>>> plan = shardviz.Plan({"batch": 2, "model": 4}, {".*kernel": (None, "model")})
>>> plan.mesh_size
8

Importing shardviz does not start JAX, nor import matplotlib or ipywidgets;
call :func:`simulate_devices` first thing in a notebook.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "jax")

__version__ = "0.1.0"

from .devices import simulate_devices  # noqa: E402
from .errors import Problem, ShardvizError  # noqa: E402
from .plan import Plan, Rule  # noqa: E402

_LAZY = {
    "analyze": ("shardviz.analysis", "analyze"),
    "scan": ("shardviz.model.scan", "scan"),
    "Scan": ("shardviz.model.scan", "Scan"),
    "match_path": ("shardviz.matching.match", "match_path"),
    "Report": ("shardviz.report", "Report"),
    "Settings": ("shardviz.report", "Settings"),
    "Explanation": ("shardviz.explain", "Explanation"),
    "suggest": ("shardviz.planner", "suggest"),
    "sweep": ("shardviz.planner", "sweep"),
    "fit": ("shardviz.planner", "fit"),
    "levers": ("shardviz.planner", "levers"),
    "audit": ("shardviz.diagnosis", "audit"),
    "Audit": ("shardviz.diagnosis", "Audit"),
    "layout_map_for": ("shardviz.planner", "layout_map_for"),
    "choose_map": ("shardviz.planner", "choose_map"),
    "FitAnswer": ("shardviz.planner", "FitAnswer"),
    "show_sweep": ("shardviz.render.pictures", "show_sweep"),
    "verify": ("shardviz.multihost", "verify"),
    "targets": ("shardviz.target", "targets"),
    "show_sharding": ("shardviz.render.pictures", "show_sharding"),
    "compare": ("shardviz.render.pictures", "compare"),
    "compare_table": ("shardviz.render.pictures", "compare_table"),
    "Explorer": ("shardviz.widgets.explorer", "Explorer"),
    "examples": ("shardviz.examples", None),
    "hub": ("shardviz.hub", None),
    "configure_cache": ("shardviz.trace.compile_cache", "configure"),
    "quiet_start_up": ("shardviz.devices", "quiet_start_up"),
}

__all__ = ["simulate_devices", "Plan", "Rule", "Problem", "ShardvizError", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = importlib.import_module(module)
        value = value if attr is None else getattr(value, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'shardviz' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
