"""docs/ARCHITECTURE.md stays true to the code: its tree lists every module of
the package, each once, and nothing that is gone; at most eight modules sit at
the root; no source file is over 500 lines."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "shardviz"
MAX_LINES = 500
MAX_ROOT_MODULES = 8


def listed_modules(text: str) -> list[str]:
    """The module paths in the fenced block under "## The tree", read from the
    indentation (two spaces a level)."""
    section = text.split("## The tree", 1)[1]
    block = section.split("```", 2)[1]
    parents: list[str] = []
    out = []
    for line in block.splitlines():
        m = re.match(r"( *)(\S+)", line)
        if not m:
            continue
        depth, name = len(m.group(1)) // 2, m.group(2)
        parents = parents[:depth]
        if name.endswith("/"):
            parents.append(name.rstrip("/"))
        elif name.endswith(".py"):
            out.append("/".join(parents + [name]))
    return out


def package_modules() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py"))


def test_the_tree_lists_every_module_once():
    listed = listed_modules((ROOT / "docs" / "ARCHITECTURE.md").read_text())
    assert len(listed) == len(set(listed)), "a module is listed twice"
    actual = package_modules()
    missing = sorted(set(actual) - set(listed))
    gone = sorted(set(listed) - set(actual))
    assert not missing and not gone, (
        f"docs/ARCHITECTURE.md's tree lacks {missing} and lists {gone}, which is gone; "
        "give each module one line there")


def test_the_tree_check_sees_a_missing_and_a_stale_module():
    text = "## The tree\n```\nshardviz/\n  a.py   x\n  pkg/\n    b.py  y\n  c.py\n```\n"
    assert listed_modules(text) == ["shardviz/a.py", "shardviz/pkg/b.py", "shardviz/c.py"]


def test_few_modules_at_the_root_and_none_too_long():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules at the root: {root}"
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by topic (at most {MAX_LINES} lines each): {long}"


def private_names_crossing(source: str, module: str, path: pathlib.Path) -> list[str]:
    """``name (line)`` for each private name (one leading underscore) that
    ``module`` imports from another shardviz module, or reads as an attribute
    of a shardviz module it imported: what is shared gets a public name."""
    import ast

    from test_structure import shardviz_imports

    out = [f"{target}.{name} (line {line})"
           for target, line, _inside, names in shardviz_imports(module, path, source)
           for name in names if name.startswith("_") and not name.startswith("__")]
    tree = ast.parse(source)
    modules = {alias.asname or alias.name for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "")
                                                        .startswith("shardviz"))
               for alias in node.names}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in modules and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            out.append(f"{node.value.id}.{node.attr} (line {node.lineno})")
    return out


def test_no_private_name_crosses_a_module_border():
    from test_structure import MODULES

    found = {name: crossing for name, path in MODULES.items()
             if (crossing := private_names_crossing(path.read_text(), name, path))}
    assert not found, f"private names used across modules (give them public names): {found}"


def test_the_private_name_check_sees_an_import_and_an_attribute():
    from test_structure import MODULES

    name = "shardviz.explain.why"
    source = ("from .rows import _secret\nfrom .. import devices\n"
              "def f():\n    return devices._quiet()\n")
    found = private_names_crossing(source, name, MODULES[name])
    assert found == ["shardviz.explain.rows._secret (line 1)", "devices._quiet (line 4)"]
