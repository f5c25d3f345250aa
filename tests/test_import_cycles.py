"""No import cycles in the package, lazy imports (inside functions)
included: each module can be understood from the ones below it. The one
exception is display methods, which import renderers to draw themselves: a
Report's (and ``explain``, to answer ``report.why(i)``), and the composers'
results' (``_repr_html_``, ``__str__``, ...)."""

from __future__ import annotations

import pathlib

from test_structure import MODULES, PACKAGE, report_method_import, shardviz_imports

_allowed = report_method_import


def import_graph(overrides: dict[str, str] | None = None) -> dict[str, set[str]]:
    """``module -> modules it imports`` (lazy imports counted; imports only
    for type checkers not), with ``overrides`` giving some modules' source."""
    overrides = overrides or {}
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        source = overrides.get(name)
        edges = set()
        for target, _line, inside, _names in shardviz_imports(name, path, source,
                                                              skip_type_checking=True):
            target = _module(target)
            if target and target != name and not _allowed(name, target, inside):
                edges.add(target)
        graph[name] = edges
    return graph


def _module(target: str) -> str | None:
    """The module an import names (``shardviz.x.y`` may name ``shardviz.x``'s
    attribute y); None for the facade, which imports lazily by design."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return None if target in ("", "shardviz") else target


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of modules, as a path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(g) for g in found)


def test_the_cycle_check_sees_a_planted_lazy_cycle():
    errors = pathlib.Path(PACKAGE / "errors.py").read_text()
    planted = errors + "\n\ndef _late():\n    from .format import human_bytes\n"
    fmt = pathlib.Path(PACKAGE / "format.py").read_text()
    planted_fmt = fmt + "\n\ndef _later():\n    from .errors import ShardvizError\n"
    found = cycles(import_graph({"shardviz.errors": planted, "shardviz.format": planted_fmt}))
    assert ["shardviz.errors", "shardviz.format"] in found


def test_imports_for_type_checkers_only_are_not_cycles():
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
              "    from .report import Report\n")
    graph = import_graph({"shardviz.errors": source})
    assert "shardviz.report" not in graph["shardviz.errors"]


def package_graph(overrides: dict[str, str] | None = None) -> dict[str, set[str]]:
    """``package -> packages it imports``, every import counted (lazy ones
    and display methods' included; imports for type checkers not). A root
    module (``analysis``) is a package of its own; the facade is left out."""
    def package(module: str) -> str:
        return module.split(".")[1]

    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        if name == "shardviz":
            continue
        source = (overrides or {}).get(name)
        for target, _line, _inside, _names in shardviz_imports(name, path, source,
                                                              skip_type_checking=True):
            target = _module(target)
            if target and package(target) != package(name):
                graph.setdefault(package(name), set()).add(package(target))
    return graph


def test_no_two_packages_import_each_other_even_lazily():
    found = cycles(package_graph())
    assert not found, "packages that import each other, lazily or not:\n" + "\n".join(
        " <-> ".join(g) for g in found)


def test_the_package_check_sees_a_lazy_import_back():
    report = pathlib.Path(PACKAGE / "render" / "text.py").read_text()
    planted = report + "\n\ndef _back():\n    from ..report import schema\n"
    found = cycles(package_graph({"shardviz.render.text": planted}))
    assert any({"render", "report"} <= set(g) for g in found)
