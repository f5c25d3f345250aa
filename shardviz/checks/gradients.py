"""Layouts under which XLA computes a wrong gradient: a problem when the
model has grouped convolutions (depthwise and separable ones included) and
the mesh copies each row of the batch onto several devices.

Keras's ``ModelParallel`` lays the batch over its batch axis only, so on a
mesh with other axes each device holds a copy of its rows. XLA's partitioner
then sums the partial kernel gradients of a grouped convolution over every
device, the copies included: the gradient comes out as many times too large
as there are copies. ``bench/depthwise_gradient.py`` measures it, with jax
0.10.2 and 0.12.0.1 on the CPU: in a jitted gradient, and in Keras's own
train step (``model.fit`` under ``ModelParallel`` with no rules), 4 times the
right update on ``batch=2 × model=4`` and 2 times on ``4 × 2``. The TPU
compiler's program for a ``v5e:2x4`` slice sums over all 8 devices too. A
dense convolution, a 1-D mesh, and a layout that splits the convolution's
input channels over the other axes are right; so without a compiled train
step the check warns ("may"), and ``shardviz verify`` with
``train_step=True`` settles it for a plan. With one, it reads the program:
Keras's convolution layers, and grouped convolutions that custom layers call
as ops, are found alike.
"""

from __future__ import annotations

from ..errors import Problem
from ..format import plural
from ..model.scan import Scan
from ..plan import Plan

MEASURED_JAX = ("0.10.2", "0.12.0.1")
"""The jax releases bench/depthwise_gradient.py measured."""


def grouped_convolutions(model) -> list:
    """The layers of ``model`` whose convolution is grouped: ``groups`` above
    1, or depthwise and separable convolutions; a layer that wraps such a
    convolution (keras-hub's own conv blocks) gives the convolution only."""
    from .._adapters.keras import all_layers, keras

    k = keras()
    depthwise = tuple(getattr(k.layers, name) for name in (
        "DepthwiseConv1D", "DepthwiseConv2D", "SeparableConv1D", "SeparableConv2D"))
    found = [layer for layer in all_layers(model)
             if isinstance(layer, depthwise) or getattr(layer, "groups", 1) > 1]
    return [layer for layer in found if not _wraps(layer, found)]


def _wraps(layer, found: list) -> bool:
    """Whether ``layer`` holds another of ``found`` inside it."""
    from .._adapters.keras import all_layers

    inside = {id(x) for x in all_layers(layer)}
    return any(id(other) in inside for other in found if other is not layer)


def gradient_problems(scan: Scan, plan: Plan, traced=None) -> list[Problem]:
    """A warning when a train step under ``plan`` sums a grouped convolution's
    kernel gradient over copies of the batch (see the module's docstring).

    With a compiled train step (``traced``), from its program: an all-reduce
    of the backward pass in such a layer's scope, over a mesh axis the batch is
    not split over, is the sum over copies; none, and nothing is said.
    Without one, it says the layout may do it, and how to find out.
    """
    mesh = plan.mesh_dict
    devices = plan.mesh_size
    batch = plan.batch_axis
    split = mesh.get(batch, 1) if batch else 1
    if split <= 1 or split >= devices:
        return []
    layers = grouped_convolutions(scan.model)
    names = [getattr(layer, "path", layer.name) for layer in layers]
    if traced is not None and traced.train_step:
        if not layers and not traced.grouped_convolutions:
            return []  # nothing grouped: no walk over every layer's sublayers
        return _compiled(traced, layers, names, mesh, batch, scan.model)
    if not layers:
        return []
    copies = devices // split
    others = ", ".join(f"'{a}'" for a in mesh if a != batch and mesh[a] > 1)
    return [Problem(
        "warning", "wrong-gradient",
        f"{plural(len(layers), 'grouped convolution')} ({_listed(names)}) may train with a "
        f"kernel gradient {copies} times too large on this mesh: Keras lays the batch over "
        f"'{batch}' ({split} devices) and copies each row over {others}, and XLA can sum a "
        f"grouped convolution's partial kernel gradients over all {devices} devices, copies "
        f"included. Measured with jax {' and '.join(MEASURED_JAX)} in Keras's own train step "
        "(bench/depthwise_gradient.py); the TPU compiler's program sums over every device "
        "too. It is right where XLA splits the convolution's input channels over those axes.",
        hint="Analyze the train step (train_step=True, with inputs and labels): its compiled "
        "program shows whether the gradient is summed over the copies. To train such a model, "
        "lay the batch over every device (a 1-D mesh, or DataParallel).",
        path=_kernel(layers[0]), layer=names[0])]


def _compiled(traced, layers, names, mesh: dict, batch: str, model) -> list[Problem]:
    """The all-reduces of the compiled train step that sum a grouped
    convolution's kernel gradient over copies of the batch: in the backward
    pass, over a mesh axis the batch is not split over, in the scope of the
    convolution (a Keras layer, or a grouped convolution the program holds,
    such as an op a custom layer calls) or of a layer (a nested model) that
    holds it."""
    within = _scopes_holding(model, layers, names)
    for path in traced.grouped_convolutions:
        within.setdefault(path, [(None, path)])
    found: dict[str, tuple] = {}
    for c in traced.collectives:
        if c.kind != "all-reduce" or c.pass_ != "backward":
            continue
        over = [a for a in c.axes if a != batch and mesh.get(a, 1) > 1]
        if not over:
            continue
        for scope in (part.strip() for part in (c.layer or "").split(",")):
            for layer, name in within.get(scope, ()):
                found.setdefault(name, (layer, over))
    if not found:
        return []
    name, (layer, over) = next(iter(found.items()))
    copies = 1
    for axis in over:
        copies *= mesh[axis]
    axes = ", ".join(f"'{a}'" for a in over)
    convolutions = plural(len(found), "grouped convolution")
    return [Problem(
        "warning", "wrong-gradient",
        f"The compiled train step sums the kernel gradient of {convolutions} "
        f"({_listed(list(found))}) over {axes} too, where each device holds a "
        f"copy of the same rows: the gradient comes out {copies} times too large. Keras lays "
        f"the batch over '{batch}' only. Measured with jax {' and '.join(MEASURED_JAX)} in "
        "Keras's own train step (bench/depthwise_gradient.py); the forward pass is right.",
        hint="Lay the batch over every device (a 1-D mesh, or DataParallel), or split these "
        f"convolutions' input channels over {axes} (a rule that splits the output channels of "
        "the layer before them); shardviz.verify(..., train_step=True) checks the result.",
        path=_kernel(layer), layer=name)]


def _scopes_holding(model, layers: list, names: list[str]) -> dict[str, list]:
    """Each scope a collective may name (a layer's path or name) to the
    grouped convolutions it holds: its own, or those inside it."""
    from .._adapters.keras import all_layers

    out: dict[str, list] = {}
    for holder in all_layers(model):  # not the model: a collective it alone scopes says nothing
        inside = {id(x) for x in all_layers(holder)} | {id(holder)}
        held = [(layer, name) for layer, name in zip(layers, names) if id(layer) in inside]
        if held:
            for key in {getattr(holder, "path", None), holder.name} - {None}:
                out.setdefault(key, held)
    return out


def _listed(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def _kernel(layer) -> str | None:
    if layer is None:
        return None
    return next((v.path for v in layer.weights if "kernel" in v.path), None)
