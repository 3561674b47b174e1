"""`record`: a dataclass whose methods are made without compiling code at import.

On Python 3.11, `@dataclass(frozen=True)` writes the source of six methods per class and compiles
each one with exec: ~0.5 ms a class. About thirty such classes load before `hc inspect --json`
reads a byte, ~20 ms of a command whose whole budget over its floor is ~80 ms (issue #14).

`record` lets `dataclasses` collect the fields (so `fields()`, `replace()`, `asdict()`,
`is_dataclass()` and `field(default=, default_factory=, repr=, compare=, hash=, init=)` work as
ever), then gives the class methods built from closures over its field names, with the same
behaviour as the generated ones: `__init__` (positional or keyword arguments, defaults, default
factories, `__post_init__`, the same TypeErrors), `__repr__`, `__eq__`, `__hash__` and, when
frozen, `__setattr__`/`__delattr__` that raise FrozenInstanceError. A method the class body
defines itself is kept, as dataclasses keep it. Not supported (a TypeError at decoration):
InitVar, kw_only fields, and a base that is a plain dataclass. `__dataclass_params__` says how
dataclasses was called (no init, repr or eq of its own, not frozen) and `__record__` whether the
record is frozen; so a frozen @dataclass cannot subclass a record (dataclasses refuses it), and
records and dataclasses are not mixed in one hierarchy.

The closures cost ~0.1 ms a class at import; a record's `__init__` is slower per instance than the
compiled one (~1 us more), so classes made in the tens of thousands per run stay dataclasses.
tests/test_record.py checks each behaviour against a dataclass with the same body.
"""

from __future__ import annotations

import dataclasses
import reprlib
from dataclasses import MISSING, FrozenInstanceError
from typing import Any, Callable, TypeVar

T = TypeVar("T", bound=type)


def record(cls: T | None = None, /, *, frozen: bool = True) -> Any:
    """@record (frozen, like @dataclass(frozen=True)) or @record(frozen=False) (@dataclass)."""

    def wrap(cls: T) -> T:
        return _make(cls, frozen)

    return wrap if cls is None else wrap(cls)


def _make(cls: Any, frozen: bool) -> Any:
    for base in cls.__mro__[1:]:
        kind = base.__dict__.get("__record__")
        if "__dataclass_fields__" in base.__dict__ and kind is None:
            raise TypeError(f"record {cls.__qualname__}: base {base.__qualname__} is a dataclass, not a record")
        if kind is not None and (kind == "frozen") != frozen:  # dataclasses' rule
            raise TypeError(f"record {cls.__qualname__}: cannot inherit a {'mutable' if frozen else 'frozen'} "
                            f"record ({base.__qualname__}) as a {'frozen' if frozen else 'mutable'} one")
    body = dict(cls.__dict__)  # before dataclasses adds to it: what the class defines itself
    if frozen and ("__setattr__" in body or "__delattr__" in body):
        raise TypeError(f"record {cls.__qualname__}: a frozen record cannot define __setattr__ or __delattr__")
    if not cls.__dict__.get("__doc__"):
        # dataclasses would write one from inspect.signature (~2 ms for the first class of a run)
        names = [n for n, t in cls.__dict__.get("__annotations__", {}).items() if "ClassVar" not in str(t)]
        cls.__doc__ = f"{cls.__name__}({', '.join(names)})"
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False)
    fields = dataclasses.fields(cls)
    # what fields() leaves out is a ClassVar or an InitVar (as an object, or a string annotation)
    for name, f in cls.__dataclass_fields__.items():
        if f not in fields and (isinstance(f.type, dataclasses.InitVar) or "InitVar" in str(f.type)):
            raise TypeError(f"record {cls.__qualname__}: InitVar ({name}) is not supported")
    if any(f.kw_only is True for f in fields):
        raise TypeError(f"record {cls.__qualname__}: kw_only fields are not supported")
    cls.__record__ = "frozen" if frozen else "mutable"

    def put(name: str, fn: Callable) -> None:
        if name not in body:
            fn.__qualname__ = f"{cls.__qualname__}.{name}"
            setattr(cls, name, fn)

    put("__init__", _init(cls, fields))
    put("__repr__", _repr([f.name for f in fields if f.repr]))
    compared = tuple(f.name for f in fields if f.compare)
    put("__eq__", _eq(compared))
    # dataclasses' rule for eq=True: frozen -> hash of the hashed fields; else unhashable; a
    # __hash__ of the class's own is kept (an __eq__ of its own leaves __hash__ None in the body)
    own_hash = "__hash__" in body and not (body["__hash__"] is None and "__eq__" in body)
    if not own_hash:
        hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
        cls.__hash__ = _hash(hashed) if frozen else None
    if frozen:
        names = frozenset(f.name for f in fields)
        put("__setattr__", _frozen_setattr(cls, names))
        put("__delattr__", _frozen_delattr(cls, names))
    return cls


def _init(cls: Any, fields: tuple) -> Callable:
    init = [f for f in fields if f.init]
    names = tuple(f.name for f in init)
    known = frozenset(names)
    n = len(names)
    seen_default = False
    for f in init:
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        if seen_default and not has_default:
            raise TypeError(f"non-default argument {f.name!r} follows default argument")
        seen_default = seen_default or has_default
    defaults = {f.name: f.default for f in init if f.default is not MISSING}
    factories = {f.name: f.default_factory for f in init if f.default_factory is not MISSING}
    # fields left out of __init__ still get their default (a field without one stays unset)
    later = [(f.name, f.default, f.default_factory) for f in fields if not f.init
             and (f.default is not MISSING or f.default_factory is not MISSING)]
    post_init = hasattr(cls, "__post_init__")
    where = f"{cls.__qualname__}.__init__()"
    required = n - len(defaults) - len(factories)
    takes = f"{n + 1} positional argument" + ("s" if n else "") if required == n else \
        f"from {required + 1} to {n + 1} positional arguments"

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > n:
            raise TypeError(f"{where} takes {takes} but {len(args) + 1} were given")
        values = dict(zip(names, args))
        if kwargs:
            for key in kwargs:
                if key in values:
                    raise TypeError(f"{where} got multiple values for argument {key!r}")
                if key not in known:
                    raise TypeError(f"{where} got an unexpected keyword argument {key!r}")
            values.update(kwargs)
        if len(values) < n:
            missing = []
            for name in names:
                if name in values:
                    continue
                if name in defaults:
                    values[name] = defaults[name]
                elif name in factories:
                    values[name] = factories[name]()
                else:
                    missing.append(name)
            if missing:
                raise TypeError(f"{where} missing {len(missing)} required positional "
                                f"argument{'s' if len(missing) > 1 else ''}: {_listed(missing)}")
        state = self.__dict__
        for name in names:  # in field order, as the generated __init__ assigns them
            state[name] = values[name]
        for name, default, factory in later:
            state[name] = default if factory is MISSING else factory()
        if post_init:
            self.__post_init__()

    return __init__


def _listed(names: list[str]) -> str:
    """Python's own wording of missing arguments: 'a'; 'a' and 'b'; 'a', 'b', and 'c'."""
    quoted = [repr(n) for n in names]
    if len(quoted) <= 2:
        return " and ".join(quoted)
    return ", ".join(quoted[:-1]) + ", and " + quoted[-1]


def _repr(names: list[str]) -> Callable:
    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        return f"{self.__class__.__qualname__}(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in names) + ")"

    return __repr__


def _values(names: tuple[str, ...]) -> Callable[[Any], tuple]:
    """The fields as a tuple, compared or hashed as the generated methods compare their tuples
    (elements by identity first, so a field holding a NaN equals itself)."""
    return lambda self: tuple(map(self.__dict__.__getitem__, names))


def _eq(names: tuple[str, ...]) -> Callable:
    values = _values(names)

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    return __eq__


def _hash(names: tuple[str, ...]) -> Callable:
    values = _values(names)

    def __hash__(self: Any) -> int:
        return hash(values(self))

    return __hash__


def _frozen_setattr(cls: Any, names: frozenset[str]) -> Callable:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    return __setattr__


def _frozen_delattr(cls: Any, names: frozenset[str]) -> Callable:
    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __delattr__
