"""docs/ARCHITECTURE.md's module table, bottom up, is the import order: every module of hccli/ has
its row, and no module imports (at its top or inside a function) one of a later row."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "hccli"


def table() -> list[list[str]]:
    """The names in each row's first cell, in order."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    return [re.findall(r"`([^`]+)`", line.split("|")[1]) for line in text.splitlines() if line.startswith("| `")]


def row_of(rows: list[list[str]], rel: str) -> int | None:
    for i, names in enumerate(rows):
        if rel in names:
            return i
    for pattern in ("plot/", "cli/render/", "cli/commands/"):
        test = rel.startswith(pattern)
        if test:
            return next((i for i, names in enumerate(rows) if pattern in names), None)
    return None


def modules() -> list[str]:
    return sorted(p.relative_to(PKG).as_posix() for p in PKG.rglob("*.py")
                  if p.name not in ("__init__.py", "__main__.py"))


def imported(rel: str) -> set[tuple[str, int]]:
    """(module file, line) of every hccli module this one imports, anywhere in it."""
    out = set()
    for node in ast.walk(ast.parse((PKG / rel).read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hccli"):
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("hccli")]
        else:
            continue
        for name in names:
            path = name.removeprefix("hccli").lstrip(".").replace(".", "/")
            if (PKG / f"{path}.py").is_file():
                out.add((f"{path}.py", node.lineno))
    return out


def test_every_module_has_one_row():
    rows = table()
    names = [n for row in rows for n in row]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert [m for m in modules() if row_of(rows, m) is None] == []
    listed = [n for n in names if n.endswith(".py")]
    assert [n for n in listed if not (PKG / n).is_file()] == []  # no row for a module that is gone


def test_no_module_imports_one_of_a_later_row():
    rows = table()
    upward = [f"{m}:{line} imports {t}" for m in modules() for t, line in sorted(imported(m))
              if row_of(rows, t) > row_of(rows, m)]
    assert upward == []


def test_the_check_sees_an_upward_import():
    rows = table()
    # cli/app.py imports cli/output.py, a row above it: the reverse would be caught
    assert any(t == "cli/output.py" for t, _ in imported("cli/app.py"))
    assert row_of(rows, "cli/output.py") < row_of(rows, "cli/app.py")
    assert row_of(rows, "cli/commands/run_site.py") > row_of(rows, "runsite/run.py") > row_of(rows, "kernels/site_fused.py")


def test_the_root_holds_only_the_package_entry():
    # every other module lives in a room of its own (docs/ARCHITECTURE.md's floors)
    assert sorted(p.name for p in PKG.glob("*.py")) == ["__init__.py", "__main__.py"]
