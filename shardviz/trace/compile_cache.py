"""The compile cache: what shardviz reads from a compile, kept on disk, so
that a second analysis of the same program costs its tracing only.

A compile of the same program by the same compiler with the same options
always gives the same figures, so the key is exactly that: the lowered
program's text with its source locations (the layer names and source lines
shardviz shows come from them), the devices it is compiled for (platform,
kind, ids and coordinates, in mesh order), the compiler's options and
flags, and the versions of jax, jaxlib, libtpu, shardviz and this cache's
format;
never the model's name. An entry holds what shardviz reads from a compile,
raw: the optimized HLO text, the module text with its stack frames,
``memory_analysis()``, ``cost_analysis()``, which arguments the program
reads, the layouts of its outputs, the layouts XLA gave each watched layer
output (:func:`~shardviz._adapters.jax.watch_sharding`), and XLA's log; or
the compiler's refusal for memory. Everything shardviz derives from them is
derived again, so a cached analysis is the analysis.

Entries live under ``$XDG_CACHE_HOME/shardviz/compiles`` (``~/.cache`` by
default), at most :data:`DEFAULT_MAX_BYTES` in all (the least recently used
go first). ``SHARDVIZ_CACHE=off`` (or :func:`configure`) turns it off,
``SHARDVIZ_CACHE_DIR`` moves it, ``SHARDVIZ_CACHE_MAX`` bounds it
(``"2GB"``). An entry is written to a file of its own and renamed into
place, so processes that share the folder (pytest's workers, verify's, two
notebooks) read either a whole entry or none; one whose checksum, format or
key does not match is ignored, and the next compile writes it anew. A
folder that cannot be written, or one on a network file system, turns the
cache off for the process, said once.

>>> s = configure(enabled=False)
>>> s.enabled
False
>>> configure(enabled=True, max_bytes="1GB").max_bytes
1000000000
>>> _ = configure(reset=True)
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import sys
import threading
import warnings
import zlib
from pathlib import Path

FORMAT = 2
"""The entries' format: an entry of another format is never read."""

DEFAULT_MAX_BYTES = 2 * 2**30
"""The most bytes the cache keeps on disk unless told otherwise."""

_MAGIC = b"shardviz-compile"
_NETWORK_FILE_SYSTEMS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse.sshfs", "9p", "afs",
                         "ceph", "glusterfs", "lustre", "fuse.gcsfuse", "fuse.s3fs"}


class CacheWarning(UserWarning):
    """The compile cache cannot be used in this process (said once)."""


@dataclasses.dataclass(frozen=True)
class CacheSettings:
    """Where the compile cache is, how large it may grow, and whether it is on."""

    enabled: bool
    directory: Path
    max_bytes: int


_lock = threading.Lock()
_override: dict = {}
_broken: str | None = None
"""Why the cache is off for this process (said once), or None."""


def _default_directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "shardviz"


def settings() -> CacheSettings:
    """The settings in force: :func:`configure`'s, else the environment's,
    else the defaults."""
    from ..plan.bounds import as_bytes

    env = os.environ.get("SHARDVIZ_CACHE", "on").strip().lower()
    enabled = _override.get("enabled", env not in ("0", "off", "false", "no"))
    directory = _override.get("directory") or Path(
        os.environ.get("SHARDVIZ_CACHE_DIR") or _default_directory())
    limit = _override.get("max_bytes")
    if limit is None:
        text = os.environ.get("SHARDVIZ_CACHE_MAX")
        try:
            limit = as_bytes(text, "SHARDVIZ_CACHE_MAX") if text else DEFAULT_MAX_BYTES
        except Exception:  # noqa: BLE001 - a bad variable is said once, and the default kept
            _say_once(f"SHARDVIZ_CACHE_MAX={text!r:.40} is not a size; the compile cache "
                      f"keeps at most {DEFAULT_MAX_BYTES // 2**30} GiB.", off=False)
            limit = DEFAULT_MAX_BYTES
    return CacheSettings(bool(enabled), Path(directory).expanduser(), int(limit))


def configure(*, enabled: bool | None = None, directory: str | os.PathLike | None = None,
              max_bytes: int | str | None = None, reset: bool = False) -> CacheSettings:
    """Turn the compile cache on or off, move it, or bound it, for this
    process (``reset=True`` goes back to the environment's settings).
    Returns the settings now in force."""
    from ..errors import ShardvizError
    from ..plan.bounds import as_bytes

    global _broken
    with _lock:
        if reset:
            _override.clear()
            _broken = None
        if enabled is not None:
            if not isinstance(enabled, bool):
                raise ShardvizError(f"enabled={enabled!r:.40} is not True or False.",
                                    hint="configure(enabled=False) turns the cache off.")
            _override["enabled"] = enabled
        if directory is not None:
            _override["directory"] = Path(directory).expanduser()
            _broken = None
        if max_bytes is not None:
            _override["max_bytes"] = as_bytes(max_bytes, "max_bytes")
    return settings()


def _say_once(message: str, off: bool = True) -> None:
    global _broken
    with _lock:
        if off:
            if _broken is not None:
                return
            _broken = message
    warnings.warn(message, CacheWarning, stacklevel=3)


def _file_system(path: Path) -> str | None:
    """The type of the file system ``path`` is on (Linux), or None."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    best, kind = "", None
    resolved = str(path.resolve())
    for line in mounts:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, parts[2]
    return kind


class Store:
    """The entries on disk: one file per key, written whole and renamed into
    place, read back only when its checksum, format and key agree."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory / "compiles"
        self.max_bytes = max_bytes

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.entry"

    def get(self, key: str) -> dict | None:
        path = self.path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        entry = _decode(data, key)
        if entry is None:
            return None
        try:
            os.utime(path)  # least recently used goes first
        except OSError:
            pass
        return entry

    def put(self, key: str, entry: dict) -> None:
        data = _encode(entry, key)
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = self.directory / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            with open(temporary, "wb") as f:
                f.write(data)
            os.replace(temporary, self.path(key))
        finally:
            if temporary.exists():
                temporary.unlink(missing_ok=True)
        self.evict()

    def entries(self) -> list[tuple[float, int, Path]]:
        out = []
        try:
            with os.scandir(self.directory) as it:
                for e in it:
                    if e.name.endswith(".entry"):
                        try:
                            st = e.stat()
                        except OSError:
                            continue
                        out.append((st.st_mtime, st.st_size, Path(e.path)))
        except OSError:
            return []
        return out

    def evict(self) -> None:
        """Remove the least recently used entries until the cache is under
        its bound."""
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            try:
                path.unlink()
            except OSError:
                continue
            total -= size


def _encode(entry: dict, key: str) -> bytes:
    body = zlib.compress(json.dumps(entry, separators=(",", ":")).encode(), 6)
    header = json.dumps({"format": FORMAT, "key": key, "bytes": len(body),
                         "sha256": hashlib.sha256(body).hexdigest()}).encode()
    return _MAGIC + b"\n" + header + b"\n" + body


def _decode(data: bytes, key: str) -> dict | None:
    """The entry in ``data``, or None for anything but a whole entry of this
    format written for ``key``."""
    try:
        magic, header_bytes, body = data.split(b"\n", 2)
        if magic != _MAGIC:
            return None
        header = json.loads(header_bytes)
        if (header.get("format") != FORMAT or header.get("key") != key
                or header.get("bytes") != len(body)
                or header.get("sha256") != hashlib.sha256(body).hexdigest()):
            return None
        entry = json.loads(zlib.decompress(body))
    except Exception:  # noqa: BLE001 - a damaged entry is a miss, never a crash
        return None
    return entry if isinstance(entry, dict) else None


def store() -> Store | None:
    """The store in force, or None when the cache is off (by a setting, or
    for this process because its folder cannot be used)."""
    s = settings()
    if not s.enabled or _broken is not None:
        return None
    kind = _file_system(s.directory.parent if not s.directory.exists() else s.directory)
    if kind in _NETWORK_FILE_SYSTEMS:
        _say_once(f"shardviz's compile cache is off: {s.directory} is on a network file "
                  f"system ({kind}), which processes cannot share safely. Set "
                  "SHARDVIZ_CACHE_DIR to a local folder to use it.")
        return None
    return Store(s.directory, s.max_bytes)


def unusable(store_: Store, error: OSError) -> None:
    """Turn the cache off for this process after ``error``, said once."""
    _say_once(f"shardviz's compile cache is off for this session: {store_.directory} cannot "
              f"be written ({type(error).__name__}: {error}). Set SHARDVIZ_CACHE_DIR to a "
              "writable folder, or SHARDVIZ_CACHE=off.")


# ------------------------------------------------------------------ keys
_INSPECT = re.compile(r'(custom_call @InspectSharding\([^)]*\)\s*\{[^}]*?backend_config = )'
                      r'"(?:[^"\\]|\\.)*"')
"""The address of a sharding watch's Python callback, which JAX writes into
the program: it differs in every process and says nothing of the program."""


@functools.cache
def versions() -> dict[str, str]:
    """The versions that decide what a compile gives, and shardviz's own
    (with :data:`FORMAT`, which changes whenever an entry holds something
    else)."""
    from importlib import metadata

    out = {}
    for name in ("jax", "jaxlib", "libtpu", "libtpu-nightly", "keras"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    out["python"] = sys.version.split()[0]
    from .. import __version__

    out["shardviz"] = __version__
    return out


def _device(d) -> list:
    return [int(d.id), str(d.platform), str(getattr(d, "device_kind", "")),
            getattr(d, "slice_index", None), list(getattr(d, "coords", ()) or ()),
            getattr(d, "core_on_chip", None)]


_LOC = re.compile(r"^(#loc\d+) = (.*)$", re.MULTILINE)
_LOC_REF = re.compile(r"#loc\d+\b")
_ENTRY = re.compile(r'^loc\("compile_pass"\((#loc\d+)\)\)$')
_CALLSITE = re.compile(r"^loc\(callsite\((#loc\d+) at (#loc\d+)\)\)$")


def program_text(lowered) -> str:
    """The lowered program with its source locations, as far as they are the
    model's (:func:`cut_outer_frames`), without the address of each sharding
    watch's Python callback, which differs in every process and says nothing
    of the program."""
    return cut_outer_frames(_INSPECT.sub(r'\1"watch"', lowered.as_text(debug_info=True)))


def cut_outer_frames(text: str) -> str:
    """A lowered program's text without the frames outside shardviz's own
    call of the model (the line that called ``analyze``, ``fit`` or
    ``suggest``), so that the same program asked for from two places has one
    key. shardviz never shows those frames
    (:func:`~shardviz.trace.sources.source_frame` stops before them).

    >>> print(cut_outer_frames(chr(10).join([
    ...     '%0 = stablehlo.add %a, %b loc(#loc4)',
    ...     '#loc1 = loc("/x/shardviz/trace/compile.py":226:22)',
    ...     '#loc2 = loc("/home/me/notebook.py":19:9)',
    ...     '#loc3 = loc("compile_pass"(#loc1))',
    ...     '#loc4 = loc(callsite(#loc3 at #loc2))'])))
    %0 = stablehlo.add %a, %b loc(#loc4)
    #loc1 = loc("/x/shardviz/trace/compile.py":226:22)
    #loc3 = loc("compile_pass"(#loc1))
    #loc4 = loc(#loc3)
    """
    definitions = {m.group(1): m.group(2) for m in _LOC.finditer(text)}
    entries = {name for name, d in definitions.items() if _ENTRY.match(d)}
    for name, d in definitions.items():
        m = _CALLSITE.match(d)
        if m and m.group(1) in entries:
            definitions[name] = f"loc({m.group(1)})"
    reachable: set[str] = set()
    todo = set(_LOC_REF.findall(_LOC.sub("", text)))
    while todo:
        name = todo.pop()
        if name in reachable or name not in definitions:
            continue
        reachable.add(name)
        todo.update(_LOC_REF.findall(definitions[name]))
    lines = []
    for line in text.splitlines():
        m = _LOC.match(line)
        if m is None:
            lines.append(line)
        elif m.group(1) in reachable:
            lines.append(f"{m.group(1)} = {definitions[m.group(1)]}")
    return "\n".join(lines)


def program_key(lowered, meshes, options) -> str:
    """The key of a compile: the program with its source locations
    (:func:`program_text`), the devices of each mesh it is laid out on, the
    options and the versions."""
    text = program_text(lowered)
    parts = {
        "format": FORMAT,
        "versions": versions(),
        "flags": {k: os.environ.get(k) for k in ("XLA_FLAGS", "LIBTPU_INIT_ARGS")},
        "options": options or {},
        "meshes": [[list(m.axis_names), list(m.devices.shape), [_device(d) for d in m.devices.flat]]
                   for m in meshes],
        "program": hashlib.sha256(text.encode()).hexdigest(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()

