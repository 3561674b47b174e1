"""The one dataclass -> JSON conversion the output layer uses."""

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest

from hccli.base.jsonable import INLINE, NOT_IN_JSON, OMIT_IF_NONE, to_jsonable


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


@dataclass(frozen=True)
class _Where:
    device: str
    date: str


@dataclass(frozen=True, slots=True)
class _Result:
    mode: str
    where: _Where = field(metadata=INLINE)
    beyond: int = 0
    out: Path = Path("out")

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("ok", "exit_code")

    @property
    def ok(self) -> bool:
        return self.beyond == 0

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


def test_inlined_fields_stand_in_place_and_properties_follow_the_fields():
    doc = to_jsonable(_Result("gpu", _Where("cuda:0", "now"), 3, Path("a") / "b"))
    assert list(doc.items()) == [("mode", "gpu"), ("device", "cuda:0"), ("date", "now"), ("beyond", 3),
                                 ("out", "a/b"), ("ok", False), ("exit_code", 1)]
    assert to_jsonable(_Result("cpu", _Where("cpu", "now")))["ok"] is True  # read when converted, not stored
