"""The diagnosis of a layout map: :func:`audit` says what is wrong with a map
for a model (replicated variables, rules that match nothing, splits that do
not divide on some mesh, splits on the wrong dimension), what each mistake
costs in compiled bytes, and each fix as an edit of a rule (``audit``; the
search for better splits is ``splits``).
"""

from .audit import Audit, audit

__all__ = ["Audit", "audit"]
