"""Names across the package (ast scans of hccli/): one class per name, so that a reader, a traceback
or an import never leaves in doubt which of two rows is meant; and no module imports another's
private name (a name shared across modules is public where it lives)."""

import ast
from collections import defaultdict
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "hccli"


def _trees():
    for p in sorted(PKG.rglob("*.py")):
        yield p.relative_to(PKG.parent).as_posix(), ast.parse(p.read_text())


def classes_defined_twice(trees) -> dict[str, list[str]]:
    where = defaultdict(list)
    for rel, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(rel)
    return {name: mods for name, mods in sorted(where.items()) if len(mods) > 1}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))  # __version__ is public


def private_imports(trees) -> list[str]:
    out = []
    for rel, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and (node.level or node.module.startswith("hccli")):
                out += [f"{rel}:{node.lineno} imports {a.name} from {node.module}" for a in node.names
                        if _private(a.name)]
            elif isinstance(node, ast.Import):
                out += [f"{rel}:{node.lineno} imports {a.name}" for a in node.names
                        if a.name.startswith("hccli") and any(map(_private, a.name.split(".")))]
    return out


def test_no_two_modules_define_a_class_of_one_name():
    assert classes_defined_twice(_trees()) == {}


def test_no_module_imports_a_private_name_of_another():
    assert private_imports(_trees()) == []


def _parsed(**modules):
    return [(rel, ast.parse(text)) for rel, text in modules.items()]


def test_the_scans_see_what_they_look_for():
    twice = _parsed(a="class Row:\n    pass\n", b="def f():\n    class Row: ...\n", c="class Other: ...\n")
    assert classes_defined_twice(twice) == {"Row": ["a", "b"]}
    leaks = _parsed(a="from hccli.x import _y, z\n", b="def f():\n    from .x import _w\n",
                    c="import hccli._p.q\nfrom os import _exit\nfrom hccli.x import __version__\n")
    assert private_imports(leaks) == ["a:1 imports _y from hccli.x", "b:2 imports _w from x",
                                      "c:1 imports hccli._p.q"]
