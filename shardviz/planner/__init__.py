"""The planner: layout rules suggested from a model's structure, sweeps
of a rule set over mesh shapes, and the largest batch or smallest slice a
fine-tune fits (:func:`fit`).

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

Modules: ``roles`` (what each variable is for a split), ``specs`` (tensor
parallel, fully sharded and sequence parallel layouts), ``rules`` (few,
readable rule keys), ``meshes`` (divisors and mesh shapes),
``strategies`` (the plans tried, with reasons), ``candidates``
(:class:`Candidate`, :class:`Suggestions`), ``suggest_plans``
(:func:`suggest`), ``diff`` (:func:`plan_diff`), ``sweep_meshes``
(:func:`sweep`), ``fit_search`` (:func:`fit`), ``fit_answer``
(:class:`FitAnswer`), ``batch_inputs`` (the inputs of one batch) and ``audit``
(:func:`audit`: what is wrong with a layout map, and its cost).
"""

from .audit import Audit, audit
from .candidates import TABLE_COLUMNS, TIGHT, Candidate, Suggestions
from .diff import plan_diff
from .fit_answer import FitAnswer
from .fit_search import fit
from .layout_maps import MapChoice, choose_map, layout_map_for, plan_for_mesh
from .meshes import _meshes as _meshes  # tests/test_arguments.py
from .meshes import divisors, factorisations, mesh_count
from .roles import Role, roles
from .rules import rules_for
from .specs import (
    FSDP_MIN_BYTES,
    SEQUENCE_LAYERS,
    activations_dominate,
    fully_sharded_specs,
    sequence_parallel_specs,
    tensor_parallel_specs,
)
from .strategies import REASONS
from .suggest_plans import suggest
from .sweep_meshes import MAX_SWEEP_MESHES, SWEEP_COLUMNS, sweep

__all__ = [
    "FSDP_MIN_BYTES", "MAX_SWEEP_MESHES", "REASONS", "SEQUENCE_LAYERS", "SWEEP_COLUMNS",
    "TABLE_COLUMNS", "TIGHT", "Audit", "Candidate", "FitAnswer", "MapChoice", "Role",
    "Suggestions", "activations_dominate", "audit", "choose_map", "divisors", "factorisations",
    "fit", "fully_sharded_specs", "layout_map_for", "mesh_count", "plan_diff", "plan_for_mesh",
    "roles", "rules_for", "sequence_parallel_specs", "suggest", "sweep", "tensor_parallel_specs",
]
