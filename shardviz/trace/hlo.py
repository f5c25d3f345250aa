"""Collectives and memory, read from a compiled XLA program.

After SPMD partitioning the compiled HLO holds one instruction per
collective. Each names its kind (``all-reduce``, ``all-gather``,
``reduce-scatter``, ``all-to-all``, ``collective-permute``, or an async
``-start``/``-done`` pair), its result shape per device, the device groups it
runs over, and the Keras layer it came from (Keras opens a JAX name scope per
layer, which XLA keeps as ``op_name`` metadata).

Device groups come in three spellings, all turned into explicit groups of
mesh positions, then into the mesh axes they run over:

* explicit lists ``{{0,1,2,3},{4,5,6,7}}``;
* iota ``[2,4]<=[8]`` or ``[4,2]<=[2,4]T(1,0)``;
* mesh axes ``mesh['axis_0'=2,'axis_1'=4] {'axis_0'}``.

>>> groups = parse_replica_groups("[2,4]<=[8]")
>>> groups
[[0, 1, 2, 3], [4, 5, 6, 7]]
>>> group_axes(groups, ("batch", "model"), (2, 4))
(('model',), True)
>>> parse_replica_groups("[4,2]<=[2,4]T(1,0)")
[[0, 4], [1, 5], [2, 6], [3, 7]]
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

from ..errors import ShardvizError

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


def _iota_groups(text: str) -> list[list[int]]:
    m = re.fullmatch(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", text.strip())
    if not m:
        raise ValueError(f"unrecognised iota replica groups {text!r}")
    out_dims = [int(x) for x in m.group(1).split(",")]
    reshape = [int(x) for x in m.group(2).split(",")]
    ids = np.arange(math.prod(reshape)).reshape(reshape)
    if m.group(3):
        ids = ids.transpose([int(x) for x in m.group(3).split(",")])
    ids = ids.reshape(out_dims[0], -1) if len(out_dims) == 2 else ids.reshape(1, -1)
    return ids.tolist()


def _mesh_groups(text: str) -> list[list[int]]:
    m = re.fullmatch(
        r"mesh\[(?P<axes>[^\]]*)\](?:,\s*device_ids=\((?P<ids>.*?)\))?\s*\{(?P<group>[^}]*)\}",
        text.strip(),
    )
    if not m:
        raise ValueError(f"unrecognised mesh replica groups {text!r}")
    names, sizes = [], []
    for part in m.group("axes").split(","):
        name, size = part.rsplit("=", 1)
        names.append(name.strip().strip("'\""))
        sizes.append(int(size))
    n = math.prod(sizes)
    ids = _device_ids(m.group("ids"), n)
    # Factor each mesh axis into (major, sub, minor) pieces as sub-axes require.
    listed = []
    for ref in re.findall(r"[^,]+", m.group("group")):
        ref = ref.strip()
        if not ref:
            continue
        sub = re.fullmatch(r"['\"]?(?P<name>[^'\":]+)['\"]?(?::\((?P<pre>\d+)\)(?P<size>\d+))?", ref)
        if sub is None:
            raise ValueError(f"unrecognised mesh replica group axis {ref!r}")
        axis = names.index(sub.group("name"))
        pre = int(sub.group("pre") or 1)
        size = int(sub.group("size") or sizes[axis])
        listed.append((axis, pre, size))
    coords = np.array(np.unravel_index(np.arange(n), sizes)).T  # position -> coords
    keys: list[tuple[int, ...]] = []
    for pos in range(n):
        key: list[int] = []
        for axis, full in enumerate(sizes):
            c = int(coords[pos][axis])
            refs = [(p, s) for a, p, s in listed if a == axis]
            if not refs:
                key.append(c)
                continue
            # Keep the parts of the coordinate that no listed sub-axis covers.
            varying = 0
            for p, s in refs:
                minor = full // (p * s)
                varying += ((c // minor) % s) * minor
            key.append(c - varying)
        keys.append(tuple(key))
    groups: dict = {}
    for pos, group_key in enumerate(keys):
        groups.setdefault(group_key, []).append(int(ids[pos]))
    return list(groups.values())


def _device_ids(text: str | None, n: int) -> np.ndarray:
    """A mesh's device ids: iota when absent, an iota ``[dims]T(perm)``, or a list.

    >>> _device_ids("[2,4]T(1,0)", 8).tolist()
    [0, 4, 1, 5, 2, 6, 3, 7]
    """
    if not text:
        return np.arange(n)
    numbers = [int(x) for x in re.findall(r"\d+", text.split("T(")[0])]
    iota = re.fullmatch(r"\s*\[([\d,\s]+)\](?:T\(([\d,\s]+)\))?\s*", text)
    if iota and (iota.group(2) or len(numbers) != n):
        dims = [int(x) for x in iota.group(1).split(",")]
        ids = np.arange(math.prod(dims)).reshape(dims)
        if iota.group(2):
            ids = ids.transpose([int(x) for x in iota.group(2).split(",")])
        return ids.reshape(-1)
    return np.array([int(x) for x in re.findall(r"\d+", text)])


def parse_replica_groups(text: str) -> list[list[int]]:
    """Explicit groups of device positions for any of XLA's three spellings.

    >>> parse_replica_groups("{{0,2},{1,3}}")
    [[0, 2], [1, 3]]
    >>> parse_replica_groups("mesh['axis_0'=2,'axis_1'=4] {'axis_0'}")
    [[0, 4], [1, 5], [2, 6], [3, 7]]
    """
    text = text.strip()
    if text.startswith("mesh"):
        return _mesh_groups(text)
    if text.startswith("["):
        return _iota_groups(text)
    inner = re.findall(r"\{([\d,\s]*)\}", text)
    return [[int(x) for x in g.split(",") if x.strip()] for g in inner if g.strip()]


def group_axes(groups, axis_names, mesh_shape) -> tuple[tuple, bool]:
    """``(axes, complete)``: the mesh axes along which each group's members
    differ, and whether the groups are exactly the sub-meshes those axes span.

    >>> group_axes([[0, 4], [1, 5], [2, 6], [3, 7]], ("batch", "model"), (2, 4))
    (('batch',), True)
    >>> group_axes([[0, 1, 2, 3, 4, 5, 6, 7]], ("batch", "model"), (2, 4))
    (('batch', 'model'), True)
    >>> group_axes([[0, 1], [2, 3], [4, 5], [6, 7]], ("batch", "model"), (2, 4))
    (('model',), False)
    """
    if not groups:
        return (), True
    n = math.prod(mesh_shape)
    members = [p for g in groups for p in g]
    if any(p >= n for p in members):
        return (), False
    varying = set()
    for group in groups:
        coords = np.array(np.unravel_index(group, mesh_shape)).T
        for axis in range(len(mesh_shape)):
            if len(set(coords[:, axis])) > 1:
                varying.add(axis)
    expected = math.prod(mesh_shape[a] for a in varying)
    complete = all(len(g) == expected for g in groups)
    return tuple(axis_names[a] for a in sorted(varying)), complete


def scopes_of(op_name: str) -> tuple[tuple[str, ...], str]:
    """``(name-scope paths, pass)`` from op_name metadata.

    The scope path is what Keras's layer name scopes left (autodiff wrappers
    removed, the primitive dropped). A combined collective joins several op
    names as ``(a:b:c)``; each gives a scope path.

    >>> scopes_of("jit(forward)/down/dot_general")
    (('down',), 'forward')
    >>> scopes_of("jit(step)/transpose(jvp(my_model))/block_0/up/dot_general")
    (('my_model/block_0/up',), 'backward')
    >>> scopes_of("jit(step)/transpose(jvp(attn))/(query/abc,cde->abde/dot_general:key/reduce_sum)")
    (('attn/query/abc,cde->abde', 'attn/key'), 'backward')
    """
    body = op_name
    m = re.match(r"p?jit\([^)]*\)/(.*)$", body)
    if m:
        body = m.group(1)
    scopes, backward = [], False
    for name in _expand(body):
        scope, is_backward = _scope_of_one(name)
        backward |= is_backward
        if scope and scope not in scopes:
            scopes.append(scope)
    return tuple(scopes), ("backward" if backward else "forward")


def _expand(name: str) -> list[str]:
    """Expand a combined op name ``a/(b/x:c/y)`` into ``a/b/x`` and ``a/c/y``."""
    parts = _split_top(name, "/")
    for i, part in enumerate(parts):
        if part.startswith("(") and part.endswith(")") and len(_split_top(part[1:-1], ":")) > 1:
            prefix = "/".join(parts[:i])
            out = []
            for alt in _split_top(part[1:-1], ":"):
                out += [f"{prefix}/{e}" if prefix else e for e in _expand(alt)]
            return out
    return [name]


def _split_top(text: str, sep: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _scope_of_one(name: str) -> tuple[str, bool]:
    parts = name.split("/")
    backward = any("transpose(" in p for p in parts)
    cleaned = []
    for p in parts[:-1]:  # the last part is the primitive
        while True:
            m = re.fullmatch(r"(?:jvp|transpose|vmap|remat|checkpoint|jit|pjit)\((.*)\)", p)
            if not m:
                break
            p = m.group(1)
        if p and not p.startswith(("while", "cond", "body", "branch")):
            cleaned.append(p)
    return "/".join(cleaned), backward


def layer_for_scope(scope: str, layer_paths) -> str | None:
    """The Keras layer a name-scope path belongs to: the longest prefix of the
    scope that is a known layer path, or its tail (``stateless_call`` opens
    no scope for the model itself, so scopes may lack the model's name).

    >>> layer_for_scope("block_0/down/xyz", ["my_model/block_0/up", "my_model/block_0/down"])
    'my_model/block_0/down'
    >>> layer_for_scope("attn/query/abc,cde->abde", ["attn", "attn/query"])
    'attn/query'
    """
    parts = scope.split("/")
    for n in range(len(parts), 0, -1):
        prefix = "/".join(parts[:n])
        for path in layer_paths:
            if path == prefix or path.endswith("/" + prefix):
                return path
    return None


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
            axes, complete = _permute_axes(groups, axis_names, mesh_shape), True
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


def _permute_axes(pairs, axis_names, mesh_shape):
    varying = set()
    for src, dst in pairs:
        a = np.unravel_index(src, mesh_shape)
        b = np.unravel_index(dst, mesh_shape)
        varying.update(i for i in range(len(mesh_shape)) if a[i] != b[i])
    return tuple(axis_names[i] for i in sorted(varying))


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


def unread_bytes(compiled, args) -> int:
    """Per-device bytes of the arguments ``jit`` dropped from ``compiled``
    because the program never reads them (an untied output embedding in a
    forward pass, say). They are not in XLA's argument bytes, yet the arrays
    live on the device all the same. ``compiled.input_shardings`` has None
    for each dropped argument."""
    import math

    import jax
    import numpy as np

    def none(x):
        return x is None

    kept = jax.tree_util.tree_leaves(compiled.input_shardings, is_leaf=none)
    given = jax.tree_util.tree_leaves((tuple(args), {}), is_leaf=none)
    if len(kept) != len(given):
        raise ValueError(f"{len(given)} arguments but {len(kept)} compiled input shardings")
    total = 0
    for sharding, arg in zip(kept, given):
        if sharding is None and arg is not None:
            shard = arg.sharding.shard_shape(tuple(arg.shape))
            total += math.prod(shard) * np.dtype(arg.dtype).itemsize
    return total


def memory(compiled, args=()) -> dict:
    """Per-device bytes from ``compiled.memory_analysis()``, the bytes of
    the arguments ``args`` it does not read (:func:`unread_bytes`), and flops
    from ``compiled.cost_analysis()`` when XLA reports them."""
    stats = compiled.memory_analysis()
    out: dict[str, float | None] = {
        "argument_bytes": int(getattr(stats, "argument_size_in_bytes", 0)),
        "output_bytes": int(getattr(stats, "output_size_in_bytes", 0)),
        "temp_bytes": int(getattr(stats, "temp_size_in_bytes", 0)),
        "alias_bytes": int(getattr(stats, "alias_size_in_bytes", 0)),
        "code_bytes": int(getattr(stats, "generated_code_size_in_bytes", 0)),
        "unread_bytes": unread_bytes(compiled, args) if args else 0,
    }
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    cost = cost or {}
    out["flops"] = float(cost["flops"]) if "flops" in cost else None
    out["bytes_accessed"] = float(cost["bytes accessed"]) if "bytes accessed" in cost else None
    optimal = cost.get("optimal_seconds")
    # The TPU compiler's own estimate; it can be negative, which means none.
    out["optimal_seconds"] = float(optimal) if optimal is not None and optimal > 0 else None
    return out
