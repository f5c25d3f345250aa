"""The shape of the package, enforced: imports point down the layers, and
every private Keras or JAX API is reached only from ``shardviz/_adapters/``.

Layers, lowest first (docs/ARCHITECTURE.md), each a package you see in ``ls``:

0. base: ``errors``, ``format``, ``matching/`` (rule matching, which imports nothing else)
1. adapters: ``_adapters/*`` (every private Keras and JAX use)
2. values: ``plan/``, ``model/``, ``layout/``, ``target/``, ``checks/``,
   ``devices``, ``examples``, ``hub/`` (keras-hub's configurations and presets as models)
3. trace: ``trace/*``
4. assembly: ``analysis``, ``report/``
5. composers: ``strategy/``, ``explain/``, ``planner/``, ``diagnosis/`` (they read Reports
   and ask ``analyze`` again)
6. render: ``render/*``
7. outer: ``widgets/*``, ``cli/``, ``__main__``, ``multihost/``

A module imports only from its own layer or below. The Report may import a
renderer lazily, inside a method (its display methods), never at the top; so
may a composer's result class (a FitAnswer, a Candidate, an Audit, an
Explanation), inside its display methods only.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "shardviz"

BASE = {"errors", "format", "matching"}
VALUES = {"plan", "model", "layout", "target", "checks", "devices", "examples", "match", "hub"}
ASSEMBLY = {"analysis", "report"}
COMPOSERS = {"strategy", "explain", "planner", "diagnosis"}
OUTER = {"widgets", "cli", "__main__", "multihost"}
LAYERS = [BASE, {"_adapters"}, VALUES, {"trace"}, ASSEMBLY, COMPOSERS, {"render"}, OUTER]
OUTERMOST = 7


def layer_of(module: str) -> int | None:
    """The layer of ``shardviz.x.y``; None for the facade."""
    parts = module.split(".")[1:]
    if not parts or parts == ["__init__"]:
        return None
    for number, layer in enumerate(LAYERS):
        if parts[0] in layer:
            return number
    raise AssertionError(f"{module} is in no layer; add it to tests/test_structure.py and "
                         "docs/ARCHITECTURE.md")


def modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__")] = path
    return out


MODULES = modules()


def _package_of(module: str, path: pathlib.Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def shardviz_imports(module: str, path: pathlib.Path, source: str | None = None,
                     skip_type_checking: bool = False):
    """``(imported module, line, inside, names)`` for every import of a
    shardviz module in ``module``, ``inside`` the name of the innermost
    function around it ("" at the module's top) (with
    ``skip_type_checking``, not those under ``if TYPE_CHECKING:``, which
    never run)."""
    tree = ast.parse(source if source is not None else path.read_text())
    functions: dict[int, str] = {}
    typing_only = set()
    for node in ast.walk(tree):  # breadth first: an inner function's name comes last
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.update((id(n), node.name) for n in ast.walk(node) if n is not node)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for n in ast.walk(node) if n is not node)
    found = []
    for node in ast.walk(tree):
        if skip_type_checking and id(node) in typing_only:
            continue
        inside = functions.get(id(node), "")
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "shardviz" or alias.name.startswith("shardviz."):
                    found.append((alias.name, node.lineno, inside, ()))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(module, path)
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                target = f"{base}.{node.module}" if node.module else base
            elif node.module and (node.module == "shardviz"
                                  or node.module.startswith("shardviz.")):
                target = node.module
            else:
                continue
            names = tuple(a.name for a in node.names)
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
            if subs:
                found += [(s, node.lineno, inside, ()) for s in subs]
            else:
                found.append((target, node.lineno, inside, names))
    return found


DISPLAY_METHODS = {"_repr_html_", "__str__", "_repr_pretty_", "__rich_console__",
                   "text_block"}
"""The methods a result draws itself with (``text_block``: an Explanation's
text at a width)."""


def report_method_import(module: str, target: str, inside: str) -> bool:
    """The allowed upward imports, never at a module's top: a Report's
    methods hand the Report to what reads it, renderers to draw itself
    (``show``, ``_repr_html_``) and ``explain`` for ``report.why(i)``; a
    composer's result (layer 5) draws itself with a renderer, in its display
    methods only."""
    if not inside:
        return False
    if module == "shardviz.report" or module.startswith("shardviz.report."):
        return target.startswith(("shardviz.render.", "shardviz.explain"))
    return (layer_of(module) == LAYERS.index(COMPOSERS) and inside in DISPLAY_METHODS
            and target.startswith("shardviz.render."))


def layering_violations(module: str, path: pathlib.Path, source: str | None = None):
    mine = layer_of(module)
    if mine is None:
        return []
    out = []
    for target, line, inside, names in shardviz_imports(module, path, source):
        theirs = layer_of(target)
        if theirs is None:
            if names == ("__version__",) or mine == OUTERMOST:
                continue  # the version string, or the facade from the outer layer
            out.append(f"{module}:{line} imports the shardviz facade ({names})")
            continue
        if theirs <= mine:
            continue
        if report_method_import(module, target, inside):
            continue
        out.append(f"{module}:{line} (layer {mine}) imports {target} (layer {theirs})")
    return out


def test_imports_point_down_the_layers():
    problems = [v for name, path in MODULES.items() for v in layering_violations(name, path)]
    assert not problems, "\n".join(problems)


def test_the_layering_check_sees_a_wrong_import():
    bad = "from ..render.html import report_html\n"
    assert layering_violations("shardviz.trace.forward", PACKAGE / "trace" / "forward.py", bad)
    top = "from ..render.text import report_text\n"
    assert layering_violations("shardviz.report", PACKAGE / "report" / "__init__.py", top)
    lazy = "def show(self):\n    from ..render.text import report_text\n"
    assert not layering_violations("shardviz.report", PACKAGE / "report" / "__init__.py", lazy)
    lazy = "def show(self):\n    from .render.text import report_text\n"
    assert layering_violations("shardviz.analysis", PACKAGE / "analysis.py", lazy)
    shown = "def _repr_html_(self):\n    from ..render.fit_view import html\n"
    assert not layering_violations("shardviz.planner.fit_answer",
                                   PACKAGE / "planner" / "fit_answer.py", shown)
    assert layering_violations("shardviz.planner.fit_answer", PACKAGE / "planner" / "fit_answer.py",
                               shown.replace("_repr_html_", "best"))
    assert layering_violations("shardviz.planner.fit_answer", PACKAGE / "planner" / "fit_answer.py",
                               "from ..render.fit_view import html\n")
    assert layering_violations("shardviz.planner.fit_answer", PACKAGE / "planner" / "fit_answer.py",
                               shown.replace("render.fit_view", "widgets.tabs.fit"))
    upward = "from ..explain import Explanation\n"
    assert layering_violations("shardviz.planner", PACKAGE / "planner" / "__init__.py", "")  == []
    assert layering_violations("shardviz.matching.match", PACKAGE / "matching" / "match.py", upward)


# ----------------------------------------------------------- private APIs
PRIVATE_MODULES = ("keras.src", "jax._src", "jaxlib.")


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def own_private_names() -> set[str]:
    """Every private name shardviz itself defines: functions, classes,
    attributes it assigns, slots, fields."""
    names = set()
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.rpartition(".")[2])
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id == "setattr" and len(node.args) >= 2
                  and isinstance(node.args[1], ast.Constant)):
                names.add(node.args[1].value)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value.startswith("_"):
                pass
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
                for elt in getattr(node.value, "elts", []):
                    if isinstance(elt, ast.Constant):
                        names.add(elt.value)
    return {n for n in names if isinstance(n, str) and _is_private(n)}


OWN = own_private_names()


def private_uses(source: str, own: set[str] = OWN) -> list[str]:
    """Every private Keras or JAX access in ``source``: an import from
    ``keras.src`` or ``jax._src``, or ``obj._name`` (``getattr(obj, "_name")``)
    for a private name shardviz does not define itself."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [f"{node.lineno}: import {a.name}" for a in node.names
                    if a.name.startswith(PRIVATE_MODULES)]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.startswith(PRIVATE_MODULES):
                out.append(f"{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Attribute) and _is_private(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr not in own:
                out.append(f"{node.lineno}: .{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and _is_private(node.args[1].value)
              and node.args[1].value not in own):
            out.append(f"{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and node.value.startswith(("keras.src", "jax._src"))):
            out.append(f"{node.lineno}: {node.value!r}")
    return out


@pytest.mark.parametrize("module", [m for m in MODULES if not m.startswith("shardviz._adapters")])
def test_private_keras_and_jax_apis_only_in_adapters(module):
    uses = private_uses(MODULES[module].read_text())
    assert not uses, (f"{module} reaches a private Keras or JAX API; move it into "
                      f"shardviz/_adapters/ with its reason: {uses}")


def test_the_private_api_check_sees_a_leak():
    assert private_uses("from keras.src.models import functional\n")
    assert private_uses("import jax._src.xla_bridge\n")
    assert private_uses("value = variable._initializer\n")
    assert private_uses("getattr(model, '_build_shapes_dict', None)\n")
    assert not private_uses("self._plan = plan\nreport.variables\n")


def test_every_adapter_function_says_why():
    """Each public function of an adapter module has a docstring; those that
    touch a private API name the public API they wait for."""
    for name, path in MODULES.items():
        if not name.startswith("shardviz._adapters."):
            continue
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node) or ""
            assert doc, f"{name}.{node.name} has no docstring"
            body = ast.unparse(node)
            if private_uses(body, own=set()) and "Wait" not in doc:
                pytest.fail(f"{name}.{node.name} uses a private API but does not say which "
                            "public API it waits for ('Waits for ...')")
