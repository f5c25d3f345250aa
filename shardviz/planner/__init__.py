"""The planner: the searches that compile. Plans suggested from a model's
structure and the best few compiled (:func:`suggest`), a rule set swept over
mesh shapes (:func:`sweep`), the largest batch or smallest slice a fine-tune
fits (:func:`fit`), the changes that would make a program fit, each compiled
(:func:`levers`), and a Keras LayoutMap chosen from compiled candidates
(:func:`layout_map_for`). The plans themselves are written, with no compile,
by :mod:`shardviz.strategy`; a map's mistakes are diagnosed by
:mod:`shardviz.diagnosis`.

:func:`suggest` recognises what a strong engineer looks for, from shapes and
layer kinds rather than names: Dense kernels that widen (column-parallel)
paired with the ones that narrow back (row-parallel), attention projections
with a heads dimension, embeddings, and everything large enough to split
over the data axis (fully sharded). It writes those as few, readable rules,
over every factorisation of the device count into ``batch`` × ``model``,
ranks them by geometry first (bytes per device, and the communication the
layouts imply, with no compile), then compiles the best few to confirm
their memory and collectives. Every candidate says which of its figures a
compiler gave and which are estimates.

>>> import shardviz
>>> from shardviz import examples
>>> best = shardviz.suggest(examples.mlp, devices=8, inputs=(8, 16), top=3)[0]
>>> best.compiled, best.report.errors
(True, [])

Modules: ``candidates`` (:class:`Candidate`, :class:`Suggestions`),
``suggest_plans`` (:func:`suggest`), ``diff`` (:func:`plan_diff`),
``sweep_meshes`` (:func:`sweep`), ``fit_search`` (:func:`fit`),
``batch_search`` (the largest batch from few compiles), ``fit_answer``
(:class:`FitAnswer`), ``batch_inputs`` (the inputs of one batch),
``levers`` (:func:`levers`) and ``layout_maps`` (:func:`layout_map_for`,
:func:`choose_map`).
"""

from .candidates import TABLE_COLUMNS, TIGHT, Candidate, Suggestions
from .diff import plan_diff
from .fit_answer import FitAnswer
from .fit_search import fit
from .layout_maps import MapChoice, choose_map, layout_map_for, plan_for_mesh
from .levers import levers
from .suggest_plans import suggest
from .sweep_meshes import MAX_SWEEP_MESHES, SWEEP_COLUMNS, sweep

__all__ = [
    "MAX_SWEEP_MESHES", "SWEEP_COLUMNS", "TABLE_COLUMNS", "TIGHT", "Candidate", "FitAnswer",
    "MapChoice", "Suggestions", "choose_map", "fit", "layout_map_for", "levers", "plan_diff",
    "plan_for_mesh", "suggest", "sweep",
]
