"""The operations of a compiled program, in the compiler's schedule, with
what each one does: the work its time is made of.

The optimized HLO (``compiled.as_text()``) of a scheduled module lists its
entry computation's instructions in the order the device runs them. Each
top-level instruction is one operation the device runs (a fusion, a copy, a
collective, a kernel); what it does is read from its own shapes and from the
computation it calls:

- ``flops``: 2 x the multiply-adds of its dots and convolutions, plus one per
  element for each element-wise or reducing instruction;
- ``mxu_flops``: the dots' and convolutions' flops with the contracting and
  output-feature sizes rounded up to the matrix unit's 128 (what the unit
  spends on a shape that does not fill it);
- ``transcendentals``: elements through exp, log, tanh and the like;
- ``bytes``: its operands and results as laid out; ``hbm_bytes``: those
  not in an on-chip memory space (a layout's ``S(n)``).

A while loop's body runs its known trip count (``count``); a called
computation's operations are listed in place.

>>> text = '''HloModule m, is_scheduled=true
... %fused (p0: bf16[8,256], p1: bf16[256,512]) -> bf16[8,512] {
...   %p0 = bf16[8,256]{1,0} parameter(0)
...   %p1 = bf16[256,512]{1,0} parameter(1)
...   ROOT %d = bf16[8,512]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
... }
... ENTRY %main (a: bf16[8,256], b: bf16[256,512]) -> bf16[8,512] {
...   %a = bf16[8,256]{1,0:T(8,128)(2,1)} parameter(0)
...   %b = bf16[256,512]{1,0:T(8,128)(2,1)} parameter(1)
...   ROOT %f = bf16[8,512]{1,0:T(8,128)(2,1)} fusion(%a, %b), kind=kOutput, calls=%fused
... }
... '''
>>> [(o.name, o.kind, o.flops, o.bytes) for o in program_ops(text)]
[('f', 'matmul', 2097152.0, 274432)]
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

from .hlo import DTYPE_BYTES

KINDS = ("matmul", "vector", "copy", "kernel", "collective", "prefetch", "control")
"""What an operation's time is made of: the matrix units (``matmul``), the
vector units (element-wise, reductions, gathers: ``vector``), moving memory
(``copy``: copies, transposes, slices), a custom kernel (``kernel``), the
chips' links (``collective``), an asynchronous copy into on-chip memory the
schedule overlaps (``prefetch``) and bookkeeping (``control``)."""

_FREE = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all",
         "partition-id", "replica-id", "opt-barrier", "add-dependency", "domain"}
_COLLECTIVE = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
               "collective-permute", "collective-broadcast", "ragged-all-to-all")
_COPY = {"copy", "transpose", "slice", "dynamic-slice", "dynamic-update-slice", "concatenate",
         "pad", "reverse", "broadcast", "reshape", "iota", "bitcast-convert"}
_TRANSCENDENTAL = {"exponential", "log", "tanh", "logistic", "rsqrt", "sqrt", "power", "erf",
                   "sine", "cosine", "tan", "exponential-minus-one", "log-plus-one", "cbrt",
                   "atan2"}
_NO_FLOPS = _FREE | _COPY | {"fusion", "call", "while", "conditional", "custom-call", "gather",
                             "scatter", "sort", "rng", "rng-bit-generator", "convert",
                             "copy-start", "copy-done", "send", "recv", "send-done",
                             "recv-done", "infeed", "outfeed", "select", "compare", "clamp"}
_ARRAY = re.compile(r"\b(?P<dtype>[a-z][a-z0-9]*)\[(?P<dims>[\d,]*)\](?:\{(?P<layout>[^}]*)\})?")
_HEADER = re.compile(r"^(?:ENTRY\s+)?%?(?P<name>[\w.\-]+)\s.*\{\s*$")
_STARTS = re.compile(r"^\s+(?:ROOT\s+)?%?[\w.\-]+\s=\s")
_CALLS = re.compile(r"\b(?:calls|to_apply|body)=%?([\w.\-]+)")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_CYCLES = re.compile(r'"estimated_cycles":"(\d+)"')
_TARGET = re.compile(r'custom_call_target="([^"]*)"')
MXU = 128
"""The side of v5e's matrix units (128 x 128), the chip the efficiencies are
fitted on; ``mxu_flops`` is used only where the compiler gave no cycles."""


@dataclasses.dataclass(frozen=True)
class ProgramOp:
    """One operation the device runs, and the work in it."""

    name: str
    """The instruction's name in the optimized program (the profile's name)."""
    opcode: str
    kind: str
    """One of :data:`KINDS`."""
    flops: float
    mxu_flops: float
    transcendentals: float
    bytes: int
    hbm_bytes: int
    count: float
    """How many times a step runs it (a loop body's trip count)."""
    op_name: str
    """JAX's name stack of the first instruction in it that has one."""
    detail: str = ""
    """The fusion's kind, a collective's kind, or a kernel's name."""
    cycles: float = 0.0
    """The TPU compiler's own estimate of its cycles (``estimated_cycles`` in
    its backend configuration), or 0 where the compiler wrote none."""
    windowed: bool = False
    """A product whose contraction runs over a convolution window: XLA writes
    a weight's gradient (summed over the batch) this way."""


@dataclasses.dataclass
class _Instruction:
    name: str
    shape: str
    opcode: str
    operands: str
    attrs: str


def _matching(text: str, start: int) -> int:
    """The index just past the bracket closing the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def _instruction(line: str) -> _Instruction | None:
    head, sep, rest = line.partition(" = ")
    if not sep:
        return None
    name = head.strip().removeprefix("ROOT ").strip().lstrip("%")
    rest = rest.lstrip()
    if rest.startswith("("):
        end = _matching(rest, 0)
    else:
        m = _ARRAY.match(rest)
        if m is None:
            return None
        end = m.end()
    shape, rest = rest[:end], rest[end:].lstrip()
    paren = rest.find("(")
    if paren <= 0:
        return None
    opcode = rest[:paren]
    # Operands named only (as ``compiled.as_text()`` prints them) hold no
    # bracket; with their shapes, a layout's tiling does.
    simple = rest.find(")", paren)
    close = simple + 1 if "(" not in rest[paren + 1:simple] else _matching(rest, paren)
    return _Instruction(name, shape, opcode, rest[paren + 1:close - 1], rest[close:])


def computations(text: str) -> tuple[dict[str, list[_Instruction]], str | None]:
    """Every computation of an HLO module by name, and the entry's name. An
    instruction may run over several lines (a kernel's metadata does)."""
    comps: dict[str, list[_Instruction]] = {}
    entry, current = None, None
    lines: list[str] = []

    def flush():
        if lines and current is not None:
            ins = _instruction(" ".join(lines))
            if ins is not None:
                comps[current].append(ins)
        lines.clear()

    for line in text.splitlines():
        if current is None:
            m = _HEADER.match(line)
            if m and not line.startswith(("HloModule", " ")):
                current = m.group("name")
                comps[current] = []
                if line.startswith("ENTRY"):
                    entry = current
            continue
        if line.strip() == "}":
            flush()
            current = None
            continue
        if _STARTS.match(line):
            flush()
        lines.append(line)
    return comps, entry


def _arrays(shape_text: str):
    for m in _ARRAY.finditer(shape_text):
        dims = [int(d) for d in m.group("dims").split(",") if d]
        yield m.group("dtype"), dims, m.group("layout") or ""


@functools.lru_cache(maxsize=65536)
def _bytes(shape_text: str) -> tuple[int, int]:
    """All bytes of the arrays in ``shape_text``, and those in HBM (memory
    space 0: a layout without ``S(n)``, n > 0)."""
    total = hbm = 0
    for dtype, dims, layout in _arrays(shape_text):
        size = math.prod(dims) * DTYPE_BYTES.get(dtype, 4)
        total += size
        space = re.search(r"S\((\d+)\)", layout)
        if space is None or space.group(1) == "0":
            hbm += size
    return total, hbm


def _operand_bytes(operands: str, shapes: dict[str, str]) -> tuple[int, int]:
    """The bytes of an instruction's operands: their shapes where the text
    gives them, else their definitions' (``compiled.as_text()`` names them only)."""
    if _ARRAY.search(operands):
        return _bytes(operands)
    total = hbm = 0
    for name in re.findall(r"%([\w.\-]+)", operands):
        b, h = _bytes(shapes.get(name, ""))
        total += b
        hbm += h
    return total, hbm


@functools.lru_cache(maxsize=65536)
def _elements(shape_text: str) -> int:
    return sum(math.prod(dims) for _, dims, _ in _arrays(shape_text))


def _round(n: int) -> int:
    return -(-n // MXU) * MXU


def _dims(text: str, key: str) -> list[int]:
    m = re.search(key + r"=\{([\d,]*)\}", text)
    return [int(d) for d in m.group(1).split(",") if d] if m else []


def _dot_flops(ins: _Instruction, shapes: dict[str, str]) -> tuple[float, float]:
    out = next(_arrays(ins.shape), None)
    operands = list(_arrays(ins.operands)) or [
        a for o in re.findall(r"%([\w.\-]+)", ins.operands) for a in _arrays(shapes.get(o, ""))]
    if out is None or len(operands) < 2:
        return 0.0, 0.0
    lhs, rhs = operands[0][1], operands[1][1]
    out_n = math.prod(out[1])
    if ins.opcode == "dot":
        contracting = _dims(ins.attrs, "lhs_contracting_dims")
        k = math.prod(lhs[c] for c in contracting if c < len(lhs))
        rhs_free = [d for i, d in enumerate(rhs) if i not in _dims(ins.attrs, "rhs_contracting_dims")
                    and i not in _dims(ins.attrs, "rhs_batch_dims")]
        n = math.prod(rhs_free) if rhs_free else 1
        padded = 2.0 * out_n / max(n, 1) * _round(n) * _round(k)
        return 2.0 * out_n * k, padded
    m = re.search(r"dim_labels=([\w]+)_([\w]+)->([\w]+)", ins.attrs)
    groups = 1
    g = re.search(r"feature_group_count=(\d+)", ins.attrs)
    if g:
        groups *= int(g.group(1))
    g = re.search(r"batch_group_count=(\d+)", ins.attrs)
    if g:
        groups *= int(g.group(1))
    if m is None or len(m.group(2)) != len(rhs):
        k = math.prod(rhs) / max(rhs[-1] if rhs else 1, 1)
        return 2.0 * out_n * k, 2.0 * out_n * k
    labels = m.group(2)
    o = rhs[labels.index("o")] if "o" in labels else 1
    i = rhs[labels.index("i")] if "i" in labels else 1
    # XLA writes a batched product as a convolution whose window runs over
    # the batch dimensions, dilated or padded so that each output meets one
    # input element there: such a window dimension adds no work. A window
    # of a real convolution multiplies it.
    w = re.search(r"window=\{([^}]*)\}", ins.attrs)
    config = w.group(1) if w else ""
    sizes = _window(config, "size")
    dilate = _window(config, "lhs_dilate")
    pad = re.search(r"\bpad=([\d_x]+)", config)
    pads = [sum(int(p) for p in pair.split("_") if p) for pair in
            (pad.group(1).split("x") if pad else [])]
    window = 1
    for n, size in enumerate(sizes):
        batched = (n < len(dilate) and dilate[n] > 1) or (
            n < len(pads) and pads[n] >= 2 * (size - 1) > 0) or "rhs_reversal=" in config
        window *= 1 if batched else size
    k = i * window / (groups if groups > 1 and i * groups != o else 1)
    padded = 2.0 * out_n / max(o, 1) * _round(o) * _round(i) * window
    return 2.0 * out_n * k, padded


def _kernel_name(ins: _Instruction) -> str:
    """A custom call's kernel: a Pallas kernel by its instruction's name
    (``splash_mha_fwd_segmented_no_residuals.12``: the kernel is
    ``splash_mha_fwd_segmented_no_residuals``), else its target."""
    target = _TARGET.search(ins.attrs)
    if target and target.group(1) == "tpu_custom_call":
        return re.sub(r"\.\d+$", "", ins.name)
    return target.group(1) if target else ""


def _attention_flops(kernel: str, ins: _Instruction, shapes: dict[str, str]) -> float:
    """An attention kernel's flops from its query and key operands ((batch,
    heads, length, head_dim) each): 4 x batch x heads x query length x key
    length x head_dim for the two products of the forward pass, as if no
    block were masked. 0 for any other kernel."""
    if not re.search(r"mha|attention|flash", kernel):
        return 0.0
    four = []
    for name in re.findall(r"%([\w.\-]+)", ins.operands):
        for _, dims, _ in _arrays(shapes.get(name, "")):
            if len(dims) == 4:
                four.append(dims)
    if len(four) < 2:
        return 0.0
    (b, h, sq, d), (_, _, sk, _) = four[0], four[1]
    return 4.0 * b * h * sq * sk * d


def _window(text: str, key: str) -> list[int]:
    m = re.search(r"\b" + key + r"=([\dx]+)", text)
    return [int(d) for d in m.group(1).split("x")] if m else []


def _windowed(ins: _Instruction) -> bool:
    """Whether a convolution's window adds to its contraction (see
    :func:`_dot_flops`)."""
    if ins.opcode != "convolution":
        return False
    w = re.search(r"window=\{([^}]*)\}", ins.attrs)
    if not w or "lhs_dilate" in w.group(1) or "rhs_reversal" in w.group(1) or \
            "pad=" in w.group(1):
        return False
    return any(size > 1 for size in _window(w.group(1), "size"))


class _Work:
    def __init__(self):
        self.flops = self.mxu = self.trans = 0.0
        self.matmul = False
        self.windowed = False
        self.op_name = ""
        self.kernel = ""


def _walk(comp: str, comps, work: _Work, seen: set) -> None:
    """Add the work of every instruction in ``comp`` (and what it calls)."""
    if comp in seen or comp not in comps:
        return
    seen = seen | {comp}
    shapes = {i.name: i.shape for i in comps[comp]}
    for ins in comps[comp]:
        if not work.op_name:
            m = _OP_NAME.search(ins.attrs)
            if m:
                work.op_name = m.group(1)
        if ins.opcode in ("dot", "convolution"):
            flops, padded = _dot_flops(ins, shapes)
            work.windowed |= _windowed(ins)
            work.flops += flops
            work.mxu += padded
            work.matmul = True
        elif ins.opcode == "reduce" or ins.opcode == "reduce-window":
            work.flops += _elements(ins.operands) / 2 or _elements(ins.shape)
        elif ins.opcode in _TRANSCENDENTAL:
            work.trans += _elements(ins.shape)
        elif ins.opcode not in _NO_FLOPS:
            work.flops += _elements(ins.shape)
        if ins.opcode == "custom-call" and not work.kernel:
            work.kernel = _kernel_name(ins)
        for called in _CALLS.findall(ins.attrs):
            if ins.opcode != "while":
                _walk(called, comps, work, seen)


def _kind(ins: _Instruction, work: _Work) -> str:
    op = ins.opcode
    if op.startswith(_COLLECTIVE) and not op.endswith("-done"):
        return "collective"
    if op == "async-start":
        return "collective" if any(c in ins.attrs for c in _COLLECTIVE) else "prefetch"
    if op.endswith(("-start", "-done")):
        return "prefetch"  # an asynchronous copy or slice: the schedule overlaps it
    if op == "custom-call":
        return "kernel" if work.flops or work.kernel not in ("", "AssumeGatherIndicesInBound",
                                                             "ConcatBitcast") else "control"
    if work.matmul:
        return "matmul"
    if op in _COPY:
        return "copy"
    if op == "fusion":
        return "vector" if work.flops or work.trans else "copy"
    return "vector"


def program_ops(text: str) -> list[ProgramOp]:
    """Every operation of the program's entry computation (and of the loops
    and calls it makes), in the compiler's order. A program read before in
    this process (the same analysis again) is not read twice."""
    return list(_read(text))


@functools.lru_cache(maxsize=8)
def _read(text: str) -> tuple[ProgramOp, ...]:
    comps, entry = computations(text)
    if entry is None:
        return ()
    out: list[ProgramOp] = []
    _collect(entry, comps, 1.0, out, set())
    return tuple(out)


def _collect(comp: str, comps, count: float, out: list[ProgramOp], seen: set) -> None:
    if comp in seen:
        return
    seen = seen | {comp}
    shapes = {i.name: i.shape for i in comps.get(comp, [])}
    for ins in comps.get(comp, []):
        if ins.opcode in _FREE:
            continue
        if ins.opcode == "while":
            trip = _TRIP.search(ins.attrs)
            body = re.search(r"\bbody=%?([\w.\-]+)", ins.attrs)
            if body:
                _collect(body.group(1), comps, count * (int(trip.group(1)) if trip else 1),
                         out, seen)
            continue
        if ins.opcode in ("call", "conditional"):
            for called in _CALLS.findall(ins.attrs) or re.findall(
                    r"%([\w.\-]+)", ins.attrs.partition("branch_computations=")[2]):
                _collect(called, comps, count, out, seen)
            continue
        work = _Work()
        m = _OP_NAME.search(ins.attrs)
        if m:
            work.op_name = m.group(1)
        if ins.opcode in ("dot", "convolution"):
            work.flops, work.mxu = _dot_flops(ins, shapes)
            work.windowed = _windowed(ins)
            work.matmul = True
        elif ins.opcode not in _NO_FLOPS and ins.opcode not in _TRANSCENDENTAL:
            work.flops = float(_elements(ins.shape))
        for called in _CALLS.findall(ins.attrs):
            _walk(called, comps, work, seen)
        if ins.opcode == "custom-call":
            work.kernel = _kernel_name(ins)
            work.flops = _attention_flops(work.kernel, ins, shapes)
        result, result_hbm = _bytes(ins.shape)
        operands, operands_hbm = _operand_bytes(ins.operands, shapes)
        kind = _kind(ins, work)
        fusion = re.search(r"kind=(k\w+)", ins.attrs)
        detail = work.kernel or (fusion.group(1) if fusion else "")
        cycles = _CYCLES.search(ins.attrs)
        out.append(ProgramOp(ins.name, ins.opcode, kind, work.flops, work.mxu, work.trans,
                             result + operands, result_hbm + operands_hbm, count,
                             work.op_name, detail, float(cycles.group(1)) if cycles else 0.0,
                             work.windowed))
