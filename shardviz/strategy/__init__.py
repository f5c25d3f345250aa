"""Plans written from a model's structure, with no compile: what each variable
is for a split (``roles``), the layouts of each strategy (``specs``: tensor
parallel, fully sharded, sequence parallel), few readable rule keys for them
(``rules``), the mesh shapes of a device count (``meshes``), the candidate
plans with their reasons (``strategies``), each reason checked against a
compiled candidate (``reason_checks``), and layout maps as users give them
(``sources``). The planner compiles what these write; the diagnosis audits
a map with them.

>>> from shardviz import examples
>>> from shardviz.model.scan import scan
>>> labels = [label for label, plan, _ in candidate_plans(scan(examples.mlp), 8)]
>>> "tensor parallel" in labels
True
"""

from .meshes import divisors, factorisations, keras_mesh, mesh_count, mesh_shapes, spans_slices
from .reason_checks import check_reasons
from .roles import Role, roles
from .rules import rules_for
from .sources import LAYOUTS, layout_source, shipped_plan
from .specs import (
    FSDP_MIN_BYTES,
    SEQUENCE_LAYERS,
    activations_dominate,
    fully_sharded_specs,
    sequence_parallel_specs,
    tensor_parallel_specs,
)
from .strategies import REASONS, candidate_plans

__all__ = [
    "FSDP_MIN_BYTES", "LAYOUTS", "REASONS", "SEQUENCE_LAYERS", "Role", "activations_dominate",
    "candidate_plans", "check_reasons", "divisors", "factorisations", "fully_sharded_specs",
    "keras_mesh", "layout_source", "mesh_count", "mesh_shapes", "roles", "rules_for",
    "sequence_parallel_specs", "shipped_plan", "spans_slices", "tensor_parallel_specs",
]
