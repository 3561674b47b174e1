"""A hardened safetensors header parser that works on bytes.

The rules are those of the reference implementation (huggingface/safetensors,
safetensors/src/tensor.rs: `SafeTensors::read_metadata` and `Metadata::validate`),
made stricter where that protects users: duplicate JSON keys, NaN/Infinity
literals and lone surrogate escapes are rejected instead of silently accepted.
Files that are not safetensors at all (LFS pointers, HTML error pages, torch
zips, pickles, GGUF ...) are named for what they are (see sniff.py).

Layout: 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the
data buffer, which the tensors' data_offsets (relative to the buffer) must tile
from 0 to the end of the file without gap or overlap.

Two paths give one verdict. The fast accept (header_fast.py) takes the ordinary header
(entries of exactly dtype, shape, data_offsets) at the speed of msgspec's C decoding and
declines anything else; the careful path (header_careful.py) applies every rule one by one,
and alone words the errors.
"""

from __future__ import annotations

import gc
import math
import re
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from itertools import repeat
from operator import itemgetter
from typing import Iterator, Mapping, NamedTuple

from hccli.checkpoint.sniff import PICKLE, PICKLE_FRAME_STARTS, SNIFF_LEN, sniff
from hccli.checkpoint.source import ByteSource, one_line
from hccli.errors import HcError

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
# serde_json's recursion limit, counted with the top-level object as level 1.
MAX_JSON_DEPTH = 127
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_NAME, _DTYPE, _SHAPE, _BEGIN, _END = (itemgetter(i) for i in range(5))  # TensorInfo's fields
_SPAN = itemgetter(3, 4)


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
    built on first use (100k of them cost more than every total `inspect --json` prints)."""

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


# --------------------------------------------------------------------------- length


def header_length(head: bytes, file_size: int, name: str) -> int:
    """Validate the 8-byte length field at the start of `head` against the cap and the file size.

    `head` holds the file's first bytes: at least 8 of them, or the whole file when it is
    shorter. More bytes (up to SNIFF_LEN) give better messages for non-safetensors files.
    """
    if file_size == 0:
        raise HeaderError(name, "empty_file", "file is empty (0 bytes), expected a safetensors file")
    if file_size < N_LEN:
        what = sniff(head)
        looks = f"; it {what[1]}" if what else ""
        raise HeaderError(name, "too_short", f"file has {file_size} bytes, expected at least 8 (the header length)"
                          + looks)
    if len(head) < N_LEN:
        raise ValueError(f"header_length needs the first 8 bytes, got {len(head)}")
    n = int.from_bytes(head[:N_LEN], "little")
    if head[:3] in PICKLE_FRAME_STARTS:
        # Protocol 4/5 pickles with a tiny first frame read as a length under the cap.
        raise HeaderError(name, "pickle", f"not a safetensors file: it {PICKLE}")
    if n > MAX_HEADER_SIZE:
        # Only here is sniffing safe: a real header length fits in 4 bytes, so magic numbers
        # of other formats (which fill bytes 4-7) cannot be confused with a truncated shard.
        what = sniff(head)
        if what is not None:
            raise HeaderError(name, what[0], f"not a safetensors file: it {what[1]}")
        raise HeaderError(name, "header_too_large", f"header length field says {n:,} bytes, expected at most"
                          f" {MAX_HEADER_SIZE:,} (not a safetensors file?)")
    if N_LEN + n > file_size:
        raise HeaderError(name, "header_truncated", f"header length field says {n:,} bytes, file has only"
                          f" {file_size - N_LEN:,} after it (truncated download?)")
    if n == 0:
        zeros = " (the file starts with zero bytes: an unfinished download?)" if not any(head) else ""
        raise HeaderError(name, "empty_header", f"header length is 0, expected a JSON object{zeros}")
    return n


# --------------------------------------------------------------------------- parse


def parse_header(prefix: bytes, file_size: int, name: str) -> Header:
    """Parse and validate a header from the file's first bytes.

    `prefix` must hold at least 8 + header length bytes (the whole file is fine), or the
    whole file when it is shorter. Raises HeaderError for anything a user's file can do wrong.
    """
    n = header_length(prefix, file_size, name)
    if len(prefix) < N_LEN + n:
        raise ValueError(f"parse_header needs {N_LEN + n} bytes of prefix, got {len(prefix)}")
    return _parse_body(prefix[N_LEN : N_LEN + n], file_size, name)


def read_header(source: ByteSource) -> Header:
    """Read exactly the 8-byte length and then the header from `source`, and validate it."""
    name = source.name
    size = source.size()
    head = source.read(0, min(size, N_LEN))
    if size > N_LEN and not 0 < int.from_bytes(head, "little") <= MAX_HEADER_SIZE:
        # Not a usable length: read a little more, to say what the file is instead.
        head = source.read(0, min(size, SNIFF_LEN))
    n = header_length(head, size, name)
    return _parse_body(source.read(N_LEN, n), size, name)


def _parse_body(body: bytes, file_size: int, name: str) -> Header:
    from hccli.checkpoint.header_fast import parse_fast

    with gc_paused():
        header = parse_fast(body, len(body), file_size, name)
        if header is not None:
            return header
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HeaderError(name, "bad_utf8", f"header is not valid UTF-8 (byte 0x{body[exc.start]:02x} at file"
                              f" offset {N_LEN + exc.start}), expected UTF-8 JSON") from None
        # Anything unusual, valid or not, is judged and worded by the careful path.
        from hccli.checkpoint.header_careful import parse_careful

        return parse_careful(text, len(body), file_size, name)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold off the cyclic GC while building many long-lived, acyclic objects.

    Parsing a header allocates a container per JSON object and array and a tuple per tensor,
    all alive until it ends (the tensors for good) and none in a cycle. Left on, the GC walks
    them again every few hundred allocations: more than half the parse time of a big header.
    The switch is process-wide: threads pausing at once may end one another's pause early (a
    cost, never a leak); a GC the caller had turned off stays off.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
