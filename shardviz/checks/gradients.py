"""Layouts under which XLA computes a wrong gradient: a problem when the
model has grouped convolutions (depthwise and separable ones included) and
the mesh copies each row of the batch onto several devices.

Keras's ``ModelParallel`` lays the batch over its batch axis only, so on a
mesh with other axes each device holds a copy of its rows. XLA's partitioner
then sums the partial kernel gradients of a grouped convolution over every
device, the copies included: the gradient comes out as many times too large
as there are copies. ``bench/probes/depthwise_gradient.py`` measures it, with jax
0.10.2 and 0.12.0.1 on the CPU: in a jitted gradient, and in Keras's own
train step (``model.fit`` under ``ModelParallel`` with no rules), 4 times the
right update on ``batch=2 × model=4`` and 2 times on ``4 × 2``. The TPU
compiler's program for a ``v5e:2x4`` slice sums over all 8 devices too. A
dense convolution, a 1-D mesh, and a layout that splits the convolution's
input channels over the other axes are right (an ``/output`` rule on the
layer that feeds it, or that layer's kernel split on its output features:
:func:`grouped_inputs`, :func:`split_over`; the planner writes such rules); so
without a compiled train step the check warns ("may") of the convolutions
whose input the plan does not split so, and ``shardviz verify`` with
``train_step=True`` settles it for a plan. With one, it reads the program:
Keras's convolution layers, and grouped convolutions that custom layers call
as ops, are found alike.
"""

from __future__ import annotations

import dataclasses

from ..errors import Problem
from ..format import plural
from ..model.scan import Scan
from ..plan import Plan

MEASURED_JAX = ("0.10.2", "0.12.0.1")
"""The jax releases bench/probes/depthwise_gradient.py measured."""


def grouped_convolutions(model) -> list:
    """The layers of ``model`` whose convolution is grouped: ``groups`` above
    1, or depthwise and separable convolutions; a layer that wraps such a
    convolution (keras-hub's own conv blocks) gives the convolution only."""
    from .._adapters.keras import all_layers, keras

    k = keras()
    depthwise = tuple(getattr(k.layers, name) for name in (
        "DepthwiseConv1D", "DepthwiseConv2D", "SeparableConv1D", "SeparableConv2D"))
    convolutions = (k.layers.Conv1D, k.layers.Conv2D, k.layers.Conv3D)
    # Only a convolution's ``groups`` groups its kernel (GroupNormalization has one too).
    found = [layer for layer in all_layers(model) if isinstance(layer, depthwise) or (
        isinstance(layer, convolutions) and getattr(layer, "groups", 1) > 1)]
    return [layer for layer in found if not _wraps(layer, found)]


@dataclasses.dataclass(frozen=True)
class GroupedInput:
    """A grouped convolution and the layer output that feeds it."""

    layer: object
    name: str
    """The convolution's path."""
    feed: str | None
    """The ``/output`` path of the layer called just before it, whose output
    has the convolution's input channels (on its last dim, through a reshape,
    for channels last; on dim 1 with the same rank for channels first); None
    when none is seen (its input is the model's, or an op's)."""
    channel_dim: int
    """The channel dim of that output (``-1`` channels last, ``1`` first)."""
    channels: int
    rank: int = 0
    """The rank of that output."""
    source: str | None = None
    """The layer whose kernel makes those channels: the feed's, or, where the
    feed holds no variables (a reshape, a padding), the nearest one before it
    that does and has the same channels, within three layers."""


def grouped_inputs(scan: Scan, layers: list | None = None) -> list[GroupedInput]:
    """Each grouped convolution of the scanned model with the output that
    feeds it: the one recorded just before the convolution's own (Keras
    records an output when its layer returns, so the last layer to return
    before the convolution ran), taken when its channels are the
    convolution's input's. Where that output's channels are split over the
    mesh's other axes (an ``/output`` rule, or the layer's kernel split on its
    output features), XLA computes the kernel gradient right
    (``bench/probes/depthwise_gradient.py``). ``layers``: the model's grouped
    convolutions, where the caller has them already."""
    layers = grouped_convolutions(scan.model) if layers is None else layers
    index = {o.layer_path: i for i, o in enumerate(scan.outputs)}
    holding = {v.layer for v in scan.variables}
    out = []
    for layer in layers:
        name = _path(layer)
        dim, channels = _input_channels(layer)
        i = index.get(name)
        own = scan.outputs[i].shapes if i is not None else ()
        feed, rank, source = None, 0, None
        if i and own and channels:
            rank = _carries(scan.outputs[i - 1], channels, dim, len(own[0]))
            feed = scan.outputs[i - 1].path if rank else None
            for j in range(i - 1, max(i - 4, -1), -1):
                o = scan.outputs[j]
                if not _carries(o, channels, dim, len(own[0])):
                    break
                if o.layer_path in holding:
                    source = o.layer_path
                    break
        out.append(GroupedInput(layer, name, feed, dim, channels, rank, source))
    return out


def _path(layer) -> str:
    """A layer's path, or its name where it has none (built but never called)."""
    return getattr(layer, "path", None) or layer.name


def _carries(o, channels: int, dim: int, rank: int) -> int:
    """The rank of output ``o`` when it holds ``channels`` on ``dim`` (any rank
    for the last dim, through a reshape; the convolution's ``rank`` else), or 0."""
    shapes = o.shapes
    if len(shapes) != 1 or len(shapes[0]) < 2 or shapes[0][dim] != channels:
        return 0
    return len(shapes[0]) if dim == -1 or len(shapes[0]) == rank else 0


def _input_channels(layer) -> tuple[int, int]:
    """The channel dim of a convolution's input and its size, from the input
    spec Keras's convolution layers set when built (0 when unknown)."""
    spec = getattr(layer, "input_spec", None)
    axes = getattr(spec, "axes", None) or {}
    if len(axes) == 1:
        (dim, channels), = axes.items()
        return (-1 if dim == -1 else dim), int(channels)
    first = getattr(layer, "data_format", "channels_last") == "channels_first"
    return (1 if first else -1), 0


def split_over(plan: Plan, scan: Scan, grouped: list[GroupedInput], axes: list[str]
               ) -> list[GroupedInput]:
    """Those of ``grouped`` whose input ``plan`` splits on its channels over
    every one of ``axes``: by an ``/output`` rule on the output that feeds it,
    or by splitting the last dim (the output features) of the kernel of the
    layer that makes those channels (``source``)."""
    from ..layout.assign import output_layouts

    asked = {o.info.path: o.axes for o in output_layouts(scan, plan) if o.axes}
    matches = scan.variable_matcher.match(plan.rule_keys)
    kernels: dict[str, list] = {}
    for v, m in zip(scan.variables, matches):
        if m.rule is not None and len(v.shape) >= 2:
            kernels.setdefault(v.layer, []).append((v.shape[-1], plan.rules[m.rule].axes,
                                                    len(v.shape)))
    out = []
    for g in grouped:
        if not g.feed and not g.source:
            continue
        ways = [(asked.get(g.feed), g.rank, g.channel_dim)] if g.feed in asked else []
        ways += [(spec, rank, -1) for size, spec, rank in kernels.get(g.source or "", ())
                 if size == g.channels and g.channel_dim == -1]
        if any(_holds(spec, rank, dim, axes) for spec, rank, dim in ways):
            out.append(g)
    return out


def _holds(spec, rank: int, dim: int, axes: list[str]) -> bool:
    """Whether ``spec`` (of a tensor of ``rank`` dims) splits ``dim`` over
    every one of ``axes``."""
    spec = list(spec or ())
    if not spec or len(spec) > rank:
        return False
    entry = (spec + [None] * (rank - len(spec)))[dim]
    return set(axes) <= set(entry if isinstance(entry, (tuple, list)) else (entry,))


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
    names = [_path(layer) for layer in layers]
    if traced is not None and traced.train_step:
        if not layers and not traced.grouped_convolutions:
            return []  # nothing grouped: no walk over every layer's sublayers
        return _compiled(traced, layers, names, mesh, batch, scan.model)
    if not layers:
        return []
    over = [a for a in mesh if a != batch and mesh[a] > 1]
    right = {id(g.layer) for g in split_over(plan, scan, grouped_inputs(scan, layers), over)}
    kept = [(layer, name) for layer, name in zip(layers, names) if id(layer) not in right]
    if not kept:
        return []
    layers, names = [k[0] for k in kept], [k[1] for k in kept]
    copies = devices // split
    others = ", ".join(f"'{a}'" for a in over)
    return [Problem(
        "warning", "wrong-gradient",
        f"{plural(len(layers), 'grouped convolution')} ({_listed(names)}) may train with a "
        f"kernel gradient {copies} times too large on this mesh: Keras lays the batch over "
        f"'{batch}' ({split} devices) and copies each row over {others}, and XLA can sum a "
        f"grouped convolution's partial kernel gradients over all {devices} devices, copies "
        f"included. Measured with jax {' and '.join(MEASURED_JAX)} in Keras's own train step "
        "(bench/probes/depthwise_gradient.py); the TPU compiler's program sums over every device "
        "too. It is right where XLA splits the convolution's input channels over those axes.",
        hint="Analyze the train step (train_step=True, with inputs and labels): its compiled "
        "program shows whether the gradient is summed over the copies. To train such a model, "
        "split the channels of each such convolution's input over those axes (an /output rule "
        "on the layer before it; shardviz.suggest and shardviz.layout_map_for write them), or "
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
        "Keras's own train step (bench/probes/depthwise_gradient.py); the forward pass is right.",
        hint=f"Split these convolutions' input channels over {axes} (an /output rule that "
        "splits the channels of the layer before each; shardviz.suggest and "
        "shardviz.layout_map_for write them), or lay the batch over every device (a 1-D mesh, "
        "or DataParallel); shardviz.verify(..., train_step=True) checks the result.",
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
