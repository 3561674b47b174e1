"""One JSON encoder for every command: only base/jsonable.py (the encoder) and cli/output.py (the
sink that writes what it returns) turn a command's result into JSON. A second builder (json.dumps
of a dict assembled on the way, dataclasses.asdict, rich's print_json) grows its own rules, as one
did for non-finite numbers (null in one command, "inf" in another); this scan of the package's
source keeps one from growing back."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "hccli"

ENCODER = ("base/jsonable.py", "cli/output.py")
# json.dumps that writes no command's output, each module with what it writes. Only rooms below the
# command rooms may appear here (see test_only_the_lower_rooms_write_other_json).
OTHER_JSON = {
    "model/config/keys.py": "a config value quoted in an error",
    "checkpoint/safetensors/header_careful.py": "a header value quoted in an error",
    "checkpoint/safetensors/layout.py": "a safetensors header, laid out as the serializer does",
    "checkpoint/verify/placement.py": "the length a header's JSON takes",
    "checkpoint/remote/hub.py": "the cache entry of a hub's file listing",
    "checkpoint/remote/cache.py": "the cache's keys and records",
    "checkpoint/synth.py": "a written checkpoint's index file",
}
LOWER_ROOMS = ("base/", "model/", "names/", "ops/", "checkpoint/")
DUMPS = {("json", "dumps"), ("json", "dump")}
BUILDERS = {("dataclasses", "asdict"), ("dataclasses", "astuple"), ("json", "JSONEncoder")}
ENCODER_NAMES = {("hccli.base.jsonable", "to_jsonable"), ("hccli.cli.output", "to_jsonable")}


def uses(source: str) -> set[tuple[str, str, int]]:
    """(module, name, line) of every json, dataclasses and to_jsonable name the source refers to,
    as `module.name` or imported by name, and of any `print_json` (rich's second JSON writer)."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}  # local name -> module, from `import json as j`, `from hccli.cli import output`
    imported: dict[str, tuple[str, str]] = {}  # local name -> (module, name), from `from json import dumps`
    out: set[tuple[str, str, int]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[(a.asname or a.name).split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                out.add((node.module, a.name, node.lineno))
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                imported[a.asname or a.name] = (node.module, a.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if node.attr == "print_json":
                out.add(("rich", "print_json", node.lineno))
            if isinstance(node.value, ast.Name) and node.value.id in aliases:
                out.add((aliases[node.value.id], node.attr, node.lineno))
        elif isinstance(node, ast.Name):
            if node.id == "print_json":
                out.add(("rich", "print_json", node.lineno))
            elif node.id in imported:
                out.add((*imported[node.id], node.lineno))
    return out


def modules() -> list[str]:
    return sorted(p.relative_to(PKG).as_posix() for p in PKG.rglob("*.py"))


def found(names: set[tuple[str, str]], skip=()) -> list[str]:
    return [f"{m}:{line} {mod}.{name}" for m in modules() if m not in ENCODER and m not in skip
            for mod, name, line in sorted(uses((PKG / m).read_text()), key=lambda u: u[2])
            if (mod, name) in names or (mod, name) == ("rich", "print_json")]


def test_no_second_json_builder():
    assert found(BUILDERS) == []


def test_json_dumps_only_where_it_writes_no_command_output():
    assert found(DUMPS, skip=OTHER_JSON) == []


def test_only_the_lower_rooms_write_other_json():
    # a command room or cli/ listed above would be a builder let in by name
    assert [m for m in OTHER_JSON if not m.startswith(LOWER_ROOMS)] == []
    stale = [m for m in OTHER_JSON if not any((mod, n) in DUMPS for mod, n, _ in uses((PKG / m).read_text()))]
    assert stale == []


def test_only_the_sink_and_the_figures_call_the_encoder():
    # plot/ draws from the JSON values the sink writes (it cannot import cli/, a floor above it)
    assert [f for f in found(ENCODER_NAMES) if not f.startswith("plot/")] == []


def test_the_scan_sees_each_way_of_building_json():
    # diff's old builder, a dict dumped in a command, rich's writer, the encoder called in a renderer
    old_diff = "from dataclasses import asdict\ndef to_json(self):\n    return {**asdict(self), 'ok': self.ok}\n"
    assert ("dataclasses", "asdict", 1) in uses(old_diff) and ("dataclasses", "asdict", 3) in uses(old_diff)
    assert ("json", "dumps", 2) in uses("import json as j\nprint(j.dumps({'a': 1}))\n")
    assert ("dataclasses", "asdict", 2) in uses("import dataclasses\nx = dataclasses.asdict(r)\n")
    assert ("rich", "print_json", 1) in uses("console().print_json(data=doc)\n")
    assert ("hccli.cli.output", "to_jsonable", 1) in uses("from hccli.cli.output import markup, to_jsonable\n")
    assert ("hccli.cli.output", "to_jsonable", 2) in uses("from hccli.cli import output\noutput.to_jsonable(r)\n")
