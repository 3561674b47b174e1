"""One generic conversion of report data into JSON-ready values: the one encoder of every
command's `--json` (cli/output.py writes what this returns).

Reports are frozen dataclasses; their JSON is their fields, in declaration
order, recursively. JSON has no NaN or Infinity, so a non-finite float (a
damaged HC value, an infinite difference) becomes the string "nan", "inf" or
"-inf" in every command, and the document stays valid; null means "no value",
never an infinity. numpy is handled without importing it, so that commands
which never touch numpy do not pay for it at start-up. A path is its text.

Field metadata steers a field's place in the document:
    field(metadata=OMIT_IF_NONE)  the key is left out while the value is None
    field(metadata=NOT_IN_JSON)   the field is for renderers only
    field(metadata=INLINE)        a dataclass field's own keys stand in its place
and a class's `JSON_PROPERTIES: ClassVar[tuple[str, ...]]` names properties (derived values,
so never stored twice: diff's `hc_ok`) whose values follow the fields, in that order. A result
object's `exit_code`, `verdict` and `findings` are not its body's: the sink reads them for the
envelope every document opens with (cli/output.py json_document).
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

OMIT_IF_NONE = {"json": "omit_if_none"}
NOT_IN_JSON = {"json": "skip"}
INLINE = {"json": "inline"}


_PLAIN = frozenset((str, int, bool, type(None)))  # returned as they are, without a call
_PLANS: dict[type, tuple[tuple[str, str | None], ...]] = {}  # per dataclass: (key, how); a tensor list has ~100k rows


def _float(x: float) -> Any:
    if math.isfinite(x):
        return x
    return "nan" if x != x else ("inf" if x > 0 else "-inf")


def _plan(kind: type) -> tuple[tuple[str, str | None], ...]:
    plan = _PLANS.get(kind)
    if plan is None:
        plan = _PLANS[kind] = (tuple((f.name, f.metadata.get("json")) for f in dataclasses.fields(kind))
                               + tuple((name, None) for name in getattr(kind, "JSON_PROPERTIES", ())))
    return plan


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, dicts, lists, tuples, sets, numpy scalars and arrays -> plain JSON values."""
    kind = type(obj)
    if kind in _PLAIN:
        return obj
    if isinstance(obj, float):
        return _float(obj)
    if isinstance(obj, (str, int)):  # subclasses (an IntEnum, say) and bool
        return obj
    plain = _PLAIN
    if isinstance(obj, (list, tuple)):
        # (a finite float as it is, without a call: v - v is 0.0 for it, NaN for NaN and the infinities)
        return [v if type(v) in plain or type(v) is float and v - v == 0.0 else to_jsonable(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): v if type(v) in plain else to_jsonable(v) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for name, how in _plan(kind):
            if how is None:  # (most fields have no metadata: one test for them)
                v = getattr(obj, name)
                out[name] = v if type(v) in plain else to_jsonable(v)
            elif how == "omit_if_none":
                v = getattr(obj, name)
                if v is not None:
                    out[name] = v if type(v) in plain else to_jsonable(v)
            elif how == "inline":
                out.update(to_jsonable(getattr(obj, name)))
            # "skip": the field is for renderers only
        return out
    if isinstance(obj, (set, frozenset)):
        return [to_jsonable(v) for v in sorted(obj)]
    # numpy without importing it: arrays and scalars both offer tolist()/item()
    if kind.__module__ == "numpy":
        if hasattr(obj, "shape") and getattr(obj, "ndim", 0) > 0:
            return to_jsonable(obj.tolist())
        return to_jsonable(obj.item())
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"no JSON form for {kind.__name__}")
