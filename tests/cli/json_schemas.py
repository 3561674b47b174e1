"""The JSON Schemas of docs/schemas/, written from the result objects' own types.

Every `--json` document is one envelope (cli/output.py json_document) and a command's result
object (a frozen dataclass of its core room) encoded by base/jsonable.py; so a field's JSON type
follows from its annotation, and the schema is written from the annotations: it cannot drift from
the code unnoticed (tests/cli/test_json_schema.py checks the committed files are what this writes,
and validates every command's documents against them). A change that renames or removes a field
shows as a removal in docs/schemas/ in review: the stability promise (docs/json.md)
forbids it within one schema_version.

    python tests/cli/json_schemas.py     # rewrite docs/schemas/ after a field is added
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import os
import sys
import types
import typing
from pathlib import Path, PurePath
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "schemas"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
ENVELOPE = "envelope.schema.json"

# command -> (module, class) of each result object its --json writes, and what they are
COMMANDS: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "count-params": ("HC parameter counts of a config (--model: the whole model).",
                     (("hccli.counting.report", "CountReport"),)),
    "inspect": ("What a checkpoint holds; with --verify its findings judged.",
                (("hccli.inspecting.doc", "InspectDocument"),)),
    "make-checkpoint": ("The checkpoint written.", (("hccli.checkpoint.synth", "WrittenCheckpoint"),)),
    "diff": ("Two checkpoints' hyper-connections compared.", (("hccli.diffing.diff", "DiffReport"),)),
    "run-site": ("The HC site run over a model's layers, or (--compare) golden vectors re-run.",
                 (("hccli.runsite.run", "SiteRunReport"), ("hccli.runsite.golden", "GoldenComparison"))),
    "check-port": ("A port's site outputs judged against golden vectors.", (("hccli.port.check", "PortReport"),)),
    "run-kernel": ("The split-Sinkhorn op's outputs, or (--compare) golden vectors re-run.",
                   (("hccli.runkernel.run", "RunDocument"), ("hccli.runkernel.golden", "Comparison"))),
    "bench": ("Timings of the split-Sinkhorn op (--op split) or of the site's kernels (--op site-*).",
              (("hccli.bench.op", "BenchResult"), ("hccli.bench.site", "SiteBenchResult"),
               ("hccli.bench.site_chain", "ChainBenchResult"))),
    "cache list": ("The cache of hub reads.", (("hccli.checkpoint.remote.cache", "CacheListing"),)),
    "cache clear": ("What was removed from the cache.", (("hccli.checkpoint.remote.cache", "CacheCleared"),)),
}


def schema_file(command: str) -> str:
    return command.replace(" ", "-") + ".schema.json"


def _ref(name: str) -> dict:
    return {"$ref": f"{ENVELOPE}#/$defs/{name}"}


def envelope() -> dict:
    from hccli.checkpoint.verify.findings import CODES
    from hccli.cli.output import SCHEMA_VERSION

    nonfinite = {"enum": ["nan", "inf", "-inf"], "description": "a non-finite number (JSON has none)"}
    return {
        "$schema": DRAFT,
        "$id": ENVELOPE,
        "title": "The envelope of every hc --json document",
        "description": "Its keys come first, in this order; the command's own keys follow at the same level "
                       "(docs/json.md).",
        "type": "object",
        "properties": {
            "schema_version": {"const": SCHEMA_VERSION},
            "command": {"type": "string", "description": "the command, as typed after `hc` (`cache list`)"},
            "exit_code": {"type": "integer", "description": "the exit status of the process that wrote it"},
            "verdict": {"type": "string", "description": "the judging commands' word (each command's schema "
                                                          "lists its words); absent where the command judges "
                                                          "nothing"},
            "warnings": {"type": "array", "items": {"type": "string"},
                         "description": "the `warning:` lines said on stderr, without the prefix"},
            "findings": {"type": "array", "items": {"$ref": "#/$defs/finding"}},
        },
        "required": ["schema_version", "command", "exit_code", "warnings", "findings"],
        "$defs": {
            "float": {"anyOf": [{"type": "number"}, nonfinite]},
            "ndarray": {"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/float"}, {"$ref": "#/$defs/ndarray"}]}},
            "finding": {
                "type": "object",
                "properties": {
                    "code": {"enum": sorted(CODES)},
                    "severity": {"enum": ["error", "warning", "info"]},
                    "message": {"type": "string"},
                    "id": {"type": ["string", "null"], "description": "a root cause's id"},
                    "cause": {"type": ["string", "null"], "description": "the id of the root cause it follows from"},
                    "side": {"enum": ["a", "b"], "description": "hc diff: the checkpoint it is about"},
                },
                "required": ["code", "severity", "message", "id", "cause"],
                "additionalProperties": False,
            },
        },
    }


class _Writer:
    """One command's schema: a $defs entry per dataclass met, in the order met."""

    def __init__(self) -> None:
        self.defs: dict[str, dict] = {}

    def hints(self, cls: type) -> dict[str, Any]:
        mod = sys.modules[cls.__module__]
        names = dict(vars(mod))
        for _ in range(20):  # names imported only for type checking: found in the modules that define them
            try:
                return typing.get_type_hints(cls, globalns=names)
            except NameError as exc:
                names[exc.name] = _find(exc.name)
        raise RuntimeError(f"{cls.__name__}: annotations not resolved")

    def prop_hint(self, cls: type, name: str) -> Any:
        fget = getattr(cls, name).fget
        mod = sys.modules[cls.__module__]
        return typing.get_type_hints(fget, globalns=dict(vars(mod)))["return"]

    def of(self, t: Any) -> dict:
        from hccli.checkpoint.verify.findings import Finding

        origin = typing.get_origin(t)
        args = typing.get_args(t)
        if t is Any or t is object:
            return {}
        if t is type(None) or t is None:
            return {"type": "null"}
        if t is bool:
            return {"type": "boolean"}
        if isinstance(t, type) and issubclass(t, enum.Enum):
            return {"enum": [m.value for m in t]}
        if t is int:
            return {"type": "integer"}
        if t is float:
            return _ref("float")
        if t is str or (isinstance(t, type) and issubclass(t, (PurePath, os.PathLike))):
            return {"type": "string"}
        if t is Finding:
            return _ref("finding")
        if getattr(t, "__name__", "") == "ndarray":
            return _ref("ndarray")
        if origin in (typing.Union, types.UnionType):
            return {"anyOf": [self.of(a) for a in args]}
        if origin is typing.Literal:
            return {"enum": list(args)}
        if origin in (list, set, frozenset) or t in (list, tuple, set, frozenset):
            return {"type": "array", **({"items": self.of(args[0])} if args else {})}
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return {"type": "array", "items": self.of(args[0])}
            return {"type": "array", "prefixItems": [self.of(a) for a in args], "items": False}
        if origin is dict or t is dict:
            return {"type": "object", **({"additionalProperties": self.of(args[1])} if args else {})}
        if dataclasses.is_dataclass(t):  # a field may hold a subclass (HcSplitEntry for an HcEntry): either
            kinds = [t, *_subclasses(t)]
            for k in kinds:
                self.define(k)
            refs = [{"$ref": f"#/$defs/{k.__name__}"} for k in kinds]
            return refs[0] if len(refs) == 1 else {"anyOf": refs}
        raise TypeError(f"no JSON Schema for {t!r}")

    def members(self, cls: type) -> tuple[dict, list]:
        """(properties, required) of a dataclass's JSON object, as base/jsonable.py writes it."""
        hints = self.hints(cls)
        props: dict[str, dict] = {}
        required: list[str] = []
        for f in dataclasses.fields(cls):
            how = f.metadata.get("json")
            if how == "skip":
                continue
            if how == "inline":
                p, r = self.members(hints[f.name])
                props.update(p)
                required += r
                continue
            props[f.name] = self.of(hints[f.name])
            if how != "omit_if_none":
                required.append(f.name)
        for name in getattr(cls, "JSON_PROPERTIES", ()):
            props[name] = self.of(self.prop_hint(cls, name))
            required.append(name)
        return props, required

    def define(self, cls: type, body: bool = False) -> dict:
        name = cls.__name__
        if name in self.defs and not body:
            return self.defs[name]
        self.defs[name] = {}  # (a type that holds itself refers to this entry)
        props, required = self.members(cls)
        d: dict[str, Any] = {"type": "object"}
        doc = (cls.__doc__ or "").strip()
        if doc and not doc.startswith(f"{name}("):  # (dataclasses write a signature where none is given)
            d["description"] = " ".join(doc.split())
        if body:
            props.pop("findings", None)  # a result's own findings field: the envelope's (json_document)
            required = [r for r in required if r != "findings"]
        if body:  # the envelope's keys sit beside the body's: the top level closes both (unevaluatedProperties)
            words = getattr(cls, "VERDICTS", ())
            judged = isinstance(getattr(cls, "verdict", None), property)
            props = {"verdict": {"enum": list(words)} if judged else False,
                     **({} if isinstance(getattr(cls, "exit_code", None), property) else {"exit_code": {"const": 0}}),
                     **props}
        d["properties"] = props
        d["required"] = required
        if not body:
            d["additionalProperties"] = False
        self.defs[name] = d
        return d


def _subclasses(t: type) -> list[type]:
    out = []
    for k in t.__subclasses__():
        if dataclasses.is_dataclass(k):
            out += [k, *_subclasses(k)]
    return out


def _core_modules() -> list[types.ModuleType]:
    """Every module of the core rooms, imported: a name imported for type checking only is found in
    one, and each dataclass's subclasses are all known (whichever way the generator is started)."""
    import importlib
    import pkgutil

    import hccli

    out = []
    for m in pkgutil.walk_packages(hccli.__path__, "hccli."):
        if m.name.startswith(("hccli.cli", "hccli.plot", "hccli.kernels")):
            continue
        with contextlib.suppress(ImportError):
            out.append(importlib.import_module(m.name))
    return out


def _find(name: str) -> Any:
    for mod in _core_modules():
        if isinstance(vars(mod).get(name), type) and vars(mod)[name].__module__ == mod.__name__:
            return vars(mod)[name]
    if name == "np":
        import numpy

        return numpy
    raise NameError(name)


def command_schema(command: str) -> dict:
    import importlib

    what, results = COMMANDS[command]
    w = _Writer()
    bodies = []
    for module, cls_name in results:
        cls = getattr(importlib.import_module(module), cls_name)
        w.define(cls, body=True)
        bodies.append({"$ref": f"#/$defs/{cls_name}"})
    return {
        "$schema": DRAFT,
        "$id": schema_file(command),
        "title": f"hc {command} --json",
        "description": what,
        "type": "object",
        "allOf": [{"$ref": ENVELOPE}, *(bodies if len(bodies) == 1 else [{"anyOf": bodies}])],
        "properties": {"command": {"const": command}},
        "unevaluatedProperties": False,
        "$defs": w.defs,
    }


def all_schemas() -> dict[str, dict]:
    _core_modules()
    out = {ENVELOPE: envelope()}
    for command in COMMANDS:
        out[schema_file(command)] = command_schema(command)
    return out


def text(schema: dict) -> str:
    return json.dumps(schema, indent=2) + "\n"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    OUT.mkdir(parents=True, exist_ok=True)
    for name, schema in all_schemas().items():
        (OUT / name).write_text(text(schema))
        print(f"wrote {OUT / name}")
