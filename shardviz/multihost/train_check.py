"""The data, the single-process runs and the train step that
:func:`~shardviz.multihost.verify` compares the workers with. The forward
pass and the train step run the same way in every worker and in one
process: the same arrays from the same seed, and one ``model.fit`` step (the
model's own train step) of a model compiled as its builder compiled it, or
with plain SGD and mean squared error when it was not compiled.

With SGD, an updated variable is the old one less the learning rate times
its gradient, so updated variables that agree mean gradients that agree; with
another optimizer they are compared as updated.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import ShardvizError

LEARNING_RATE = 0.1
"""The SGD learning rate for a model its builder did not compile."""

RTOL, ATOL = 1e-4, 1e-5
"""How close the multi-process and the single-process values must be: the
largest difference within ``RTOL`` of the array's largest magnitude, plus
``ATOL`` (:func:`agrees`)."""
SEED = 0
"""The seed of the weights and of the data, in every process."""


def arrays(specs: list, seed: int) -> list[np.ndarray]:
    """One array per ``[shape, dtype]``: standard normal floats, and integers
    0 or 1 (valid token ids and padding masks).

    >>> ids, x = arrays([[[2, 3], "int32"], [[2], "float32"]], 0)
    >>> ids.dtype.name, set(ids.ravel().tolist()) <= {0, 1}, x.shape, x.dtype.name
    ('int32', True, (2,), 'float32')
    """
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 2, shape).astype(dtype) if np.issubdtype(np.dtype(dtype), np.integer)
            else rng.standard_normal(shape).astype(dtype) for shape, dtype in specs]


def difference(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """The largest ``|got - want|``, and how much of the tolerance it uses
    (at most 1 where :func:`agrees`).

    >>> difference(np.array([1e6, 1.0]), np.array([1e6, 3.0]))
    (2.0, 0.0199...)
    """
    if not want.size:
        return 0.0, 0.0
    diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    scale = float(np.max(np.abs(want.astype(np.float64))))
    return diff, diff / (ATOL + RTOL * scale)


def agrees(got: np.ndarray, want: np.ndarray) -> bool:
    """Whether ``got`` equals ``want`` up to the rounding of another order
    of sums: the largest difference within ``RTOL`` of ``want``'s largest
    magnitude, plus ``ATOL``.

    A sharded program sums in another order than one device does: a
    reduction split over devices adds partial sums. The rounding error of a
    sum scales with its terms, not with the result, so an entry that cancels
    to near zero carries the error of large terms (BLIP2's query tokens, after
    one step: values up to 8.5e7, one entry off by 40). So the tolerance is
    relative to the array's largest magnitude, not to each entry. A wrong
    layout (a shard computed from the wrong rows, a missing all-reduce) is
    off by the size of the values themselves.

    >>> agrees(np.array([1e6, 1.0]), np.array([1e6, 3.0]))
    True
    >>> agrees(np.array([1.0, 1.0]), np.array([1.0, 1.1]))
    False
    """
    return difference(got, want)[1] <= 1.0


def ready_to_train(model) -> None:
    """Compile ``model`` for a step if its builder did not."""
    from .._adapters import keras as keras_adapter

    if not keras_adapter.is_compiled(model):
        keras = keras_adapter.keras()
        model.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE), loss="mse")


def one_step(model, x, y, batch_size: int) -> float:
    """One ``model.fit`` step on ``(x, y)``; its loss."""
    history = model.fit(x, y, batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
    return float(history.history["loss"][-1])


def compared(arrays: list[tuple[str, np.ndarray | None, np.ndarray]]
             ) -> tuple[list[str], float, float]:
    """``(name, got, want)`` each: a line per array missing, of another
    shape, or outside the tolerance (:func:`agrees`); the largest difference,
    and the largest share of the tolerance used.

    >>> lines, worst, used = compared([("output 0", np.ones(2), np.ones(2) * 1.1)])
    >>> lines[0].split(" (")[0], round(worst, 3)
    ('output 0 differs from the single-process run', 0.1)
    """
    lines, worst, worst_used = [], 0.0, 0.0
    for name, got, want in arrays:
        if got is None or got.shape != want.shape:
            lines.append(f"{name} was not gathered with its shape {want.shape}")
            continue
        diff, used = difference(got, want)
        worst, worst_used = max(worst, diff), max(worst_used, used)
        if used > 1:
            lines.append(f"{name} differs from the single-process run (max |diff| {diff:.3g}, "
                         f"{used:.3g} times the tolerance)")
    return lines, worst, worst_used


def step_differences(loss: float, variables: dict[str, np.ndarray], want_loss: float,
                     want: dict[str, np.ndarray]) -> tuple[list[str], float, float]:
    """Lines for each value that differs from the single-process step, the
    largest difference, and the largest share of the tolerance used."""
    lines = []
    worst, worst_used = difference(np.array(loss), np.array(want_loss))
    if not agrees(np.array(loss), np.array(want_loss)):
        lines.append(f"train step: the loss is {loss:.6g} on the processes and {want_loss:.6g} "
                     "in one process")
    found, diff, used = compared([(f"train step: updated {path}", variables.get(path), value)
                                  for path, value in want.items()])
    lines += found
    worst, worst_used = max(worst, diff), max(worst_used, used)
    return lines, worst, worst_used


def reference_output(builder, names: list[str] | None, inputs: list) -> list[np.ndarray]:
    """The model's output in this process, with no distribution, from the
    same seed (so the same weights) and the same inputs as the workers."""
    from .._adapters.keras import fresh_names, set_random_seed

    set_random_seed(SEED)
    with fresh_names():
        model = builder()
    xs = arrays(inputs, SEED)
    import jax

    from ..model.inputs import call_args

    batch = dict(zip(names, xs)) if names else xs[0] if len(xs) == 1 else xs
    # Inference, as the workers' forward pass is: called without training=, SegFormer's
    # head normalizes with the batch's statistics, and its output differs.
    out = model(*call_args(model, batch), training=False)
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(out)]


def label_spec_of(labels: list | None, outputs: list[np.ndarray]) -> list:
    """``[shape, dtype]`` of the train step's labels, from the ``[shape,
    dtype]`` of each array given (None: the model's one output's shape)."""
    if labels is None:
        if len(outputs) != 1:
            raise ShardvizError("The model has several outputs: give labels= for the train step.",
                                hint="For example labels=(8, 10).")
        return [list(outputs[0].shape), "float32"]
    specs = labels
    if len(specs) != 1:
        raise ShardvizError("labels= must be one array's shape for the train step.",
                            hint="For example labels=(8, 10).")
    return specs[0]


def saved_arrays(path: str) -> list[np.ndarray]:
    """The arrays a worker saved with ``np.savez(path, *arrays)``, in order."""
    with np.load(path) as data:
        return [data[k] for k in sorted(data.files, key=lambda k: int(k.split("_")[1]))]


def output_lines(directory: str, expected: list[np.ndarray]
                 ) -> tuple[list[str], float | None, float | None]:
    """The gathered output process 0 wrote against the single-process
    output: a line per output that differs, the largest difference, and the
    largest share of the tolerance used."""
    path = os.path.join(directory, "output.npz")
    if not os.path.exists(path):
        return ["process 0 wrote no gathered output"], None, None
    gathered = saved_arrays(path)
    if len(gathered) != len(expected):
        return [f"the gathered output has {len(gathered)} arrays; the single-process run "
                f"has {len(expected)}"], None, None
    return compared([(f"output {i}", got, want)
                     for i, (got, want) in enumerate(zip(gathered, expected))])


def step_lines(directory: str, results: list[dict],
                expected: tuple[float, dict[str, np.ndarray]]) -> tuple[list[str], float, float]:
    """The train step on the processes (process 0's gathered values) against
    the single-process step."""
    first = next((r for r in results if r.get("process") == 0), {})
    path = os.path.join(directory, "train.npz")
    if "loss" not in first or not os.path.exists(path):
        return ["process 0 wrote no train step"], 0.0, 0.0
    values = saved_arrays(path)
    gathered = dict(zip(first["trainable_paths"], values))
    return step_differences(first["loss"], gathered, *expected)


def reference_step(builder, names: list[str] | None, inputs: list,
                    labels: list) -> tuple[float, dict[str, np.ndarray]]:
    """One ``model.fit`` step in this process, with no distribution: its loss
    and the updated trainable variables, by path."""
    from .._adapters.keras import fresh_names, set_random_seed

    set_random_seed(SEED)
    with fresh_names():
        model = builder()
    ready_to_train(model)
    xs = arrays(inputs, SEED)
    (y,) = arrays([labels], SEED + 1)
    loss = one_step(model, dict(zip(names, xs)) if names else xs[0] if len(xs) == 1 else xs,
                    y, len(y))
    return loss, {v.path: np.asarray(v.value) for v in model.trainable_variables}
