"""The one dataclass -> JSON conversion the output layer uses."""

import json
import math
from dataclasses import dataclass, field

import pytest

from hccli.base.jsonable import NOT_IN_JSON, OMIT_IF_NONE, to_jsonable


@dataclass(frozen=True)
class Inner:
    x: float
    tags: tuple[str, ...]


@dataclass(frozen=True)
class Outer:
    name: str
    inner: Inner
    rows: dict[str, Inner]
    maybe: int | None
    extra: int | None = field(default=None, metadata=OMIT_IF_NONE)
    private: str = field(default="renderers only", metadata=NOT_IN_JSON)


def test_dataclasses_nest_in_field_order():
    doc = to_jsonable(Outer("a", Inner(1.5, ("p", "q")), {"k": Inner(2.0, ())}, None))
    assert doc == {"name": "a", "inner": {"x": 1.5, "tags": ["p", "q"]}, "rows": {"k": {"x": 2.0, "tags": []}},
                   "maybe": None}
    assert list(doc) == ["name", "inner", "rows", "maybe"]  # None kept unless the field says omit
    assert to_jsonable(Outer("a", Inner(0.0, ()), {}, 1, extra=7))["extra"] == 7


def test_non_finite_floats_become_strings():
    doc = to_jsonable({"v": [math.nan, math.inf, -math.inf, 0.25]})
    assert doc == {"v": ["nan", "inf", "-inf", 0.25]}
    json.dumps(doc, allow_nan=False)  # valid JSON


def test_numpy_scalars_and_arrays():
    np = pytest.importorskip("numpy")
    doc = to_jsonable({"a": np.array([[1.0, np.nan], [np.inf, 2.0]], dtype=np.float32), "s": np.float32(0.5),
                       "i": np.int64(3), "b": np.bool_(True), "z": np.array(4.0)})
    assert doc == {"a": [[1.0, "nan"], ["inf", 2.0]], "s": 0.5, "i": 3, "b": True, "z": 4.0}
    assert type(doc["i"]) is int and type(doc["b"]) is bool
    json.dumps(doc, allow_nan=False)


def test_sets_sorted_and_unknown_types_refused():
    assert to_jsonable(frozenset({3, 1, 2})) == [1, 2, 3]
    with pytest.raises(TypeError, match="object"):
        to_jsonable(object())
