"""Keras's own training step, as ``model.fit`` runs it: the jitted
``train_step``, the compiled loss and metrics, and the training state a
model needs for one step (restored afterwards).

Each function that reaches a private API says why, and which public API
would replace it.
"""

from __future__ import annotations

import contextlib

from ..errors import ShardvizError
from .keras_deferred import deferred_variables


def keras_train_step(model, state_shardings):
    """``model.train_step`` jitted as Keras's JAX trainer jits it for
    ``model.fit``: the state (trainable, non-trainable, optimizer and metric
    variables) donated, and, under a distribution, the new state given the
    old state's shardings (``out_shardings=(None, state_shardings)``).

    Reason: ``JAXTrainer.make_train_function`` builds exactly this, but
    reads every variable's ``.value.sharding`` (which a deferred variable
    lacks) and hides the jitted step in a private iterator closure. Waits
    for a public way to get the jitted train step for given state layouts.
    """
    import jax

    return jax.jit(model.train_step, donate_argnums=0, out_shardings=(None, state_shardings))


def keras_train_function(model):
    """The jitted ``train_step`` inside ``model.train_function``, as
    ``model.fit`` made it (for tests that compare with Keras's own program).

    Reason: ``make_train_function`` wraps the jitted step in a closure
    (``_make_function``'s ``iterator_step``) and keeps no attribute for it.
    Waits for a public accessor of the compiled step.
    """
    model.make_train_function()
    pending, seen = [model.train_function], set()
    while pending:
        fn = pending.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        if hasattr(fn, "lower"):
            return fn
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                pending.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
    raise ShardvizError("Keras's train function holds no jitted step (run_eagerly or "
                        "jit_compile=False?).")


def is_compiled(model) -> bool:
    """Whether ``model.compile()`` was called (the public ``compiled`` flag)."""
    return bool(getattr(model, "compiled", False))


def compiled_loss_name(model) -> str | None:
    """The loss the model was compiled with, by name (``"SparseCategoricalCrossentropy"``),
    or None when it was compiled with none (a model that overrides
    ``compute_loss``).

    Reason: ``model.loss`` is public but holds what the user passed, which
    may be a function, an object, a string or a structure of these.
    """
    loss = getattr(model, "loss", None)
    if loss is None:
        return None
    import jax

    names = []
    for leaf in jax.tree_util.tree_leaves(loss, is_leaf=lambda x: not isinstance(
            x, (list, tuple, dict))):
        if isinstance(leaf, str):
            names.append(leaf)
        else:
            names.append(getattr(leaf, "name", None) or getattr(leaf, "__name__", None)
                         or type(leaf).__name__)
    return ", ".join(names) if names else None


@contextlib.contextmanager
def training_state(model, optimizer, loss, deferred: bool):
    """Inside this block, ``model`` is ready for its own ``train_step``:
    compiled (with ``loss`` and ``optimizer`` when it was not), its
    ``optimizer`` the given (fresh, unbuilt) one, and everything is restored
    on exit, so the user's model keeps its own optimizer and compile state.

    Reason: ``train_step`` reads ``self.optimizer`` and the compiled loss
    and metrics; Keras has no public way to run it with another optimizer
    without re-compiling the user's model. ``compile`` does no dependency
    tracking, so restoring the instance dictionary restores the model.
    """
    saved = dict(model.__dict__)
    try:
        if not is_compiled(model):
            if deferred:
                with deferred_variables():
                    model.compile(optimizer=optimizer, loss=loss)
            else:
                model.compile(optimizer=optimizer, loss=loss)
        object.__setattr__(model, "optimizer", optimizer)
        object.__setattr__(model, "train_function", None)
        yield model
    finally:
        for key in [k for k in model.__dict__ if k not in saved]:
            object.__delattr__(model, key)
        for key, value in saved.items():
            if model.__dict__.get(key, _MISSING) is not value:
                object.__setattr__(model, key, value)


_MISSING = object()


def build_compiled_metrics(model, x, y, deferred: bool) -> None:
    """Build the compiled loss and metrics for data of this structure, as
    ``model.fit`` does before its first step (``_symbolic_build``); the
    optimizer must be built already.

    Reason: ``Trainer._symbolic_build`` is private. Waits for a public
    "build for this data" method on the trainer.
    """
    if deferred:
        with deferred_variables():
            model._symbolic_build(data_batch=(x, y))
    else:
        model._symbolic_build(data_batch=(x, y))
