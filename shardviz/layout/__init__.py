"""Layouts: which rule gives each path its axes, and where its shards land.

* ``match``: rule matching, exactly as ``keras.distribution.LayoutMap`` looks up a path;
* ``geometry``: how a tensor lands on the devices of a mesh (JAX's own sharding objects);
* ``assign``: the layout a plan gives each variable and each layer output path.
"""
