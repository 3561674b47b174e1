"""hccli.record against dataclasses: each record below has a twin with the same body made by
@dataclass, and every behaviour is compared between the two (results, reprs, hashes, errors and
their messages)."""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
import subprocess
import sys
from dataclasses import FrozenInstanceError, dataclass, field

import pytest

from hccli.record import record


@record
class Point:  # at module level, where pickle finds it
    x: int
    rest: tuple = ()


def _plain(deco):
    @deco
    class Plain:
        a: int
        b: str = "x"
        c: list = field(default_factory=list)
        d: float = field(default=1.0, compare=False)
        e: int = field(default=0, repr=False)
        f: int = field(default=0, hash=False)

    return Plain


def _post(deco):
    @deco
    class Post:
        a: int
        n: int = field(init=False, default=5)
        tags: list = field(init=False, default_factory=list)

        def __post_init__(self):
            object.__setattr__(self, "twice", 2 * self.a)

    return Post


def _own(deco):
    @deco
    class Own:
        a: int
        b: int = 0

        def __repr__(self):
            return f"own {self.a}"

        def __eq__(self, other):
            return isinstance(other, Own) and self.a == other.a

        def __hash__(self):
            return hash(self.a)

    return Own


def _mutable(deco):
    @deco
    class Mutable:
        a: int
        items: list = field(default_factory=list)

    return Mutable


def _pair(make, frozen=True):
    return make(dataclass(frozen=frozen)), make(record(frozen=frozen))


def _outcome(cls, args, kwargs):
    """What constructing gives: ("ok", repr, hash or None) or ("error", type, message)."""
    try:
        obj = cls(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the error is the outcome compared
        return ("error", type(exc).__name__, str(exc))
    try:
        h = hash(obj)
    except TypeError as exc:
        h = str(exc)
    return ("ok", repr(obj), h, dataclasses.astuple(obj), dict(vars(obj)))


CALLS = [
    ((1,), {}), ((1, "y"), {}), ((1, "y", [3], 2.0, 7, 9), {}), ((), {"a": 1, "f": 4}),
    ((1,), {"c": [1, 2]}), ((), {}), ((1, "y", [], 1.0, 0, 0, 99), {}), ((1,), {"a": 2}),
    ((1,), {"zz": 2}), ((), {"b": "only"}),
]


@pytest.mark.parametrize("args,kwargs", CALLS)
def test_init_repr_hash_and_errors_as_dataclass(args, kwargs):
    dc, rec = _pair(_plain)
    assert _outcome(rec, args, kwargs) == _outcome(dc, args, kwargs)


def test_missing_arguments_worded_as_python_words_them():
    def three(deco):
        @deco
        class Three:
            a: int
            b: int
            c: int
            d: int = 0

        return Three

    for calls in [(), (1,), (1, 2), (1, 2, 3, 4, 5)]:
        dc, rec = _pair(three)
        assert _outcome(rec, calls, {}) == _outcome(dc, calls, {})

    def none(deco):
        @deco
        class Empty:
            pass

        return Empty

    dc, rec = _pair(none)
    assert _outcome(rec, (1,), {}) == _outcome(dc, (1,), {})
    assert _outcome(rec, (), {}) == _outcome(dc, (), {})


def test_equality_and_hash_follow_compare_and_hash_flags():
    dc, rec = _pair(_plain)
    for cls in (dc, rec):
        x, y = cls(1, "y", [1], d=1.0, f=1), cls(1, "y", [1], d=2.0, f=1)
        assert x == y  # d is not compared
        assert x != cls(1, "y", [1], d=1.0, f=2)  # f is compared (only left out of the hash)
        assert x != cls(2)
        assert (x == 1) is False and x.__eq__(1) is NotImplemented
        with pytest.raises(TypeError):
            hash(x)  # c holds a list: unhashable, as the generated __hash__ finds
    a, b = dc(1, "y", (), 3.0, 4, 5), rec(1, "y", (), 3.0, 4, 5)
    assert hash(a) == hash(b) and dataclasses.astuple(a) == dataclasses.astuple(b)
    assert hash(b) == hash(rec(1, "y", (), 7.0, 4, 6))  # neither d nor f is hashed
    assert a != b and b != a  # different classes are never equal
    nan = math.nan
    for cls in (dc, rec):
        assert cls(1, "y", (), nan) == cls(1, "y", ())  # d not compared


def test_nan_fields_compared_by_identity_like_tuples():
    dc, rec = _pair(_mutable)
    nan = float("nan")
    for cls in (dc, rec):
        assert cls(nan) == cls(nan)  # the same NaN object: tuples compare by identity first
        assert cls(float("nan")) != cls(float("nan"))


def test_frozen_assignment_and_deletion_refused_with_the_same_words():
    dc, rec = _pair(_plain)
    for attr in ("a", "new"):
        words = []
        for cls in (dc, rec):
            obj = cls(1)
            with pytest.raises(FrozenInstanceError) as got:
                setattr(obj, attr, 2)
            words.append(str(got.value))
            with pytest.raises(FrozenInstanceError) as got:
                delattr(obj, "a")
            words.append(str(got.value))
        assert words[:2] == words[2:]


def test_mutable_records_assign_and_are_unhashable():
    dc, rec = _pair(_mutable, frozen=False)
    for cls in (dc, rec):
        obj = cls(1)
        obj.a = 3
        obj.items.append(1)
        assert obj == cls(3, [1])
        assert cls.__hash__ is None
        assert cls(1).items is not cls(1).items  # a new list each time
    assert repr(dc(1, [2])) == repr(rec(1, [2]))


def test_post_init_and_fields_outside_init():
    dc, rec = _pair(_post)
    for args, kwargs in [((3,), {}), ((), {"a": 4}), ((3,), {"n": 1}), ((3, 4), {})]:
        assert _outcome(rec, args, kwargs)[:3] == _outcome(dc, args, kwargs)[:3]
    assert rec(3).twice == dc(3).twice == 6
    assert rec(3).n == 5 and rec(3).tags == [] and rec(3).tags is not rec(3).tags


def test_methods_of_the_class_body_are_kept():
    dc, rec = _pair(_own)
    for cls in (dc, rec):
        assert repr(cls(1, 2)) == "own 1"
        assert cls(1, 2) == cls(1, 3)
        assert hash(cls(5, 1)) == hash(5)


def test_dataclass_functions_work_on_records():
    dc, rec = _pair(_plain)
    a, b = dc(1, "y", [2]), rec(1, "y", [2])
    assert [f.name for f in dataclasses.fields(rec)] == [f.name for f in dataclasses.fields(dc)]
    assert dataclasses.is_dataclass(b) and dataclasses.asdict(b) == dataclasses.asdict(a)
    assert dataclasses.replace(b, a=9) == rec(9, "y", [2])
    assert rec.__match_args__ == dc.__match_args__
    point = Point(1, (2,))
    assert pickle.loads(pickle.dumps(point)) == point and pickle.loads(pickle.dumps(point)) is not point
    assert copy.deepcopy(b) == b and copy.copy(b) == b
    match b:
        case rec(1, "y"):
            pass
        case _:
            pytest.fail("positional match on a record")


def test_subclasses_add_fields_in_order():
    def family(deco):
        @deco
        class Base:
            a: int
            b: int = 1

        @deco
        class Child(Base):
            c: int = 2

        return Child

    dc, rec = _pair(family)
    for args in [(1,), (1, 2, 3), ()]:
        assert _outcome(rec, args, {}) == _outcome(dc, args, {})
    assert repr(rec(1, 2, 3)).endswith("Child(a=1, b=2, c=3)")
    with pytest.raises(FrozenInstanceError):
        rec(1).c = 3


def test_what_records_refuse():
    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
        @record
        class Order:
            a: int = 0
            b: int

    @dataclass(frozen=True)
    class Plain:
        a: int

    with pytest.raises(TypeError, match="is a dataclass, not a record"):
        @record
        class Mixed(Plain):
            b: int = 0

    with pytest.raises(TypeError, match="InitVar"):
        @record
        class WithInitVar:
            a: dataclasses.InitVar[int]

    with pytest.raises(TypeError, match="kw_only"):
        @record
        class KwOnly:
            a: int = field(default=0, kw_only=True)

    with pytest.raises(TypeError, match="cannot define __setattr__"):
        @record
        class OwnSetattr:
            a: int

            def __setattr__(self, name, value):
                pass

    @record
    class Frozen:
        a: int

    with pytest.raises(TypeError, match="cannot inherit frozen dataclass from a non-frozen one"):
        @dataclass(frozen=True)
        class Under(Frozen):
            b: int = 0

    with pytest.raises(TypeError, match="cannot inherit a frozen record"):
        @record(frozen=False)
        class Thawed(Frozen):
            b: int = 0


# Classes built many times per run stay dataclasses (a record's __init__ is slower per instance):
# verify's findings (one per tensor of a broken checkpoint), the listed rows, the tree's nodes.
KEPT = {"hccli.checkpoint.findings.Finding", "hccli.inspect_report.TensorRow", "hccli.inspect_tree.TreeNode"}

PROBE = """
import dataclasses, sys
made = []
real = dataclasses._process_class
def spy(cls, init, *rest):
    if init:  # a record calls dataclass(init=False): only @dataclass compiles an __init__
        made.append(cls.__module__ + "." + cls.__qualname__)
    return real(cls, init, *rest)
dataclasses._process_class = spy
sys.argv = ["hc", *sys.argv[1:]]
import hccli.cli.app as app
app._end = lambda: None
try:
    app.main()
except SystemExit:
    pass
sys.stderr.write("\\nMADE " + " ".join(m for m in made if m.startswith("hccli.")) + "\\n")
"""


@pytest.mark.parametrize("args", [["inspect", "--json"], ["inspect", "--verify", "--json"]])
def test_inspect_compiles_no_dataclass_methods_at_start(tmp_path, args):
    """The classes `inspect` loads are records, except those kept on purpose (KEPT): a new
    @dataclass on this path costs ~0.5 ms of every run's start."""
    from conftest import SAMPLES

    from hccli.synth import make_checkpoint

    # a phantom release (~1 s): its config, index and the published layout, so verify goes every way
    ckpt = make_checkpoint(SAMPLES / "deepseek-v4-flash.json", tmp_path / "ck", phantom=True).outdir
    run = subprocess.run([sys.executable, "-c", PROBE, args[0], str(ckpt), *args[1:]], capture_output=True,
                         text=True, timeout=300)
    line = next(ln for ln in run.stderr.splitlines() if ln.startswith("MADE"))
    made = set(line.split()[1:])
    assert made <= KEPT, sorted(made - KEPT)
