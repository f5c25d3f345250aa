"""Model builders named by text: ``module.path:name`` or ``path/to/file.py:name``
(a keras-hub preset, ``hub:gemma2_2b_en``, is :mod:`shardviz.hub.presets`'s).

The command line names builders this way, and ``shardviz verify`` hands the
name to its worker processes, which load the same builder with
:func:`load_builder`. :func:`builder_ref` gives the name that another
process, started in the same working directory, loads the same function by.

>>> load_builder("shardviz.examples:mlp").__name__
'mlp'
>>> builder_ref(load_builder("shardviz.examples:mlp"))
'shardviz.examples:mlp'
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

from ..devices import quiet_start_up
from ..errors import ShardvizError

FILE_MODULE = "_shardviz_builder"
"""The module name a builder file is loaded under."""


class BuilderError(ShardvizError):
    """A builder that cannot be named, found or imported."""


def _split(target: str) -> tuple[str, str]:
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise BuilderError(
            f"{target!r} is not MODULE_OR_FILE:BUILDER (e.g. mypkg.models:build or "
            "models.py:build) nor hub:PRESET",
            hint="Name the module or file, a colon, then the function; or hub: and a keras-hub "
            "preset (hub:gemma2_2b_en).")
    return module_name, attr


def _is_file(module_name: str) -> bool:
    return module_name.endswith(".py") or os.sep in module_name


def _add_path(entry: str) -> None:
    if entry not in sys.path:
        sys.path.insert(0, entry)


def load_builder(target: str):
    """``module.path:name`` or ``path/to/file.py:name`` to the object named.

    A file is loaded as a module of its own, with its folder put on
    ``sys.path``; a module is imported with the working directory on
    ``sys.path``. Raises :class:`BuilderError`, naming the target.
    (``hub:NAME``, a keras-hub preset, is :func:`shardviz.hub.presets.model_of`'s.)
    """
    module_name, attr = _split(target)
    with quiet_start_up():
        module = _import(module_name)
    if not hasattr(module, attr):
        raise BuilderError(f"{module_name!r} has no {attr!r}",
                           hint=f"Name a function defined in {module_name!r}.")
    return getattr(module, attr)


_FILES: dict[str, tuple[int, object]] = {}
"""The module loaded from each builder file, with the file's time of change."""


def _import(module_name: str):
    try:
        if _is_file(module_name):
            if not os.path.isfile(module_name):
                raise BuilderError(
                    f"no such file {module_name!r}",
                    hint=f"A relative path is taken from the working directory {os.getcwd()!r}.")
            # One module per file as it stands: a builder and a map class named from the
            # same file (models.py:build, models.py:Map) share its classes, and an edit
            # of the file is loaded afresh.
            path = os.path.abspath(module_name)
            stamp = os.stat(path).st_mtime_ns
            if path in _FILES and _FILES[path][0] == stamp:
                return _FILES[path][1]
            spec = importlib.util.spec_from_file_location(FILE_MODULE, module_name)
            if spec is None or spec.loader is None:
                raise BuilderError(f"{module_name!r} cannot be imported as Python",
                                   hint="Name a .py file.")
            module = importlib.util.module_from_spec(spec)
            _add_path(os.path.dirname(path))
            spec.loader.exec_module(module)
            _FILES[path] = (stamp, module)
        else:
            _add_path(os.getcwd())
            module = importlib.import_module(module_name)
    except BuilderError:
        raise
    except ModuleNotFoundError as e:
        raise BuilderError(f"cannot import {module_name!r}: {e}",
                           hint="Check the name, and that its package is installed or its "
                           "folder is the working directory or on PYTHONPATH.") from None
    except SystemExit as e:
        raise BuilderError(f"importing {module_name!r} called sys.exit({e.code!r})",
                           hint="Keep the module's import free of sys.exit (put the script "
                           "part under `if __name__ == '__main__':`).") from None
    except Exception as e:
        raise BuilderError(f"importing {module_name!r} raised {type(e).__name__}: {e}",
                           hint="Fix the module: importing it must succeed.") from None
    return module


def builder_ref(builder: object) -> str:
    """A name :func:`load_builder` loads ``builder`` by in another process
    started in this working directory: a file path made absolute, or
    ``module:qualname`` for a function (its module's file for one loaded
    from a file).

    Raises :class:`BuilderError` for a function no module holds (defined in
    ``__main__``, a notebook or inside another function).
    """
    ref = getattr(builder, "shardviz_ref", None)
    if isinstance(ref, str):  # a keras-hub preset's builder: hub:NAME
        return ref
    if isinstance(builder, str):
        if builder.startswith("hub:"):  # a keras-hub preset, named as every process names it
            return builder
        module_name, attr = _split(builder)
        if _is_file(module_name):
            return f"{os.path.abspath(module_name)}:{attr}"
        return builder
    owner = getattr(builder, "__module__", None)
    name = getattr(builder, "__qualname__", "")
    if not owner or owner == "__main__" or "<" in name:
        raise BuilderError(
            f"verify() needs a builder the worker processes can import, and {name or builder!r}"
            " cannot be imported from a module: it is defined in a notebook, a script or "
            "inside a function.",
            hint="Put the builder in a module and pass 'module:function' (or the function "
            "imported from it).")
    if owner == FILE_MODULE:  # loaded from a file, never put in sys.modules
        path = getattr(builder, "__globals__", {}).get("__file__")
        if path:
            return f"{os.path.abspath(path)}:{name}"
    return f"{owner}:{name}"
