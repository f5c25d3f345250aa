"""Rendering: text (rich), HTML and matplotlib views of a Report.

Renderers read a Report and never recompute a layout.
"""
