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

Two paths give one verdict. The fast path (`_parse_fast`) takes the ordinary header
(entries of exactly dtype, shape, data_offsets) at the speed of C json decoding and
declines anything else; the careful path (`_parse_careful`) applies every rule with a
Python hook per object and number, and alone words the errors.
"""

from __future__ import annotations

import gc
import json
import math
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import attrgetter
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
_NAME = attrgetter("name")


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
    by_name: Mapping[str, TensorInfo] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", dict(zip(map(_NAME, self.tensors), self.tensors)))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tensors)

    @property
    def data_size(self) -> int:
        return self.file_size - self.data_start

    def __getitem__(self, name: str) -> TensorInfo:
        return self.by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def get(self, name: str) -> TensorInfo | None:
        return self.by_name.get(name)


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


# --------------------------------------------------------------------------- JSON


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
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HeaderError(name, "bad_utf8", f"header is not valid UTF-8 (byte 0x{body[exc.start]:02x} at file offset"
                          f" {N_LEN + exc.start}), expected UTF-8 JSON") from None
    with gc_paused():
        header = _parse_fast(text, len(body), file_size, name)
    if header is not None:
        return header
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


# --------------------------------------------------------------------------- fast path

# Objects come back as tuples of (key, value) pairs, arrays as lists: every duplicate key stays
# visible (a dict would keep the last one silently) at no Python call per object.
_AS_PAIRS = json.JSONDecoder(object_pairs_hook=tuple)
_FIELDS = {"dtype", "shape", "data_offsets"}
_MINUS_ZERO = re.compile("-0")  # a regex: str.find is 3x slower for this needle
_SPAN = attrgetter("begin", "end")


def _parse_fast(text: str, n: int, file_size: int, name: str) -> Header | None:
    """The header, if it is an ordinary valid one; None sends it to the careful path.

    Accepted is only a tree whose every value is type-checked here: an object of entries of
    exactly dtype, shape and data_offsets (integers in u64), at most one __metadata__ (null or
    strings), no repeated key, tiling the data and filling the file. Such a tree has no floats,
    NaN/Infinity, long numbers or deep nesting, so plain decoding is as strict as the careful
    path for it; two text checks cover what decoding hides (\\ud800 escapes decode to lone
    surrogates, -0 to the integer 0). Anything else, valid or not, is the careful path's to
    judge and to word: it alone raises.
    """
    if not _long_numbers_refused() or _SURROGATE_ESCAPE.search(text) or _has_minus_zero(text):
        return None
    data_start = N_LEN + n
    metadata: dict[str, str] | None = None
    seen_metadata = False
    infos: list[TensorInfo] = []
    append, new_info = infos.append, tuple.__new__  # TensorInfo(...) costs twice as much
    expected, in_order = 0, True
    try:
        pairs = _AS_PAIRS.decode(text)
        if type(pairs) is not tuple:
            return None
        for key, entry in pairs:
            if key == METADATA_KEY:
                if seen_metadata or (entry is not None and type(entry) is not tuple):
                    return None
                seen_metadata = True
                if entry is not None:
                    metadata = dict(entry)
                    if len(metadata) != len(entry) or not all(type(v) is str for v in metadata.values()):
                        return None
                continue
            if type(entry) is not tuple:
                return None
            (k1, dtype), (k2, shape), (k3, offsets) = entry  # ValueError unless 3 fields
            if k1 != "dtype" or k2 != "shape" or k3 != "data_offsets":
                fields = dict(entry)  # another order; three distinct keys, so none repeated
                if fields.keys() != _FIELDS:
                    return None
                dtype, shape, offsets = fields["dtype"], fields["shape"], fields["data_offsets"]
            bits = DTYPES.get(dtype)  # TypeError for a list; None for any other non-dtype
            if bits is None or type(shape) is not list or type(offsets) is not list:
                return None
            begin, end = offsets  # ValueError unless 2
            if type(begin) is not int or type(end) is not int or not 0 <= begin <= end <= U64_MAX:
                return None
            n_elements = 1
            for d in shape:
                if type(d) is not int or d < 0:  # type(), not isinstance: JSON true is no number
                    return None
                n_elements *= d
            # With every dim >= 1 the running product only grows, so the last one bounds them all;
            # a zero dim hides earlier ones, which the reference's checked fold still rejects.
            if n_elements > U64_MAX or (n_elements == 0 and not _fold_fits(shape)):
                return None
            bits *= n_elements
            if bits > U64_MAX or bits & 7 or bits >> 3 != end - begin:
                return None
            if begin != expected:
                in_order = False
            expected = end
            append(new_info(TensorInfo, (key, dtype, tuple(shape), begin, end, data_start)))
    except (ValueError, TypeError, RecursionError):  # bad JSON (json's errors are ValueErrors), bad layout
        return None
    if not in_order:
        # Writers list tensors in offset order, but any order is valid: tile them sorted.
        infos.sort(key=_SPAN)
        expected = 0
        for info in infos:
            if info.begin != expected:
                return None
            expected = info.end
    if data_start + expected != file_size:
        return None
    header = Header(name, n, data_start, file_size, metadata, tuple(infos))
    return header if len(header.by_name) == len(infos) else None  # else a tensor named twice


def _long_numbers_refused() -> bool:
    """Whether json refuses numbers of more than 4,300 digits (Python's default limit). Converting
    a digit string takes quadratic time, so without that limit one hostile number in a header
    could take hours; the careful path keeps numbers past 24 digits as text instead."""
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()  # missing before 3.10.7/3.11
    return 0 < limit <= 4300


def _has_minus_zero(text: str) -> bool:
    """Whether the text may hold the number -0, which decodes to the integer 0 but is a float to
    the reference. Only a "-0" right after [ , or : can be one (a date in the metadata is not);
    such a string sends its header to the careful path, which is only slower."""
    for match in _MINUS_ZERO.finditer(text):
        before = text[max(0, match.start() - 64) : match.start()].rstrip()
        if not before or before[-1] in "[,:":
            return True
    return False


def _fold_fits(shape: list[int]) -> bool:
    """The reference's checked product: every partial product of the dims within u64."""
    n = 1
    for d in shape:
        n *= d
        if n > U64_MAX or d > U64_MAX:
            return False
    return True
