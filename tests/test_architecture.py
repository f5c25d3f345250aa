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
