"""A hardened safetensors header parser that works on bytes.

The rules are those of the reference implementation (huggingface/safetensors,
safetensors/src/tensor.rs: `SafeTensors::read_metadata` and `Metadata::validate`),
made stricter where that protects users: duplicate JSON keys, NaN/Infinity
literals and lone surrogate escapes are rejected instead of silently accepted.
Files that are not safetensors at all (LFS pointers, HTML error pages, torch
zips, pickles, GGUF ...) are named for what they are.

Layout: 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the
data buffer, which the tensors' data_offsets (relative to the buffer) must tile
from 0 to the end of the file without gap or overlap.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from hccli.checkpoint.source import ByteSource, one_line
from hccli.errors import HcError

MAX_HEADER_SIZE = 100_000_000
N_LEN = 8
U64_MAX = 2**64 - 1
# Bytes looked at to say what a non-safetensors file is.
SNIFF_LEN = 512

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


@dataclass(frozen=True)
class TensorInfo:
    """One header entry. begin/end are data_offsets, relative to the data buffer."""

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
        n = 1
        for d in self.shape:
            n *= d
        return n

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
        object.__setattr__(self, "by_name", {t.name: t for t in self.tensors})

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


# --------------------------------------------------------------------------- sniffing

_PICKLE = "is a Python pickle (a legacy PyTorch checkpoint?)"
_PICKLE_FRAME_STARTS = (b"\x80\x04\x95", b"\x80\x05\x95")


def sniff(head: bytes) -> tuple[str, str] | None:
    """(code, what the file looks like) for well-known non-safetensors content, else None."""
    head = head[:SNIFF_LEN]
    if head.startswith(b"version https://git-lfs.github.com/spec/"):
        size = _lfs_size(head)
        of = f" to a {size:,}-byte object" if size is not None else ""
        return "lfs_pointer", f"is a Git LFS pointer{of}, not the weights (run git lfs pull?)"
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    low = text[:16].lower()
    if low.startswith((b"<!doctype html", b"<html", b"<head", b"<body")):
        return "html", "is an HTML page (an error or login page saved instead of the file?)"
    if low.startswith(b"<?xml"):
        return "xml", "is an XML document (a storage/CDN error response saved instead of the file?)"
    if text.startswith((b"{", b"[")):
        return "json_file", "is a JSON document (an index or config file?)"
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip", "is a zip archive (a PyTorch .bin/.pt checkpoint?)"
    if head.startswith(b"\x1f\x8b"):
        return "gzip", "is gzip-compressed (decompress it first?)"
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "pickle", _PICKLE
    if head.startswith(b"GGUF"):
        return "gguf", "is a GGUF file (llama.cpp format)"
    if head.startswith(b"\x93NUMPY"):
        return "npy", "is a NumPy .npy array file"
    if head and _looks_like_text(head):
        start = head[:40].decode("utf-8", "replace")
        return "text_file", f"is a text file starting {quote(start, 60)}"
    return None


def _lfs_size(head: bytes) -> int | None:
    for line in head.split(b"\n"):
        if line.startswith(b"size "):
            digits = line[5:].strip()
            if digits.isdigit() and len(digits) < 25:
                return int(digits)
    return None


def _looks_like_text(head: bytes) -> bool:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut off by the sniff window is still text.
        if exc.start < len(head) - 3:
            return False
        text = head[: exc.start].decode("utf-8")
    return bool(text) and all(ch.isprintable() or ch in "\t\r\n" for ch in text)


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
    if head[:3] in _PICKLE_FRAME_STARTS:
        # Protocol 4/5 pickles with a tiny first frame read as a length under the cap.
        raise HeaderError(name, "pickle", f"not a safetensors file: it {_PICKLE}")
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


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        self.key = key


class _NonStandard(Exception):
    def __init__(self, what: str):
        self.what = what


class _BigNumber:
    """An integer literal too long to be a u64; kept as text so checks reject it by type."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text if len(self.text) <= 24 else f"{self.text[:12]}...({len(self.text)} digits)"


def _object_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _parse_constant(literal: str) -> Any:
    raise _NonStandard(f"the non-standard literal {literal}")


def _parse_int(text: str) -> Any:
    if text == "-0":
        return -0.0  # the reference reads -0 as a float, so it is no shape or offset either
    return int(text) if len(text) <= 24 else _BigNumber(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _NonStandard(f"the out-of-range number {text[:24]}")
    return value


def _check_tree(obj: Any, check_strings: bool) -> None:
    """Apply the reference parser's limits Python's json lacks: nesting depth, and (only when
    the text has \\uD8xx-style escapes) strings that are not valid Unicode."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise _NonStandard(f"containers nested deeper than {MAX_JSON_DEPTH} levels")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if check_strings and isinstance(key, str):
                    _check_unicode(key)
                if isinstance(item, (dict, list)):
                    stack.append((item, depth + 1))
                elif check_strings and isinstance(item, str):
                    _check_unicode(item)


def _check_unicode(text: str) -> None:
    # json decodes "\ud800" to a lone surrogate, which no UTF-8 writer (or printer) accepts.
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            shown = text.encode("utf-8", "backslashreplace").decode("ascii", "replace")
            raise _NonStandard(f"a lone surrogate escape in {quote(shown)}") from None


def _show(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, default=repr, ensure_ascii=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float, _BigNumber)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__  # pragma: no cover


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _is_u64(value: Any) -> bool:
    # bool is an int subclass in Python; JSON true is not a number.
    return type(value) is int and 0 <= value <= U64_MAX


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
    n = len(body)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HeaderError(name, "bad_utf8", f"header is not valid UTF-8 (byte 0x{body[exc.start]:02x} at file offset"
                          f" {N_LEN + exc.start}), expected UTF-8 JSON") from None
    try:
        obj = json.loads(text, object_pairs_hook=_object_pairs, parse_constant=_parse_constant,
                         parse_int=_parse_int, parse_float=_parse_float)
        _check_tree(obj, check_strings=_SURROGATE_ESCAPE.search(text) is not None)
    except _DuplicateKey as exc:
        raise HeaderError(name, "duplicate_key",
                          f"header has the key {quote(exc.key)} more than once, expected unique keys") from None
    except _NonStandard as exc:
        raise HeaderError(name, "bad_json", f"header contains {exc.what}, expected standard JSON") from None
    except json.JSONDecodeError as exc:
        at = N_LEN + len(text[: exc.pos].encode("utf-8"))
        raise HeaderError(name, "bad_json", f"header is not valid JSON ({exc.msg} at file offset {at})") from None
    except RecursionError:
        raise HeaderError(name, "bad_json", "header JSON nests too deeply, expected a flat object") from None
    except ValueError as exc:  # pragma: no cover - json's own limits
        raise HeaderError(name, "bad_json", f"header is not valid JSON ({one_line(str(exc), 100)})") from None
    if not isinstance(obj, dict):
        raise HeaderError(name, "not_object", f"header is a JSON {_type_name(obj)}, expected an object")

    data_start = N_LEN + n
    metadata: dict[str, str] | None = None
    entries: list[TensorInfo] = []
    for key, entry in obj.items():
        if key == METADATA_KEY:
            metadata = _check_metadata(entry, name)
        else:
            entries.append(_check_entry(key, entry, data_start, name))

    # Tiling rule of Metadata::validate: sorted by offsets, each starts where the last ended.
    ordered = sorted(entries, key=lambda t: (t.begin, t.end))
    expected = 0
    previous: TensorInfo | None = None
    for info in ordered:
        if info.begin != expected:
            span = f"data_offsets [{info.begin}, {info.end}]"
            if previous is None:
                detail = f"data_offsets start at {info.begin}, expected the first tensor at 0"
            elif info.begin > expected:
                detail = (f"{span} leave a gap of {_count(info.begin - expected, 'byte')} after"
                          f" {quote(previous.name)} (which ends at {expected})")
            else:
                detail = f"{span} overlap {quote(previous.name)} [{previous.begin}, {previous.end}]"
            raise HeaderError(name, "gap_or_overlap", detail, tensor=info.name)
        expected = info.end
        previous = info

    needed = data_start + expected
    if needed != file_size:
        # The reference's MetadataIncompleteBuffer, split by direction because the remedies differ.
        said = f"expected {needed:,} bytes (header plus data_offsets up to {expected:,}), file has {file_size:,}"
        if needed > file_size:
            raise HeaderError(name, "truncated", f"{said} (truncated download?)")
        raise HeaderError(name, "trailing_bytes", f"{said}: {_count(file_size - needed, 'byte')} after the last tensor")
    return Header(name, n, data_start, file_size, metadata, tuple(ordered))


def _check_metadata(entry: Any, name: str) -> dict[str, str] | None:
    # The reference reads __metadata__ as Option<HashMap<String, String>>, so null is allowed.
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise HeaderError(name, "bad_metadata",
                          f"{METADATA_KEY} is a JSON {_type_name(entry)}, expected an object of strings")
    for key, value in entry.items():
        if not isinstance(value, str):
            raise HeaderError(name, "bad_metadata", f"{METADATA_KEY}[{quote(key)}] is a JSON {_type_name(value)}"
                              f" ({_show(value, 40)}), expected a string")
    return dict(entry)


def _check_entry(key: str, entry: Any, data_start: int, name: str) -> TensorInfo:
    def fail(code: str, detail: str) -> HeaderError:
        return HeaderError(name, code, detail, tensor=key)

    expected_fields = "expected an object with dtype, shape, data_offsets"
    if not isinstance(entry, dict):
        raise fail("bad_entry", f"entry is a JSON {_type_name(entry)}, {expected_fields}")
    for needed in ("dtype", "shape", "data_offsets"):
        if needed not in entry:
            raise fail("bad_entry", f"entry has no {needed!r}, {expected_fields}")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise fail("unknown_dtype",
                   f"dtype {_show(dtype, 40)} is not a safetensors dtype, expected one of {', '.join(DTYPES)}")
    if not isinstance(shape, list) or not all(_is_u64(d) for d in shape):
        raise fail("bad_shape", f"shape {_show(shape)} is not a list of integers in 0..2^64-1")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_u64(o) for o in offsets):
        raise fail("bad_offsets", f"data_offsets {_show(offsets)} is not [begin, end] with integers in 0..2^64-1")
    begin, end = offsets
    if begin > end:
        raise fail("bad_offsets", f"data_offsets [{begin}, {end}] end before they begin")
    # Same fold as the reference (try_fold of checked_mul): any partial product past u64 overflows.
    n_elements = 1
    for d in shape:
        n_elements *= d
        if n_elements > U64_MAX:
            raise fail("overflow", f"shape {_show(shape)} has more than 2^64-1 elements")
    bits = n_elements * DTYPES[dtype]
    described = f"shape {_show(shape)} of {dtype}"
    if bits > U64_MAX:
        raise fail("overflow", f"{described} has more than 2^64-1 bits")
    if bits % 8:
        raise fail("partial_byte", f"{described} is {bits} bits, expected a whole number of bytes")
    if bits // 8 != end - begin:
        raise fail("span_mismatch",
                   f"{described} needs {bits // 8:,} bytes, data_offsets [{begin}, {end}] span {end - begin:,}")
    return TensorInfo(key, dtype, tuple(shape), begin, end, data_start)
