"""Checks: the silent mistakes in a plan, as :class:`~shardviz.errors.Problem` records.

Each check says what is wrong, where (path, rule), and what to change.
Checks only read the scan, the plan and the computed layouts.

* :mod:`.variables`: each variable's layout (conflicts, ranks, replicated, pinned);
* :mod:`.rules`: rules that match nothing or never win, and per-rule feedback;
* :mod:`.outputs`: layer-output rules, and the layouts XLA gave the outputs;
* :mod:`.capacity`: the devices the mesh needs, and whether a chip's memory suffices;
* :mod:`.attention`: which attention Keras runs on a target, and the scores it keeps;
* :mod:`.gradients`: layouts under which XLA computes a wrong gradient.
"""

from .attention import attention_problems
from .capacity import fit_problems, memory_parts, mesh_problems, needed_bytes, out_of_memory_problem
from .gradients import gradient_problems
from .outputs import activation_problems, output_problems
from .rules import rule_feedback, rule_problems
from .variables import DEFAULT_REPLICATED_THRESHOLD, replicated_large, scan_problems, variable_problems

__all__ = ["DEFAULT_REPLICATED_THRESHOLD", "activation_problems", "attention_problems",
           "fit_problems", "gradient_problems", "memory_parts", "mesh_problems", "needed_bytes",
           "out_of_memory_problem", "output_problems",
           "replicated_large", "rule_feedback", "rule_problems", "scan_problems",
           "variable_problems"]
