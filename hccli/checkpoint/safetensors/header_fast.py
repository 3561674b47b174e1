"""The fast accept of the header parser: ordinary valid headers at the speed of C decoding.

It accepts only a header it has checked to the last rule, and returns None for anything else,
valid or not: the careful path (header_careful.py) alone judges and words the rest, so the
verdict is always the careful path's. msgspec decodes the bytes into typed records, checking in
C that every entry's shape and data_offsets hold integers and that the text is valid UTF-8 JSON
without NaN, lone surrogates or unbounded nesting.

msgspec keeps only the last of repeated keys and skips fields it was not asked for; one count,
with no second parse, rules both out: every ':' outside strings separates a key from its value,
so a header whose ':' count equals the keys decoded (plus the ':' inside decoded strings) has no
repeated key, no extra field and no other object anywhere. The same count for '-' proves there
is no negative number (no integer below 0, which msgspec is not asked to refuse: a bound checked
per value in C costs more than the count), so no -0 (which decodes to the integer 0 but is a
float to the reference).
Escapes that decode to ':' or '-' (or to surrogates) send the header to the careful path.
The checks on the decoded records run as C-level maps over whole columns, not per entry.
"""

import math
import re
from itertools import accumulate, chain, repeat
from operator import attrgetter, itemgetter, mul, sub
from typing import Any, Callable

from hccli.checkpoint.safetensors.header_types import (
    ENTRY_SPAN,
    DTYPES,
    METADATA_KEY,
    N_LEN,
    U64_MAX,
    ColumnHeader,
    Columns,
    Header,
    TensorInfo,
)

# \uD800-\uDFFF (surrogates: json decodes lone ones), \u002d ('-') and \u003a (':'), which
# would hide from the counts.
_ODD_ESCAPE_BYTES = re.compile(rb"\\u(?:[dD][89a-fA-F]|00(?:2[dD]|3[aA]))")
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_METADATA_FIRST = re.compile(rb'[ \t\n\r]*\{[ \t\n\r]*"__metadata__"[ \t\n\r]*:[ \t\n\r]*')
_DTYPE_NAMES = {d: d for d in DTYPES}
_BYTES = {d: bits // 8 for d, bits in DTYPES.items() if bits % 8 == 0}
_MAX_SPAN = U64_MAX >> 3  # the reference checks bits = elements * width <= u64; bits = 8 * span


def parse_fast(body: bytes, n: int, file_size: int, name: str) -> Header | None:
    """The header if it is an ordinary valid one, through msgspec when it is installed; None
    sends it to the careful path."""
    decode = _msgspec_decoders()
    if decode is None:
        return None
    if b"\\" in body and _ODD_ESCAPE_BYTES.search(body):
        return None
    try:
        entries = decode[0](body)
        has_metadata = METADATA_KEY in entries
        metadata = _metadata(body, decode) if has_metadata else None
        entries.pop(METADATA_KEY, None)
        # (most headers hold no '-' at all: one memchr instead of a count)
        minuses = body.count(b"-") if b"-" in body else 0
        if not _counts_match(body.count(b":"), minuses, entries, has_metadata, metadata):
            return None
        # A field left at its default (None, "", an empty shape text) fails a check of _assemble
        # with a TypeError or None, or the decode of its shape with a ValueError.
        records = entries.values()
        texts = list(map(bytes, map(_ATTR_SHAPE, records)))
        shape_of, count_of = _distinct_shapes(texts, decode[3])
        return _assemble(entries, list(map(_ATTR_DTYPE, records)), list(map(shape_of.__getitem__, texts)),
                         list(map(count_of.__getitem__, texts)), list(map(_ATTR_OFFSETS, records)), metadata, n,
                         file_size, name)
    except (ValueError, TypeError, AttributeError, RecursionError):  # msgspec's errors are ValueErrors
        return None


def _distinct_shapes(texts: list[bytes], decode: Callable[[bytes], tuple[int, ...]]
                     ) -> tuple[dict[bytes, tuple[int, ...]], dict[bytes, int]]:
    """(shape text -> shape, shape text -> elements), each distinct text decoded once (a header's
    ~2,000 entries have a few dozen shapes). Equal shapes written apart ("[4]", "[ 4 ]") are one
    tuple: one tuple per distinct shape, shared by every entry that has it (experts repeat a few
    shapes thousands of times), is the memory of a 100k-tensor checkpoint. A text that is no
    array of integers raises ValueError."""
    shape_of: dict[bytes, tuple[int, ...]] = {}
    count_of: dict[bytes, int] = {}
    seen: dict[tuple[int, ...], tuple[int, ...]] = {}
    for text in set(texts):
        shape = decode(text)
        shape_of[text] = seen.setdefault(shape, shape)
        count_of[text] = math.prod(shape)
    return shape_of, count_of


def _metadata(body: bytes, decode) -> dict[str, str] | None:
    """__metadata__, read from where writers put it, as the first key (safetensors does), without a
    second pass over the whole header; else by a decoder that skips everything else."""
    first = _METADATA_FIRST.match(body)
    if first is not None:
        start = first.end()
        if body.startswith(b"null", start):
            return None
        # A first '}' inside a string would cut the object short: then this decode fails.
        end = body.find(b"}", start)
        if body.startswith(b"{", start) and end > 0:
            try:
                return decode[2](body[start : end + 1])
            except ValueError:
                pass
    return decode[1](body).metadata


# --------------------------------------------------------------------------- checks


def _counts_match(colons: int, minuses: int, entries: dict[str, Any], has_metadata: bool,
                  metadata: dict[str, str] | None) -> bool:
    """Whether the text's ':' and '-' are exactly those of the decoded keys and strings (see the
    module's docstring): the tensors' names and 3 fields each, __metadata__ and its strings.
    Dtype names, the only other decoded strings, hold neither."""
    keys = 4 * len(entries) + has_metadata + (len(metadata) if metadata is not None else 0)
    if colons == keys and minuses == 0:
        # The usual header, without one ':' or '-' in any string: the text's colons are at least
        # its separators, which are at least the decoded keys, plus the colons of every decoded
        # string; all equal to the keys, so no string holds one (no names to join and count).
        return True
    strings = "".join(entries)
    if metadata is not None:
        strings += "".join(metadata) + "".join(metadata.values())
    return colons == keys + strings.count(":") and minuses == strings.count("-")


def _assemble(entries: dict[str, Any], dtypes: list, shapes: list, counts: list, offsets: list,
              metadata: dict[str, str] | None, n: int, file_size: int, name: str) -> Header | None:
    """The common header, its entries in offset order with whole-byte dtypes, in fewer passes:
    with the tiling checked first (each entry begins where the one before ends, the first at 0),
    the ends are the running sums of the spans, so every span equals its elements x width
    exactly when the running sums of elements x width equal the ends; and no span exceeds the
    data size, so no span check is needed when the data size is within the reference's bound.
    Anything else goes to `_assemble_general`. Raises TypeError for columns of the wrong types.
    The dtypes are DTYPES' own key strings already (msgspec's Literal): the column is kept as it is;
    the shapes are one tuple per distinct shape and counts their elements (_distinct_shapes)."""
    widths = list(map(_BYTES.get, dtypes))  # TypeError for an unhashable dtype
    if None in widths:  # an unknown dtype, or F4/F6: bits that are no whole bytes
        return _assemble_general(entries, dtypes, shapes, counts, offsets, metadata, n, file_size, name)
    flat = list(chain.from_iterable(offsets))
    begins, ends = flat[0::2], flat[1::2]
    data_start = N_LEN + n
    data_size = file_size - data_start
    if not (begins[:1] in ([], [0]) and begins[1:] == ends[:-1]) or data_size > _MAX_SPAN:
        return _assemble_general(entries, dtypes, shapes, counts, offsets, metadata, n, file_size, name)
    if (ends[-1] if ends else 0) != data_size:
        return None
    if list(accumulate(map(mul, counts, widths))) != ends:
        return None
    if 0 in counts and not all(_fold_fits(s) for s, c in zip(shapes, counts) if c == 0):
        return None
    return ColumnHeader.of_columns(name, n, data_start, file_size, metadata,
                                   Columns(list(entries), dtypes, shapes, begins, ends))


def _assemble_general(entries: dict[str, Any], dtypes: list, shapes: list, counts: list, offsets: list,
                      metadata: dict[str, str] | None, n: int, file_size: int, name: str) -> Header | None:
    """Apply the reference's per-entry rules and the tiling rule to whole columns. Raises
    TypeError for columns of the wrong types."""
    # one str object per dtype name, shared by every entry that has it, as the shapes are
    dtypes = list(map(_DTYPE_NAMES.get, dtypes))  # TypeError for an unhashable dtype
    if None in dtypes:
        return None
    widths = list(map(DTYPES.__getitem__, dtypes))
    begins, ends = list(map(_FIRST, offsets)), list(map(_SECOND, offsets))
    spans = list(map(sub, ends, begins))
    # Tiling from 0 to the end of the file keeps every end within the file: the file's data size
    # bounds them all, so only it is checked against u64.
    if file_size - N_LEN - n > U64_MAX or spans and (min(spans) < 0 or max(spans) > _MAX_SPAN):
        return None
    # elements * width == 8 * span: whole bytes, the span right, and (span <= u64 / 8) no overflow of
    # the bits or of the elements, whose every partial product is at most the whole when no dim is 0.
    if list(map(mul, counts, widths)) != list(map(mul, spans, repeat(8))):
        return None
    if 0 in counts and not all(_fold_fits(s) for s, c in zip(shapes, counts) if c == 0):
        return None
    data_start = N_LEN + n
    if begins[:1] in ([], [0]) and begins[1:] == ends[:-1]:
        if data_start + (ends[-1] if ends else 0) != file_size:
            return None
        return ColumnHeader.of_columns(name, n, data_start, file_size, metadata,
                                       Columns(list(entries), dtypes, shapes, begins, ends))
    # Writers list tensors in offset order, but any order is valid: tile them sorted.
    infos = sorted(map(tuple.__new__, repeat(TensorInfo), zip(entries, dtypes, shapes, begins, ends,
                                                              repeat(data_start))), key=ENTRY_SPAN)
    end = 0
    for info in infos:
        if info.begin != end:
            return None
        end = info.end
    if data_start + end != file_size:
        return None
    return Header(name, n, data_start, file_size, metadata, tuple(infos))


def _fold_fits(shape) -> bool:
    """The reference's checked product: every partial product of the dims within u64."""
    n = 1
    for d in shape:
        n *= d
        if n > U64_MAX or d > U64_MAX:
            return False
    return True


# --------------------------------------------------------------------------- msgspec

_ATTR_DTYPE, _ATTR_SHAPE, _ATTR_OFFSETS = attrgetter("dtype"), attrgetter("shape"), attrgetter("data_offsets")
_DECODERS: list[tuple[Callable[[bytes], Any], ...] | None] = []


def msgspec_installed() -> bool:
    return _msgspec_decoders() is not None


def _msgspec_decoders() -> tuple[Callable[[bytes], Any], ...] | None:
    """msgspec's decoders (the header, its metadata alone, an object of strings, a shape), built
    on first use; None when msgspec is not installed."""
    if not _DECODERS:
        _DECODERS.append(_build_msgspec_decoders())
    return _DECODERS[0]


def _build_msgspec_decoders():
    try:
        import msgspec
    except ImportError:
        return None
    from typing import Literal, Optional

    # Every field has a default so that __metadata__, an object of any keys, decodes too (its keys
    # are skipped; the second decoder reads it). A default left in a tensor entry fails a check.
    # A dtype is one of DTYPES' names, returned as DTYPES' own key string (one object per dtype,
    # its hash cached); any other string is a decode error, so the careful path words it.
    known = Literal[tuple(DTYPES)]  # type: ignore[valid-type]

    # A shape is kept as its text (msgspec.Raw: no tuple and no integers made per entry, the JSON
    # still checked) and each distinct text decoded by the fourth decoder (_distinct_shapes).
    # Integers of any sign within msgspec's range (below 2**64): no '-' is left by _counts_match,
    # and the u64 bounds are checked after.
    class Entry(msgspec.Struct, gc=False):
        dtype: known = ""  # type: ignore[valid-type]
        shape: msgspec.Raw = msgspec.Raw(b"")
        data_offsets: Optional[tuple[int, int]] = None

    class MetadataOnly(msgspec.Struct, gc=False, rename={"metadata": METADATA_KEY}):
        metadata: Optional[dict[str, str]] = None

    return (msgspec.json.Decoder(dict[str, Optional[Entry]]).decode, msgspec.json.Decoder(MetadataOnly).decode,
            msgspec.json.Decoder(dict[str, str]).decode, msgspec.json.Decoder(tuple[int, ...]).decode)
