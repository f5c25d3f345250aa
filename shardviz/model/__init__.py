"""The model as shardviz reads it, without allocating.

* ``scan``: its variables and layer output paths (:func:`shardviz.scan`);
* ``inputs``: what the user gave as inputs, as arrays or abstract values;
* ``builders``: builders named by text (``module:function``, ``file.py:function``).
"""
