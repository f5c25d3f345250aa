"""Layouts: which rule gives each path its axes, and where its shards land.

* rule matching, exactly as ``keras.distribution.LayoutMap`` looks up a path, is
  :mod:`shardviz.matching`, below this package and :mod:`shardviz.model`;
* ``geometry``: how a tensor lands on the devices of a mesh (JAX's own sharding objects);
* ``assign``: the layout a plan gives each variable and each layer output path.
"""
