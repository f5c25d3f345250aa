"""Why a collective is there, and what removes it.

:func:`explain_collective` (``report.why(i)``) reads one row of
``report.collectives``: the op where the layouts meet (its *site*), the
variables and activations that meet there, their layouts and the rules that
set them. It says in words what XLA communicates and why, then looks for a
fix by counterfactual: each local change the layouts suggest (move a
variable's split to another dimension, split a producer the same way, drop
a rule) is re-analysed with the real compiler, and the best change that
removes or shrinks this collective without adding communication is the
``fix``. Every figure in a fix comes from its own compiled program.

>>> import shardviz
>>> from shardviz import Plan, examples
>>> plan = Plan({"batch": 2, "model": 4}, {".*up/kernel": (None, "model"),
...                                        ".*down/kernel": (None, "model")})
>>> report = shardviz.analyze(examples.mlp, plan, inputs=(8, 16))
>>> why = report.why(0)
>>> why.kind, why.layer, why.rules
('all-gather', 'down', ('.*down/kernel', '.*up/kernel'))
>>> why.fix.rules[1].key, why.fix.rules[1].axes
('.*down/kernel', ('model', None))

Modules: ``explanation`` (:class:`Meeting`, :class:`Tried`,
:class:`Explanation`), ``rows`` (which collective ``why()`` means),
``meetings`` (the operands at the site), ``text`` (the why-text), ``fixes``
(the counterfactual plans tried), ``cache`` (:func:`cache_of`, beside each
report) and ``why`` (:func:`explain_collective`).
"""

from .cache import Cache, cache_of
from .explanation import NO_RULE, Explanation, Meeting, Tried
from .fixes import MAX_CANDIDATES
from .rows import collective_row as collective_row  # Report.why
from .why import explain_collective

__all__ = [
    "MAX_CANDIDATES", "NO_RULE", "Cache", "Explanation", "Meeting", "Tried", "cache_of",
    "explain_collective",
]
