"""The safetensors header's types: its entries (TensorInfo), a validated header (Header, and
ColumnHeader, the same header kept as columns), the dtypes the format knows, and HeaderError.

The parser (header.py, header_fast.py, header_careful.py) builds them; everything that reads a
checkpoint holds them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from itertools import repeat
from operator import itemgetter
from typing import Mapping, NamedTuple

from hccli.base.bounded import one_line
from hccli.base.errors import HcError

MAX_HEADER_SIZE = 100_000_000
N_LEN = 8
U64_MAX = 2**64 - 1

# Bits per element of every dtype the reference knows (Dtype::bitsize). BOOL is a byte.
DTYPES: dict[str, int] = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8,
    "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
    "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}  # fmt: skip

METADATA_KEY = "__metadata__"
_NAME, _DTYPE, _SHAPE, _BEGIN, _END = (itemgetter(i) for i in range(5))  # TensorInfo's fields
ENTRY_SPAN = itemgetter(3, 4)


class HeaderError(HcError):
    """A file whose header cannot be trusted. `code` is stable; the message is one line."""

    def __init__(self, name: str, code: str, detail: str, tensor: str | None = None):
        where = f"{one_line(name)}: "
        if tensor is not None:
            where += f"tensor {quote(tensor)}: "
        super().__init__(where + detail, exit_code=2)
        self.code = code
        self.file = name
        self.tensor = tensor


def quote(text: str, limit: int = 120) -> str:
    return "'" + one_line(text, limit) + "'"


class TensorInfo(NamedTuple):
    """One header entry. begin/end are data_offsets, relative to the data buffer.

    A named tuple rather than a frozen dataclass: a checkpoint holds up to ~100k entries, and a
    tuple is built without a Python-level __init__ and is smaller. Immutable all the same.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int
    data_start: int = 0

    @property
    def abs_begin(self) -> int:
        return self.data_start + self.begin

    @property
    def abs_end(self) -> int:
        return self.data_start + self.end

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def bits_per_element(self) -> int:
        return DTYPES[self.dtype]


@dataclass(frozen=True)
class Header:
    """A validated header. `tensors` are in the order their bytes lie in the file."""

    name: str
    header_len: int
    data_start: int
    file_size: int
    metadata: dict[str, str] | None
    tensors: tuple[TensorInfo, ...]

    # Built on first use (a cached_property writes the instance's __dict__, which a frozen
    # dataclass allows): `inspect --json` of a 100k-tensor checkpoint never asks for a name.
    @cached_property
    def by_name(self) -> Mapping[str, TensorInfo]:
        return dict(zip(self.names, self.tensors))

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(map(_NAME, self.tensors))

    @cached_property
    def columns(self) -> Columns:
        """The entries as columns, in `tensors`' order (the fast path sets them as it builds
        them, for whole-checkpoint totals in C-level maps rather than per tensor)."""
        t = self.tensors
        return Columns(list(self.names), list(map(_DTYPE, t)), list(map(_SHAPE, t)), list(map(_BEGIN, t)),
                       list(map(_END, t)))

    def entry(self, i: int) -> TensorInfo:
        """The i-th entry (in `tensors`' order), without building the others."""
        return self.tensors[i]

    @property
    def data_size(self) -> int:
        return self.file_size - self.data_start

    def __getitem__(self, name: str) -> TensorInfo:
        return self.by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def get(self, name: str) -> TensorInfo | None:
        return self.by_name.get(name)


class Columns(NamedTuple):
    names: list[str]
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    begins: list[int]
    ends: list[int]


class ColumnHeader(Header):
    """A header the fast path validated as columns: the same Header, its TensorInfo records
    built on first use (100k of them cost more than every total `inspect --json` prints). Its
    entries tile the data from 0 in their order (the fast path builds one only then)."""

    @classmethod
    def of_columns(cls, name: str, header_len: int, data_start: int, file_size: int,
                   metadata: dict[str, str] | None, columns: Columns) -> "ColumnHeader":
        header = object.__new__(cls)
        header.__dict__.update(name=name, header_len=header_len, data_start=data_start, file_size=file_size,
                               metadata=metadata, columns=columns)
        return header

    @cached_property
    def tensors(self) -> tuple[TensorInfo, ...]:  # type: ignore[override]
        c = self.columns
        return tuple(map(tuple.__new__, repeat(TensorInfo),
                         zip(c.names, c.dtypes, c.shapes, c.begins, c.ends, repeat(self.data_start))))

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(self.columns.names)

    def entry(self, i: int) -> TensorInfo:
        if "tensors" in self.__dict__:
            return self.__dict__["tensors"][i]
        c = self.columns
        return TensorInfo(c.names[i], c.dtypes[i], c.shapes[i], c.begins[i], c.ends[i], self.data_start)

    def _key(self) -> tuple:
        return (self.name, self.header_len, self.data_start, self.file_size, self.metadata, self.tensors)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Header) or type(other) not in (Header, ColumnHeader):
            return NotImplemented
        return self._key() == ColumnHeader._key(other)  # type: ignore[arg-type]

    __hash__ = Header.__hash__
