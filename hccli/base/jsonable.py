"""One generic conversion of report data into JSON-ready values.

Reports are frozen dataclasses; their JSON is their fields, in declaration
order, recursively. JSON has no NaN or Infinity, so a non-finite float (a
damaged HC value, say) becomes the string "nan", "inf" or "-inf" and the
document stays valid. numpy is handled without importing it, so that commands
which never touch numpy do not pay for it at start-up.

Field metadata steers a field's place in the document:
    field(metadata=OMIT_IF_NONE)  the key is left out while the value is None
    field(metadata=NOT_IN_JSON)   the field is for renderers only
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

OMIT_IF_NONE = {"json": "omit_if_none"}
NOT_IN_JSON = {"json": "skip"}


_PLAIN = frozenset((str, int, bool, type(None)))  # returned as they are, without a call
_PLANS: dict[type, tuple[tuple[str, str | None], ...]] = {}  # per dataclass: (field, how); a tensor list has ~100k rows


def _float(x: float) -> Any:
    if math.isfinite(x):
        return x
    return "nan" if x != x else ("inf" if x > 0 else "-inf")


def _plan(kind: type) -> tuple[tuple[str, str | None], ...]:
    plan = _PLANS.get(kind)
    if plan is None:
        plan = _PLANS[kind] = tuple((f.name, f.metadata.get("json")) for f in dataclasses.fields(kind))
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
            if how == "skip":
                continue
            v = getattr(obj, name)
            if how == "omit_if_none" and v is None:
                continue
            out[name] = v if type(v) in plain else to_jsonable(v)
        return out
    if isinstance(obj, (set, frozenset)):
        return [to_jsonable(v) for v in sorted(obj)]
    # numpy without importing it: arrays and scalars both offer tolist()/item()
    if kind.__module__ == "numpy":
        if hasattr(obj, "shape") and getattr(obj, "ndim", 0) > 0:
            return to_jsonable(obj.tolist())
        return to_jsonable(obj.item())
    raise TypeError(f"no JSON form for {kind.__name__}")
