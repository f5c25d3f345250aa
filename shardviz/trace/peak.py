"""What fills a device at the program's peak, and over the whole program,
by role: the compiler's buffer assignment (:mod:`.buffer_dump`) read
against the program's own instructions and arguments.

Each buffer gets

* its **layer**: the variable an argument holds, or the Keras layer whose
  name scope made the instruction (XLA keeps JAX's name stack in each
  instruction's ``op_name``);
* its **role**: for an argument, what it is (a weight, an optimizer slot,
  the batch, the labels, a metric); for the rest, what made it: the
  backward pass (``gradient``), the forward pass (``activation``: in a
  train step these are the layer outputs kept for the backward pass),
  the optimizer's update, or a buffer the size of the model's output
  (``logits and loss``: the output, its float32 copy for the loss and its
  gradient); ``workspace`` for buffers no op names.

A copy of an argument (a layout change, a prefetch) takes the argument's
role and layer.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence

from .buffer_dump import BufferPeak
from .scopes import layer_for_scope, scopes_of

NO_DUMP = "the compiler wrote no dump"
LOSS_SCOPE = "compile_loss"
"""The name scope Keras's train step computes the loss in."""

ROLES = ("weight", "optimizer state", "gradient", "activation", "logits and loss", "input",
         "label", "optimizer update", "metric state", "workspace")
"""Every role, in the order pictures stack them."""

_COPIES = {"copy", "copy-start", "copy-done", "bitcast", "get-tuple-element", "reshape",
           "transpose", "convert"}
_SHAPE = re.compile(r"^\(?(?P<dtype>[a-z]+\d*)\[(?P<dims>[\d,]*)\]")
_SPACE = re.compile(r"S\((\d+)\)")

def _instruction(value: str) -> str:
    return value.split("{", 1)[0]


def shape_of(text: str) -> tuple[str, tuple[int, ...]]:
    """``(dtype, dims)`` of a buffer's shape as the assignment prints it.

    >>> shape_of("f32[256,128]{1,0:T(8,128)}")
    ('f32', (256, 128))
    >>> shape_of("(s32[4], u32[])")
    ('s32', (4,))
    """
    m = _SHAPE.match(text.strip())
    if not m:
        return "", ()
    return m.group("dtype"), tuple(int(d) for d in m.group("dims").split(",") if d)


def on_chip(text: str) -> bool:
    """Whether the compiler placed the buffer in an on-chip memory space
    (``S(1)`` in its layout: a TPU's vector memory) rather than in HBM.

    >>> on_chip("f32[256,256]{1,0:T(8,128)S(1)}"), on_chip("f32[8]{0}")
    (True, False)
    """
    m = _SPACE.search(text)
    return bool(m and m.group(1) != "0")


ARGUMENTS = (("state[0]", "weight"), ("state[1]", "weight"), ("state[2]", "optimizer state"),
             ("state[3]", "metric state"), ("data[1]", "label"), ("data", "input"),
             ("tv[", "weight"), ("ntv[", "weight"), ("ov[", "optimizer state"), ("x", "input"))
"""The role of an argument by the name JAX gives it (the ``op_name`` of its
parameter): Keras's train step takes ``(state, data)``, state being the
trainable, non-trainable, optimizer and metric variables and data ``(x, y,
sample_weight)``; shardviz's forward pass takes ``(tv, ntv, x)``."""


def argument_role(name: str) -> str:
    """The role of the argument JAX names ``name``.

    >>> argument_role("state[2][7]"), argument_role("data[1]"), argument_role("tv[0]")
    ('optimizer state', 'label', 'weight')
    """
    for prefix, role in ARGUMENTS:
        if name.startswith(prefix):
            return role
    return "input"


class Roles:
    """The role and layer of every value of one program: ``ops`` (the
    program's instructions, :attr:`BufferPeak.ops`), the variable path of
    each argument name (``{"state[0][3]": "block_0/up/kernel"}``), the
    model's layer paths, the model's output (its element count on one
    device, None for none, and the layers that make it), and the name of
    the optimizer whose scope is its update. A buffer of the output's size
    made by an output layer, or anything the loss makes, is ``logits and
    loss``."""

    def __init__(self, ops: dict[str, tuple[str, str, str]], names: dict[str, str],
                 layer_paths: Sequence[str], output: tuple[int | None, Sequence[str]],
                 optimizer: str | None = None) -> None:
        self.ops, self.names = ops, names
        self.layer_paths = list(layer_paths)
        self.output_elements, self.output_layers = output[0], set(output[1])
        self.optimizer = optimizer
        self._argument: dict[str, str | None] = {}

    def argument_of(self, name: str) -> str | None:
        """The parameter instruction an instruction holds, through copies;
        None for one the program computes."""
        if name in self._argument:
            return self._argument[name]
        seen, current, found = set(), name, None
        while current not in seen:
            seen.add(current)
            op = self.ops.get(current)
            if op is None:
                break
            if op[0] == "parameter":
                found = current
                break
            if op[0] not in _COPIES or not op[2]:
                break
            current = op[2]
        self._argument[name] = found
        return found

    def of(self, value: str, shape: str) -> tuple[str, str, str]:
        """``(role, layer, op)`` of one value of ``shape`` (as the buffer
        assignment prints it): its op is the instruction's ``op_name``, or
        its HLO op where it has none."""
        name = _instruction(value)
        hlo_op, op_name, _ = self.ops.get(name, ("", "", ""))
        op = op_name or hlo_op
        argument = self.argument_of(name)
        if argument is not None:
            given = self.ops[argument][1]
            return argument_role(given), self.names.get(given, ""), op
        if not op_name:
            return "workspace", "", op
        if op_name in self.names or re.fullmatch(r"(state|data|tv|ntv|ov|x)\b[^/]*", op_name):
            # A copy XLA fused on its own keeps the argument's name as its op_name.
            return argument_role(op_name), self.names.get(op_name, ""), op
        scopes, pass_ = scopes_of(op_name)
        layer = ""
        if scopes:
            layer = layer_for_scope(scopes[0], self.layer_paths) or scopes[0]
        if self.optimizer and any(s.split("/")[0] == self.optimizer for s in scopes):
            return "optimizer update", layer, op
        _, dims = shape_of(shape)
        if any(s.split("/")[0] == LOSS_SCOPE for s in scopes) or (
                layer in self.output_layers and dims
                and math.prod(dims) == self.output_elements):
            return "logits and loss", layer, op
        if pass_ == "backward":
            return "gradient", layer, op
        return "activation", layer, op


def peak_rows(peak: BufferPeak, roles: Roles) -> list[dict]:
    """One row per buffer live at the peak, largest first."""
    rows = []
    for value, size in peak.live:
        shape, _, _ = peak.values[value]
        role, layer, op = roles.of(value, shape)
        dtype, dims = shape_of(shape)
        rows.append({"bytes": size, "role": role, "layer": layer, "op": op, "dtype": dtype,
                     "shape": dims, "buffer": value, "on_chip": on_chip(shape)})
    return rows


def timeline(peak: BufferPeak, roles: Roles, points: int = 2000) -> dict[str, list]:
    """Live bytes by role over the program's schedule, at ``points``
    positions at most (each the largest the role holds in its stretch of
    the schedule): ``{"position": [...], role: [...], ...}``."""
    import numpy as np

    length = max(1, peak.length)
    delta = np.zeros((len(ROLES), length + 1), dtype=np.int64)
    index = {role: i for i, role in enumerate(ROLES)}
    for value, (start, end) in peak.ranges.items():
        found = peak.values.get(value)
        if found is None:
            continue
        shape, _, size = found
        row = index[roles.of(value, shape)[0]]
        delta[row, max(0, start)] += size
        delta[row, min(length, end + 1)] -= size
    live = np.cumsum(delta[:, :length], axis=1)
    step = max(1, math.ceil(length / points))
    starts = np.arange(0, length, step)
    out: dict[str, list] = {"position": starts.tolist()}
    for role, i in index.items():
        out[role] = np.maximum.reduceat(live[i], starts).tolist()
    return out


@dataclasses.dataclass
class PeakSource:
    """What :func:`peak_rows` and :func:`timeline` need of one compiled pass:
    the compiler's buffer assignment (or why there is none), the variable
    path of each argument name, the model's layer paths, the element count
    of its output on one device, and the optimizer's name."""

    buffer_peak: BufferPeak | str
    names: dict[str, str]
    layer_paths: list[str]
    output: tuple[int | None, list[str]]
    optimizer: str | None = None

    @property
    def available(self) -> bool:
        return isinstance(self.buffer_peak, BufferPeak)

    def roles(self) -> Roles:
        assert isinstance(self.buffer_peak, BufferPeak)
        return Roles(self.buffer_peak.ops, self.names, self.layer_paths, self.output,
                     self.optimizer)


def model_output(activations: Sequence) -> tuple[int | None, list[str]]:
    """The element count, on one device, of the model's largest output (the
    layer outputs the pass returns, else the last layer called), and the
    layers that make the outputs."""
    marked = [a for a in activations if getattr(a, "output_index", None) is not None]
    for group in (marked, list(activations)[-1:]):
        counts = [a.bytes_per_device // size for a in group
                  if a.bytes_per_device and (size := _itemsize(a.dtype))]
        if counts:
            return max(counts), sorted({a.layer_path for a in group})
    return None, []


def _itemsize(dtype: str) -> int | None:
    import numpy as np

    try:
        return int(np.dtype(dtype).itemsize)
    except TypeError:
        import ml_dtypes

        try:
            return int(np.dtype(getattr(ml_dtypes, dtype)).itemsize)
        except (AttributeError, TypeError):
            return None
