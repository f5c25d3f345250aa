"""Collectives, read from a compiled XLA program.

After SPMD partitioning the compiled HLO holds one instruction per
collective. Each names its kind (``all-reduce``, ``all-gather``,
``reduce-scatter``, ``all-to-all``, ``collective-permute``, or an async
``-start``/``-done`` pair), its result shape per device, the device groups it
runs over, and the Keras layer it came from (Keras opens a JAX name scope per
layer, which XLA keeps as ``op_name`` metadata).

The device groups are read in :mod:`.replica_groups`, the layer in
:mod:`.scopes`, and the program's memory in :mod:`.memory` (all re-exported
here).
"""

from __future__ import annotations

import dataclasses
import math
import re

from ..errors import ShardvizError

# Re-exported: shardviz and its tests read these as ``hlo.<name>``.
from .memory import memory as memory
from .memory import unread_bytes as unread_bytes
from .replica_groups import group_axes, permute_axes
from .replica_groups import parse_replica_groups as parse_replica_groups
from .scopes import layer_for_scope as layer_for_scope
from .scopes import scopes_of

COLLECTIVE_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")

DTYPE_BYTES = {
    "pred": 1, "s2": 1, "u2": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2,
    "s32": 4, "u32": 4, "s64": 8, "u64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8,
    "c64": 8, "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3": 1, "f8e5m2fnuz": 1,
    "f8e4m3fnuz": 1, "f8e4m3b11fnuz": 1, "f8e3m4": 1, "f8e8m0fnu": 1, "f4e2m1fn": 1,
}

_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>\(.*?\)|[\w]+\[[^\]]*\](?:\{[^}]*\})?)"
    r"\s+(?P<op>[\w\-]+)\((?P<operands>[^)]*)\)(?P<attrs>.*)$"
)
_ARRAY_SHAPE = re.compile(r"(?P<dtype>[a-z][a-z0-9]*)\[(?P<dims>[^\]]*)\]")


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective in a compiled program.

    Attributes:
        kind: one of :data:`COLLECTIVE_KINDS`.
        name: the HLO instruction name.
        async_: True for an async ``-start`` (its ``-done`` is not counted).
        result_bytes: the size of its result on each device.
        operand_bytes: the size of its operands on each device.
        bytes_per_device: the larger of the two: the buffer each device
            takes part in (the gathered size for an all-gather, the reduced
            size for a reduce-scatter).
        groups: the device groups, as mesh positions (for a
            collective-permute, the (source, target) pairs).
        axes: the mesh axes along which a group's members differ.
        complete: whether each group spans those axes whole; False when XLA
            splits an axis (e.g. groups of 2 along an axis of size 4).
        op_name: the op_name metadata, e.g. ``jit(forward)/down/dot_general``.
        scopes: the name-scope paths in ``op_name`` (several for a combined
            collective).
        layer: the Keras layer path(s) the collective belongs to, e.g.
            ``down``; :func:`collectives` gives the scope paths, and callers
            that know the model's layer paths map them with
            :func:`layer_for_scope`.
        pass_: ``"forward"``, ``"backward"`` or ``"update"`` (in a train step).
        network: the link it runs over (``"ici"``, ``"dcn"``, ``"nvlink"``,
            ``"infiniband"``, ``"host"``), once the trace knows the target.
        seconds: an estimate of its time on that link, or None.
    """

    kind: str
    name: str
    async_: bool
    result_bytes: int
    operand_bytes: int
    groups: tuple
    axes: tuple
    complete: bool
    op_name: str
    scopes: tuple
    layer: str
    pass_: str
    network: str = ""
    seconds: float | None = None
    source: str = ""
    """``file:line`` of the Python that produced it (see :mod:`.sources`)."""
    source_function: str = ""
    source_from: str = ""
    """Whose metadata gave ``source``: ``"itself"``, ``"the op it feeds"``
    or ``"the op that feeds it"``; empty when none had any."""
    stack: tuple = ()
    """Every Python frame behind ``source``, innermost first."""
    site: str = ""
    """The op_name of the op where the layouts meet (see :mod:`.sources`)."""
    operands: tuple = ()
    """What meets at the site: variable paths, ``<layer>/output`` for
    another layer's output, ``input:<name>`` for a model input."""

    @property
    def bytes_per_device(self) -> int:
        return max(self.result_bytes, self.operand_bytes)

    @property
    def group_size(self) -> int:
        return len(self.groups[0]) if self.groups else 0


def shape_bytes(shape_text: str) -> int:
    """Bytes of an HLO shape, summed over the elements of a tuple.

    >>> shape_bytes("f32[4,16]{1,0}"), shape_bytes("(bf16[8], f32[2,2])"), shape_bytes("f32[]")
    (256, 32, 4)
    """
    total = 0
    for m in _ARRAY_SHAPE.finditer(shape_text):
        dims = [int(d) for d in re.findall(r"\d+", m.group("dims"))]
        total += math.prod(dims) * DTYPE_BYTES.get(m.group("dtype"), 4)
    return total


def tuple_elements(shape_text: str) -> list[str]:
    """The top-level elements of a tuple shape (one element if not a tuple).

    >>> tuple_elements("(f32[4], (f32[2], u32[]), u32[])")
    ['f32[4]', '(f32[2], u32[])', 'u32[]']
    """
    text = shape_text.strip()
    if not text.startswith("("):
        return [text]
    parts, depth, start = [], 0, 1
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 1:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:-1].strip())
    return [p for p in parts if p]


def collectives(hlo_text: str, axis_names, mesh_shape) -> list[Collective]:
    """Every collective of a compiled module's text, in program order."""
    shapes = {}
    sources: dict[str, tuple[str, str]] = {}  # name -> (op_name, first operand)
    received: dict[str, int] = {}  # a cross-slice transfer's rendezvous -> bytes received
    found = []
    for line in hlo_text.splitlines():
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        shapes[m.group("name")] = m.group("shape")
        first = m.group("operands").split(",")[0].strip().split()[-1:] or [""]
        sources[m.group("name")] = (_attr(m.group("attrs"), "op_name") or "",
                                    first[0].lstrip("%"))
        op = m.group("op")
        if op == "send" and "_xla_megascale_transfer_type" in m.group("attrs"):
            found.append((m, "megascale", False))
            continue
        if op == "recv" and "_xla_megascale_transfer_type" in m.group("attrs"):
            received[_attr(m.group("attrs"), "_xla_host_transfer_rendezvous") or ""] = \
                _first_element_bytes(m.group("shape"))
            continue
        base = op[:-6] if op.endswith("-start") else op
        if base not in COLLECTIVE_KINDS or op.endswith("-done"):
            continue
        found.append((m, base, op.endswith("-start")))
    out = []
    for m, kind, is_async in found:
        attrs = m.group("attrs")
        if kind == "megascale":
            out.append(_megascale(m, sources, received))
            continue
        groups_text = _attr(attrs, "replica_groups")
        if kind == "collective-permute":
            pairs = parse_replica_groups(_attr(attrs, "source_target_pairs") or "{}")
            groups = tuple(tuple(p) for p in pairs)
        else:
            groups = tuple(tuple(g) for g in parse_replica_groups(groups_text or "{}"))
            if not groups:  # an empty list means one group of every device
                groups = (tuple(range(math.prod(mesh_shape))),)
        if kind == "collective-permute":
            axes, complete = permute_axes(groups, axis_names, mesh_shape), True
        else:
            axes, complete = group_axes([list(g) for g in groups], axis_names, mesh_shape)
        op_name = _attr(attrs, "op_name") or ""
        scopes, pass_ = scopes_of(op_name)
        operands = [o.strip().lstrip("%") for o in m.group("operands").split(",") if o.strip()]
        operand_bytes = sum(shape_bytes(shapes.get(o.split()[-1].lstrip("%"), o)) for o in operands)
        result_bytes = shape_bytes(m.group("shape"))
        if is_async and kind != "all-reduce":
            # all-gather-start and friends return (operands, results[, context]).
            elements = tuple_elements(m.group("shape"))
            if len(elements) >= 2:
                result_bytes = shape_bytes(elements[1])
        out.append(Collective(
            kind=kind, name=m.group("name"), async_=is_async, result_bytes=int(result_bytes),
            operand_bytes=int(operand_bytes), groups=groups, axes=axes, complete=complete,
            op_name=op_name, scopes=scopes, layer=", ".join(scopes), pass_=pass_,
        ))
    return out


MEGASCALE_KINDS = {"ALL_REDUCE": "all-reduce", "ALL_GATHER": "all-gather",
                   "REDUCE_SCATTER": "reduce-scatter", "ALL_TO_ALL": "all-to-all",
                   "ONE_TO_ONE": "collective-permute",
                   "COLLECTIVE_PERMUTE": "collective-permute"}
"""The multi-slice runtime's transfer types, as :data:`COLLECTIVE_KINDS`: a
``ONE_TO_ONE`` transfer sends each chip's buffer to one chip of another
slice, which is what a collective-permute does."""


def _first_element_bytes(shape_text: str) -> int:
    """Bytes of a ``send``/``recv``'s buffer: its shape's first element."""
    elements = tuple_elements(shape_text)
    return shape_bytes(elements[0]) if elements else shape_bytes(shape_text)


def _megascale(m, sources: dict[str, tuple[str, str]], received: dict[str, int]) -> Collective:
    """A collective between TPU slices: XLA hands it to the multi-slice
    runtime as a host-transfer ``send`` whose attributes name its kind
    (``_xla_megascale_transfer_type="ALL_REDUCE"``), and a ``recv`` with the
    same rendezvous that holds what arrives (for an all-gather the gathered
    buffer, larger than what was sent). It runs over the data-centre network;
    its groups are the same chip in every slice, so the trace fills in the
    axes."""
    attrs = m.group("attrs")
    transfer = _attr(attrs, "_xla_megascale_transfer_type") or ""
    transfer = transfer.strip('"{}')
    if transfer not in MEGASCALE_KINDS:
        raise ShardvizError(
            f"Cross-slice transfer {m.group('name')!r} has the type {transfer!r}, which "
            f"shardviz does not know (it knows {', '.join(sorted(MEGASCALE_KINDS))}).",
            hint="Analyse one slice (slices=1), or use the libtpu version shardviz's "
            "tests pin.")
    kind = MEGASCALE_KINDS[transfer]
    size = _first_element_bytes(m.group("shape"))
    rendezvous = _attr(attrs, "_xla_host_transfer_rendezvous") or ""
    result = received.get(rendezvous, size)
    op_name = _attr(attrs, "op_name") or ""
    operand = m.group("operands").split(",")[0].strip().lstrip("%")
    for _ in range(8):  # the transfer has no metadata: take its data's producer's
        if op_name or operand not in sources:
            break
        op_name, operand = sources[operand]
    scopes, pass_ = scopes_of(op_name)
    return Collective(kind=kind, name=m.group("name"), async_=True, result_bytes=int(result),
                      operand_bytes=int(size), groups=(), axes=(), complete=True,
                      op_name=op_name, scopes=scopes, layer=", ".join(scopes), pass_=pass_,
                      network="dcn")


def _attr(attrs: str, name: str) -> str | None:
    """The value of ``name=...`` in an instruction's attribute text."""
    key = f"{name}="
    i = attrs.find(key)
    if i < 0:
        return None
    j = i + len(key)
    if name == "op_name":
        m = re.match(r'"([^"]*)"', attrs[j:])
        return m.group(1) if m else None
    if attrs.startswith("mesh", j):
        end = attrs.find("}", j)
        return attrs[j:end + 1]
    if attrs[j] == "[":
        m = re.match(r"\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?", attrs[j:])
        return m.group(0) if m else None
    if attrs[j] == "{":
        depth = 0
        for k in range(j, len(attrs)):
            depth += {"{": 1, "}": -1}.get(attrs[k], 0)
            if depth == 0:
                return attrs[j:k + 1]
    m = re.match(r"[^,\s]+", attrs[j:])
    return m.group(0) if m else None
