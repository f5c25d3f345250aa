"""The compiler's own buffer assignment, read from the dump XLA writes for
one compile: every buffer live at the program's peak, with its bytes, and
each buffer's live range over the scheduled program.

A compile asked for a dump (:func:`dump_options`, into a directory of its
own) writes, for its module, ``*-live-range.txt`` ("Live ranges at N
(peak)", the live range of every buffer, and the peak's total) and
``*-buffer-assignment.txt`` (each value's size, shape and allocation, where
an entry parameter says which argument it holds). The TPU compiler writes
them for a program it refuses for memory too. :func:`read_dump` turns them
into a :class:`BufferPeak`, plain data that the compile cache keeps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import tempfile
from collections.abc import Iterator

_PEAK = re.compile(r"^\s*Live ranges at (\d+) \(peak\):\s*$")
_LIVE = re.compile(r"^\s*(\S+): (\d+) bytes \(cumulative: \d+ bytes\)\s*$")
_TOTAL = re.compile(r"^\s*Stack trace breakdown for peak usage: ([\d ]+) bytes")
_MAX = re.compile(r"^HloLiveRange \(max (\d+)\):")
_RANGE = re.compile(r"^\s*(\S+):(\d+)-(\d+)\s*$")
_ALLOCATION = re.compile(r"^allocation \d+: size \d+(?:, (?P<what>[^,:]+))?")
_PARAMETER = re.compile(r"^parameter (\d+)$")
_VALUE = re.compile(r"^ value: <\d+ (?P<name>\S+)(?: \((?:phi)\))? @\d+> "
                    r"\(size=(?P<size>\d+),offset=\d+\): (?P<shape>.*)$")
"""One value of an allocation; a loop's carried value is marked ``(phi)``."""


@dataclasses.dataclass
class BufferPeak:
    """What the compiler's buffer assignment says about one program.

    ``live`` lists the buffers live at the peak, ``(value, bytes)``, as the
    dump lists them (largest first); ``total`` is the dump's own figure for
    the peak, which they add up to. ``values`` gives each value's shape (with
    XLA's layout) and, for an entry parameter, its number; ``ranges`` each
    value's live range (first and last position in the schedule, of
    ``length``).
    """

    position: int
    length: int
    total: int
    live: list[tuple[str, int]]
    values: dict[str, tuple[str, int | None, int]]
    """value -> (shape, entry parameter number or None, bytes)"""
    ranges: dict[str, tuple[int, int]]
    ops: dict[str, tuple[str, str, str]] = dataclasses.field(default_factory=dict)
    """instruction -> (HLO op, ``op_name``, first operand), from the dumped program"""

    def as_data(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_data(cls, data: dict) -> BufferPeak:
        return cls(position=int(data["position"]), length=int(data["length"]),
                   total=int(data["total"]), live=[(str(n), int(b)) for n, b in data["live"]],
                   values={str(k): (str(v[0]), None if v[1] is None else int(v[1]), int(v[2]))
                           for k, v in data["values"].items()},
                   ranges={str(k): (int(v[0]), int(v[1])) for k, v in data["ranges"].items()},
                   ops={str(k): (str(v[0]), str(v[1]), str(v[2]))
                        for k, v in data.get("ops", {}).items()})


class DumpUnavailable(Exception):
    """The compile wrote no buffer assignment that this reader understands;
    the message says why."""


def dump_options(directory: str) -> dict:
    """The compiler options that make one compile dump its buffer assignment
    into ``directory``."""
    return {"xla_dump_to": directory, "xla_dump_hlo_as_text": True}


@contextlib.contextmanager
def dump_directory() -> Iterator[str | None]:
    """A fresh directory for one compile's dump, removed afterwards, on error
    or interrupt too; None where no temporary directory can be made (a full
    or read-only disk: the compile then runs without a dump)."""
    try:
        directory = tempfile.mkdtemp(prefix="shardviz-dump-")
    except OSError:
        yield None
        return
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _value_name(name: str) -> str:
    """A value as the live-range file names it: ``param.1`` -> ``param.1{}``."""
    return name if name.endswith("}") else name + "{}"


def _module_files(directory: str, suffix: str) -> list[str]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(os.path.join(directory, n) for n in names if n.endswith(suffix))


def _main_module(paths: list[str], function: str | None) -> str | None:
    """The file of the jitted program's module: named after its function
    where one is, else the largest (the backend may dump small helpers)."""
    if not paths:
        return None
    named = [p for p in paths if function and f".jit_{function}." in os.path.basename(p)]
    pool = named or paths
    return max(pool, key=lambda p: os.path.getsize(p))


def read_dump(directory: str, function: str | None = None) -> BufferPeak:
    """The :class:`BufferPeak` of the module of ``function`` (a jitted
    function's name) dumped in ``directory``. Raises :class:`DumpUnavailable`
    saying why when there is none, or it is in another format."""
    live_file = _main_module(_module_files(directory, "-live-range.txt"), function)
    if live_file is None:
        raise DumpUnavailable("the compiler wrote no live-range file")
    assignment = live_file.replace("-live-range.txt", "-buffer-assignment.txt")
    if not os.path.exists(assignment):
        raise DumpUnavailable("the compiler wrote no buffer-assignment file")
    program = live_file.replace("-live-range.txt", ".txt")
    try:
        peak = _read_live_ranges(live_file)
        peak.values = _read_values(assignment)
        if os.path.exists(program):
            peak.ops = _read_ops(program)
    except OSError as e:
        raise DumpUnavailable(f"the dump cannot be read: {e.strerror or e}") from None
    missing = [n for n, _ in peak.live if n not in peak.values]
    if missing:
        raise DumpUnavailable(f"the live buffer {missing[0]} is not in the buffer assignment "
                              "(another format)")
    if sum(b for _, b in peak.live) != peak.total:
        raise DumpUnavailable("the live buffers do not add up to the stated peak "
                              "(another format)")
    return peak


def read_or_why(directory: str, function: str | None = None) -> BufferPeak | str:
    """:func:`read_dump`, or why it gave nothing (never raises)."""
    try:
        return read_dump(directory, function)
    except DumpUnavailable as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - a dump this reader does not know is no error
        return f"the dump could not be read ({type(e).__name__}: {e})"


def to_entry(peak: BufferPeak | str | None) -> dict | str | None:
    """A compile cache entry's form of a :class:`BufferPeak` (or the reason)."""
    return peak.as_data() if isinstance(peak, BufferPeak) else peak


def from_entry(data: object) -> BufferPeak | str:
    """The :class:`BufferPeak` a cache entry keeps, or why there is none."""
    if isinstance(data, dict):
        try:
            return BufferPeak.from_data(data)
        except (KeyError, TypeError, ValueError):
            return "the compile cache's entry holds another form of the buffer assignment"
    return data if isinstance(data, str) else "the compile was not asked for a dump"


def _read_live_ranges(path: str) -> BufferPeak:
    length = position = total = None
    live: list[tuple[str, int]] = []
    ranges: dict[str, tuple[int, int]] = {}
    section = ""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if length is None:
                m = _MAX.match(line)
                if m:
                    length = int(m.group(1)) + 1
                continue
            stripped = line.strip()
            if stripped in ("InstructionSequence:", "BufferLiveRange:"):
                section = stripped
                continue
            m = _PEAK.match(line)
            if m:
                position, section = int(m.group(1)), "peak"
                continue
            m = _TOTAL.match(line)
            if m:
                total = int(m.group(1).replace(" ", ""))
                break
            if section == "BufferLiveRange:":
                r = _RANGE.match(line)
                if r:
                    ranges[r.group(1)] = (int(r.group(2)), int(r.group(3)))
            elif section == "peak":
                v = _LIVE.match(line)
                if v:
                    live.append((v.group(1), int(v.group(2))))
    if length is None or position is None or total is None:
        raise DumpUnavailable("the live-range file has no peak (another format)")
    return BufferPeak(position, length, total, live, {}, ranges)


def _read_ops(path: str) -> dict[str, tuple[str, str, str]]:
    from .sources import Program

    with open(path, encoding="utf-8", errors="replace") as f:
        program = Program.parse(f.read())
    return {name: (ins.op, ins.op_name, ins.operands[0] if ins.operands else "")
            for name, ins in program.instructions.items()}


def _read_values(path: str) -> dict[str, tuple[str, int | None, int]]:
    values: dict[str, tuple[str, int | None, int]] = {}
    parameter: int | None = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("allocation "):
                m = _ALLOCATION.match(line)
                what = (m.group("what") or "") if m else ""
                p = _PARAMETER.match(what.strip())
                parameter = int(p.group(1)) if p else None
                continue
            if line.startswith(" value: "):
                v = _VALUE.match(line.rstrip("\n"))
                if v:
                    name = _value_name(v.group("name"))
                    values.setdefault(name, (v.group("shape"), parameter, int(v.group("size"))))
            elif not line.startswith((" ", "allocation")) and values:
                break  # the assignment's allocations end; statistics follow
    return values
