"""Rendering: text (rich), HTML and matplotlib views of a Report, and of the
results the composers return (``fit_view``, ``suggest_view``,
``candidate_view``, ``audit_view``, ``explanation_view``: one module per
result, each with ``html(result)`` and ``text(result)``, which the result's
own display methods call).

Renderers read what they are handed and never recompute a layout.
"""
