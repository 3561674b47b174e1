"""The careful path of the header parser: slow, and the only one that raises.

header.py's fast path accepts only ordinary valid headers; everything else comes
here, where every rule of the reference implementation is checked one by one and
each rejection is worded with its stable code. Loaded only when needed.
"""

from __future__ import annotations

import json
import re
from json.decoder import scanstring
from typing import Any, Iterator

from hccli.base.bounded import MAX_JSON_DEPTH, nests_deeper_than, one_line
from hccli.checkpoint.safetensors.header_types import (
    DTYPES,
    METADATA_KEY,
    N_LEN,
    U64_MAX,
    ENTRY_SPAN,
    Header,
    HeaderError,
    TensorInfo,
    quote,
)


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


_JSON_SPACE = " \t\n\r"
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _check_tree(obj: Any, check_strings: bool, depth: int = 1) -> None:
    """Apply the reference parser's limits Python's json lacks: nesting depth, and (only when
    the text has \\uD8xx-style escapes) strings that are not valid Unicode. Each container's
    items are sorted by type in C; only containers with something inside are walked further
    (an empty one only counts for the depth), so a header of a million [] costs no Python loop."""
    stack: list[tuple[Any, int]] = [(obj, depth)]
    while stack:
        value, depth = stack.pop()
        if type(value) is dict:
            if check_strings:
                for key in value:
                    _check_unicode(key)
            value = value.values()
        elif type(value) is not list:
            continue
        kinds = set(map(type, value))
        if check_strings and str in kinds:
            for item in value:
                if type(item) is str:
                    _check_unicode(item)
        if dict in kinds or list in kinds:
            if depth + 1 > MAX_JSON_DEPTH:
                raise _NonStandard(f"containers nested deeper than {MAX_JSON_DEPTH} levels")
            stack.extend((item, depth + 1) for item in filter(None, value) if type(item) in _CONTAINERS)


_CONTAINERS = (dict, list)


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


_WHITESPACE = re.compile(r"[ \t\n\r]*")
# Bytes that may start a number needing a Python hook, mapped so that one search finds them.
_NUMBER_CLASSES = bytes.maketrans(b"0123456789E", b"9999999999e")


def _decoders(text: str) -> tuple[json.JSONDecoder, json.JSONDecoder]:
    """json's decoder with the hooks this text needs, and one for arrays that are refused
    anyway, whose numbers are not converted (only checked for overflow where one may).

    A Python hook costs a call per number, so it is only set where a number may need it: -0 (a
    float to the reference) or 25+ digits (kept as text, not converted in quadratic time) for
    integers; an exponent of 3+ digits or 200+ leading digits for floats that may overflow
    (10^200 * 10^99 is still finite)."""
    classes = text.encode("utf-8", "surrogatepass").translate(_NUMBER_CLASSES)
    hooks: dict[str, Any] = {}
    if "-0" in text or b"9" * 25 in classes:
        hooks["parse_int"] = _parse_int
    if b"e999" in classes or b"e+999" in classes or b"9" * 200 in classes:
        hooks["parse_float"] = _parse_float
    common = {"object_pairs_hook": _object_pairs, "parse_constant": _parse_constant}
    # bool: a C call that allocates nothing (every number becomes True); 25M floats cost 0.8 GB.
    refused = json.JSONDecoder(**common, parse_int=bool, parse_float=hooks.get("parse_float", bool))
    return json.JSONDecoder(**common, **hooks), refused


def _members(text: str, scan: Any, scan_refused: Any) -> Iterator[tuple[str, Any]]:
    """The (key, value) pairs of the top-level object in `text` (which starts with '{' after
    whitespace), read one value at a time with json's own scanners and wording their errors.
    An array value (which the caller refuses) is read with `scan_refused`."""
    ws = _WHITESPACE.match
    idx = ws(text, ws(text, 0).end() + 1).end()
    if text[idx : idx + 1] == "}":
        idx += 1
    else:
        while True:
            if text[idx : idx + 1] != '"':
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, idx)
            key, idx = scanstring(text, idx + 1)
            idx = ws(text, idx).end()
            if text[idx : idx + 1] != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", text, idx)
            idx = ws(text, idx + 1).end()
            try:
                value, idx = (scan_refused if text[idx : idx + 1] == "[" else scan)(text, idx)
            except StopIteration as exc:
                raise json.JSONDecodeError("Expecting value", text, exc.value) from None
            yield key, value
            idx = ws(text, idx).end()
            if text[idx : idx + 1] == "}":
                idx += 1
                break
            if text[idx : idx + 1] != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, idx)
            idx = ws(text, idx + 1).end()
    idx = ws(text, idx).end()
    if idx != len(text):
        raise json.JSONDecodeError("Extra data", text, idx)


def parse_careful(text: str, n: int, file_size: int, name: str) -> Header:
    first = text.lstrip(_JSON_SPACE)[:1]
    if first == "[":
        # Refused whatever it holds, as the reference refuses a header that starts as an array
        # (a sequence where it expects a map): building it could cost gigabytes ([[],[],...]).
        if nests_deeper_than(text, MAX_JSON_DEPTH):
            raise HeaderError(name, "bad_json", f"header contains containers nested deeper than {MAX_JSON_DEPTH}"
                              " levels, expected standard JSON")
        raise HeaderError(name, "not_object", "header is a JSON array, expected an object")
    decoder, refused = _decoders(text)
    check_strings = _SURROGATE_ESCAPE.search(text) is not None
    data_start = N_LEN + n
    metadata: dict[str, str] | None = None
    entries: list[TensorInfo] = []
    try:
        if first != "{":  # a scalar, or not JSON: nothing big to build
            obj = decoder.decode(text)
            raise HeaderError(name, "not_object", f"header is a JSON {_type_name(obj)}, expected an object")
        # Member by member, each checked as soon as it is read: a hostile value fails before the
        # rest is built, as in the reference's streaming parse.
        seen: set[str] = set()
        for key, value in _members(text, decoder.scan_once, refused.scan_once):
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
            if check_strings:
                _check_unicode(key)
                if type(value) is str:
                    _check_unicode(value)
            _check_tree(value, check_strings, depth=2)
            if key == METADATA_KEY:
                metadata = _check_metadata(value, name)
            else:
                entries.append(_check_entry(key, value, data_start, name))
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

    # Tiling rule of Metadata::validate: sorted by offsets, each starts where the last ended.
    ordered = sorted(entries, key=ENTRY_SPAN)
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
    if bits > U64_MAX:
        raise fail("overflow", f"shape {_show(shape)} of {dtype} has more than 2^64-1 bits")
    if bits % 8:
        raise fail("partial_byte", f"shape {_show(shape)} of {dtype} is {bits} bits, expected a whole number of bytes")
    if bits // 8 != end - begin:
        raise fail("span_mismatch", f"shape {_show(shape)} of {dtype} needs {bits // 8:,} bytes,"
                   f" data_offsets [{begin}, {end}] span {end - begin:,}")
    return TensorInfo(key, dtype, tuple(shape), begin, end, data_start)
