"""Where a collective comes from: its source line, the op where layouts
meet, and the variables and activations that meet there.

XLA inserts collectives while partitioning, long after tracing, so a
collective is an instruction of the compiled program with no Python of its
own. What it keeps is metadata: the ``op_name`` of the op it was made for,
and a ``stack_frame_id`` into the module's table of Python frames (file,
function, line). This module reads that table, follows the program's
dataflow from each collective to the op that needs it (the *site*), and
names what flows into the site: variables (entry parameters) and other
layers' outputs.

>>> text = '''
... ENTRY %main (p: f32[4]) -> f32[4] {
...   %p = f32[4]{0} parameter(0), metadata={op_name="tv[0]"}
...   %ag = f32[16]{0} all-gather(%p), metadata={op_name="jit(f)/down/dot_general" stack_frame_id=2}
...   ROOT %d = f32[4]{0} fusion(%ag, %p), metadata={op_name="jit(f)/down/dot_general" stack_frame_id=2}
... }
...
... FileNames
... 1 "/work/train.py"
... 2 "/site-packages/keras/src/layers/core/dense.py"
...
... FunctionNames
... 1 "<module>"
... 2 "Dense.call"
...
... FileLocations
... 1 {file_name_id=1 function_name_id=1 line=12 end_line=12 column=1 end_column=1}
... 2 {file_name_id=2 function_name_id=2 line=222 end_line=222 column=1 end_column=1}
...
... StackFrames
... 1 {file_location_id=1 parent_frame_id=1}
... 2 {file_location_id=2 parent_frame_id=2}
... '''
>>> program = Program.parse(text)
>>> [str(f) for f in program.frames[2]]
['/site-packages/keras/src/layers/core/dense.py:222 (Dense.call)', '/work/train.py:12 (<module>)']
>>> program.site("ag", "all-gather").name
'd'
>>> program.inputs_of("d", {"tv[0]": "down/kernel"}, "down", lambda scope: scope)
[('variable', 'down/kernel')]
"""

from __future__ import annotations

import dataclasses
import re

_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>\(.*?\)|[\w]+\[[^\]]*\](?:\{[^}]*\})?)"
    r"\s+(?P<op>[\w\-]+)\((?P<operands>[^)]*)\)(?P<attrs>.*)$"
)
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_FRAME_ID = re.compile(r"stack_frame_id=(\d+)")
_SOURCE = re.compile(r'source_file="([^"]*)"\s+source_line=(\d+)')

PASS_THROUGH = {"copy", "bitcast", "reshape", "transpose", "convert", "get-tuple-element",
                "copy-start", "copy-done", "all-gather-done", "all-reduce-done",
                "collective-permute-done", "optimization-barrier", "tuple"}
"""Ops that move or relabel data without computing: the dataflow walks
through them to the op that needs the collective's result."""

GATHERING = ("all-gather", "all-to-all", "collective-permute")
"""Kinds made for the op they feed (it needs the data in another layout).
The others (all-reduce, reduce-scatter) finish the op that feeds them: it
left partial sums on every device."""

_LIBRARY = re.compile(
    r"(/|^)(jax|jaxlib)/|/keras/src/(backend|ops|activations|utils|trainers|models|"
    r"distribution|random)/|/keras/src/layers/layer\.py$|/keras/src/layers/__init__|"
    r"/keras_hub/src/utils/|<frozen |/contextlib\.py$|/functools\.py$|/threading\.py$")
"""Frames that are plumbing rather than a place to change: JAX, the Keras
backend and op wrappers (shardviz's own frames end the search, see
:func:`source_frame`). A source is the innermost
frame outside these: a layer's ``call`` or the user's own line."""


@dataclasses.dataclass(frozen=True)
class Frame:
    """One Python frame of a traced op."""

    file: str
    function: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line} ({self.function})"

    @property
    def location(self) -> str:
        """``file:line``."""
        return f"{self.file}:{self.line}"


@dataclasses.dataclass
class Instruction:
    name: str
    op: str
    operands: list[str]
    op_name: str
    frame_id: int
    attrs: str
    source: Frame | None = None
    """A ``source_file``/``source_line`` pair, where XLA printed one."""


def _pass_through(ins: Instruction) -> bool:
    if ins.op in PASS_THROUGH:
        return True
    # XLA wraps a lone copy or bitcast in a fusion of its own ("wrapped_copy").
    return ins.op == "fusion" and ins.name.startswith(("wrapped_copy", "wrapped_bitcast",
                                                       "bitcast", "copy"))


@dataclasses.dataclass
class Program:
    """The entry computation's instructions, their users, and the stack
    frames (innermost first) behind each ``stack_frame_id``."""

    instructions: dict[str, Instruction]
    users: dict[str, list[str]]
    frames: dict[int, tuple[Frame, ...]]

    @classmethod
    def parse(cls, text: str) -> Program:
        instructions: dict[str, Instruction] = {}
        users: dict[str, list[str]] = {}
        entry = False
        for line in text.splitlines():
            if line.startswith("ENTRY "):
                entry = True
                continue
            if entry and line.startswith("}"):
                entry = False
                continue
            if not entry:
                continue
            m = _INSTRUCTION.match(line)
            if not m:
                continue
            operands = [o.strip().split()[-1].lstrip("%") for o in m.group("operands").split(",")
                        if o.strip()]
            attrs = m.group("attrs")
            op_name = _OP_NAME.search(attrs)
            frame = _FRAME_ID.search(attrs)
            source = _SOURCE.search(attrs)
            ins = Instruction(
                name=m.group("name"), op=m.group("op"), operands=operands,
                op_name=op_name.group(1) if op_name else "",
                frame_id=int(frame.group(1)) if frame else 0, attrs=attrs,
                source=Frame(source.group(1), "", int(source.group(2))) if source else None)
            instructions[ins.name] = ins
            for o in operands:
                users.setdefault(o, []).append(ins.name)
        return cls(instructions, users, stack_frames(text))

    def stack(self, name: str) -> tuple[Frame, ...]:
        """The Python frames of an instruction, innermost first, as far as
        they are the model's: up to shardviz's own frames, never the line
        that called shardviz (a compile read from the cache may have been
        asked for from elsewhere)."""
        ins = self.instructions.get(name)
        if ins is None:
            return ()
        frames = self.frames[ins.frame_id] if ins.frame_id in self.frames else (
            (ins.source,) if ins.source else ())
        for i, frame in enumerate(frames):
            if _SHARDVIZ.search(frame.file.replace("\\", "/")):
                return frames[:i]
        return frames

    def site(self, name: str, kind: str) -> Instruction | None:
        """The op a collective was made for: the first op that computes with
        its result (for a gather), or the op whose partial sums it finishes
        (for a reduction); copies and bitcasts are walked through."""
        ins = self.instructions.get(name)
        if ins is None:
            return None
        if kind in GATHERING:
            seen, queue = set(), list(self.users.get(name, []))
            while queue:
                user = self.instructions.get(queue.pop(0))
                if user is None or user.name in seen:
                    continue
                seen.add(user.name)
                if _pass_through(user) or user.op.endswith("-done"):
                    queue += self.users.get(user.name, [])
                    continue
                return user
            return None
        current = ins
        for _ in range(16):
            if not current.operands:
                return None
            producer = self.instructions.get(current.operands[0])
            if producer is None:
                return None
            if not _pass_through(producer):
                return producer
            current = producer
        return None

    def inputs_of(self, name: str, parameters: dict[str, str], layer: str | None,
                  layer_of) -> list[tuple[str, str]]:
        """What flows into instruction ``name``: ``("variable", path)`` for a
        parameter that is a variable, ``("input", name)`` for a model input,
        and ``("activation", layer path)`` for the output of another layer.
        Inside ``layer`` itself, and through copies and collectives, the walk
        goes on to the instruction's own operands. ``layer_of(scope)`` maps
        an op's name scope to its layer path."""
        out: list[tuple[str, str]] = []
        seen: set[str] = set()

        def visit(operand: str, depth: int) -> None:
            ins = self.instructions.get(operand)
            if ins is None or operand in seen or depth > 12:
                return
            seen.add(operand)
            if ins.op == "parameter":
                label = ins.op_name
                item = (("variable", parameters[label]) if label in parameters
                        else ("input", label or ins.name))
                if item not in out:
                    out.append(item)
                return
            if ins.op in ("constant", "iota", "partition-id", "replica-id"):
                return
            owner = layer_of(ins.op_name) if ins.op_name else None
            collective = ins.op.replace("-start", "") in (
                "all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
            if owner and owner != layer and not _pass_through(ins) and not collective:
                inside = layer is not None and layer.startswith(owner + "/")
                # A value computed in an enclosing layer's own call (the
                # attention weights inside an attention layer) is no layer's
                # output: name the op.
                item = (("internal", f"{owner}: {ins.op_name.rsplit('/', 1)[-1]}") if inside
                        else ("activation", owner))
                if item not in out:
                    out.append(item)
                return
            for o in ins.operands:
                visit(o, depth + 1)

        site = self.instructions.get(name)
        for o in (site.operands if site else []):
            visit(o, 0)
        return out


def stack_frames(text: str) -> dict[int, tuple[Frame, ...]]:
    """``stack_frame_id`` to its frames, innermost first, from the tables
    (``FileNames``, ``FunctionNames``, ``FileLocations``, ``StackFrames``)
    that XLA prints after a module. Each table counts from 1; a frame's
    ``parent_frame_id`` is printed one higher than the frame it names, so
    that 1 means "none"."""
    tables: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            current = line
            tables[current] = []
            continue
        if current is None:
            continue
        if not line.strip() or not line[0].isdigit():
            current = None
            continue
        tables[current].append(line.split(" ", 1)[1] if " " in line else "")
    if "StackFrames" not in tables:
        return {}
    files = [_unquote(v) for v in tables.get("FileNames", [])]
    functions = [_unquote(v) for v in tables.get("FunctionNames", [])]
    locations = []
    for row in tables.get("FileLocations", []):
        fields = dict(re.findall(r"(\w+)=(-?\d+)", row))
        locations.append(Frame(_pick(files, fields.get("file_name_id")),
                               _pick(functions, fields.get("function_name_id")),
                               int(fields.get("line", 0))))
    parents: dict[int, tuple[int, int]] = {}
    for i, row in enumerate(tables["StackFrames"], start=1):
        numbers = {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", row)}
        parents[i] = (numbers.get("file_location_id", 0), numbers.get("parent_frame_id", 1) - 1)
    out: dict[int, tuple[Frame, ...]] = {}
    for frame_id in parents:
        chain: list[Frame] = []
        at, hops = frame_id, 0
        while at in parents and hops < 256:
            location, parent = parents[at]
            if 0 < location <= len(locations):
                chain.append(locations[location - 1])
            if parent == at:
                break
            at, hops = parent, hops + 1
        out[frame_id] = tuple(chain)
    return out


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    # XLA C-escapes the text: non-ASCII bytes arrive as octal escapes.
    raw = value.encode("latin-1", "backslashreplace").decode("unicode_escape", "replace")
    return raw.encode("latin-1", "replace").decode("utf-8", "replace")


def _pick(values: list[str], index: str | None) -> str:
    i = int(index or 0)
    return values[i - 1] if 0 < i <= len(values) else ""


_SHARDVIZ = re.compile(r"/shardviz/(?!examples\.py)")


def source_frame(frames: tuple[Frame, ...]) -> Frame | None:
    """The innermost frame worth changing: a layer's ``call`` or the user's
    line in the model, past JAX, the Keras backend and shardviz (see
    :data:`_LIBRARY`). Frames outside shardviz's own call of the model (the
    line that called ``analyze``) are never a source: an op traced with no
    model frame (a gradient, an optimizer update) has none."""
    for frame in frames:
        path = frame.file.replace("\\", "/")
        if _SHARDVIZ.search(path):
            return None
        if frame.file and not _LIBRARY.search(path):
            return frame
    return None


def short_file(path: str) -> str:
    """A file path as a person reads it: from the package down for installed
    code (``keras/src/layers/core/dense.py``), whole for the user's own.

    >>> short_file("/x/.venv/lib/python3.11/site-packages/keras/src/layers/core/dense.py")
    'keras/src/layers/core/dense.py'
    >>> short_file("/home/me/model.py")
    '/home/me/model.py'
    """
    for marker in ("site-packages/", "dist-packages/"):
        i = path.rfind(marker)
        if i >= 0:
            return path[i + len(marker):]
    return path
