"""Every use of a private Keras or JAX API, each with its reason.

shardviz reads Keras and JAX through their public APIs everywhere else. Where
no public API answers a question, the private access lives here, in one
function that says why it is needed and which public API would replace it,
so that a change in Keras or JAX breaks one file. A test fails on any
``keras.src``, ``jax._src`` or private-attribute access outside this package.
"""
