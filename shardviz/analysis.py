"""analyze: a model (or builder, or scan) and a plan in, a Report out.

>>> import keras, shardviz
>>> def build():
...     x = keras.Input((16,))
...     return keras.Sequential([x, keras.layers.Dense(32, name="d1")], name="seq")
>>> plan = shardviz.Plan({"model": 1}, {"d1/kernel": (None, "model")})
>>> report = shardviz.analyze(build, plan)
>>> report.variables[["path", "rule", "status"]].values.tolist()
[['seq/d1/kernel', None, 'replicated'], ['seq/d1/bias', None, 'replicated']]
>>> print(report.problems_of("unused-rule")[0].hint)
Keras matches a key against the whole path (re.fullmatch). Did you mean '.*d1/kernel'? It matches 'seq/d1/kernel'.
"""

from __future__ import annotations

import time

from . import checks
from .geometry import mesh_model
from .layouts import output_layouts, variable_layouts
from .plan import as_plan
from .report import Report
from .model_scan import Scan, scan as scan_model


def analyze(model_or_builder, plan, inputs=None, *,
            replicated_threshold: int = checks.DEFAULT_REPLICATED_THRESHOLD,
            abstract_mesh: bool | None = None) -> Report:
    """Analyse how ``plan`` lays out a model's variables, without allocating.

    Args:
        model_or_builder: a built Keras model, a zero-argument builder, or a
            :class:`~shardviz.scan.Scan` from :func:`shardviz.scan` (reuse a
            scan to re-analyse quickly after an edit).
        plan: a :class:`~shardviz.Plan`, a Keras ``ModelParallel`` /
            ``DataParallel`` / ``LayoutMap``, or a plan dict.
        inputs: optional model inputs, used to find output paths.
        replicated_threshold: variables of at least this many bytes that
            stay fully replicated are reported.
        abstract_mesh: force (True) or forbid (False) an abstract mesh; by
            default the mesh is concrete when enough devices exist.
    """
    start = time.perf_counter()
    plan = as_plan(plan)
    scan = model_or_builder if isinstance(model_or_builder, Scan) else scan_model(
        model_or_builder, inputs=inputs)
    import jax

    device_count = jax.device_count()
    mesh = mesh_model(plan.mesh, abstract_mesh)
    var_layouts = variable_layouts(scan, plan, mesh)
    out_layouts = output_layouts(scan, plan)
    problems = list(plan.check())
    problems += checks.variable_problems(plan, var_layouts, mesh, replicated_threshold)
    problems += checks.output_problems(plan, out_layouts)
    rule_problems, usage = checks.rule_problems(plan, scan, var_layouts, out_layouts)
    problems += rule_problems
    problems += checks.mesh_problems(plan, mesh, device_count)
    problems += checks.scan_problems(scan, var_layouts)
    return Report(
        plan=plan, scan=scan, mesh=mesh, variable_layouts=var_layouts,
        output_layouts=out_layouts, problems=problems, rule_usage=usage,
        device_count=device_count, seconds=time.perf_counter() - start,
    )
