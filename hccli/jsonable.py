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


def _float(x: float) -> Any:
    if math.isfinite(x):
        return x
    return "nan" if x != x else ("inf" if x > 0 else "-inf")


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, dicts, lists, tuples, sets, numpy scalars and arrays -> plain JSON values."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return _float(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for f in dataclasses.fields(obj):
            how = f.metadata.get("json")
            if how == "skip":
                continue
            value = getattr(obj, f.name)
            if how == "omit_if_none" and value is None:
                continue
            out[f.name] = to_jsonable(value)
        return out
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return [to_jsonable(v) for v in sorted(obj)]
    # numpy without importing it: arrays and scalars both offer tolist()/item()
    if type(obj).__module__ == "numpy":
        if hasattr(obj, "shape") and getattr(obj, "ndim", 0) > 0:
            return to_jsonable(obj.tolist())
        return to_jsonable(obj.item())
    raise TypeError(f"no JSON form for {type(obj).__name__}")
