"""Shard headers laid out byte for byte as safetensors' own serializer lays them.

The rule, from `prepare` and `impl Serialize for Metadata` in
huggingface/safetensors safetensors/src/tensor.rs (the same from v0.4 to 0.8;
tests/test_st_layout.py checks it against the installed package):

- tensors are sorted by dtype, descending in the order of the `Dtype` enum
  (which the source calls "increasing alignment order"), then by name
  (byte order);
- data_offsets are laid back to back in that order from 0;
- the header is serde_json's compact form: `__metadata__` first and only when
  given, then each tensor as {"dtype", "shape", "data_offsets"}, no spaces,
  non-ASCII written as UTF-8;
- the header is padded with spaces to a multiple of 8 bytes, and its length
  is the 8-byte little-endian prefix.
"""

from __future__ import annotations

import json
from operator import add, attrgetter
from typing import Iterable, Sequence, TypeVar

# safetensors' `Dtype` enum, in declaration order (its derived Ord)
DTYPE_ORDER = ("BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ",
               "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64", "I64", "U64")
DTYPE_RANK = {d: i for i, d in enumerate(DTYPE_ORDER)}
_DESCENDING = {d: bytes([len(DTYPE_ORDER) - 1 - i]) for d, i in DTYPE_RANK.items()}
ALIGN = 8

T = TypeVar("T")


def serializer_order(items: Iterable[T], name=attrgetter("name"), dtype=attrgetter("dtype")) -> list[T]:
    """`items` in the order safetensors' serializer writes them: dtype descending, then name."""
    items = list(items)
    # One bytes key per item, built by C-level maps (a checkpoint has ~100k): the dtype's place
    # from the end as one byte, then the name's UTF-8, compared by memcmp.
    keys = list(map(add, map(_DESCENDING.__getitem__, map(dtype, items)), map(str.encode, map(name, items))))
    return list(map(items.__getitem__, sorted(range(len(items)), key=keys.__getitem__)))


def header_bytes(tensors: Sequence[tuple[str, str, tuple[int, ...], int]],
                 metadata: dict[str, str] | None = None) -> bytes:
    """The 8-byte length and the JSON header for (name, dtype, shape, nbytes), offsets in the
    order given (serializer_order first for what safetensors itself would write)."""
    doc: dict = {}
    if metadata is not None:
        doc["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape, nbytes in tensors:
        doc[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    body = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    body += b" " * (-len(body) % ALIGN)
    return len(body).to_bytes(8, "little") + body
