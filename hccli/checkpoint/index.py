"""model.safetensors.index.json: its weight_map, metadata and the shard files it names.

Two paths give one verdict. The fast accept decodes the ordinary index (a weight_map of strings,
metadata, nothing else) with msgspec in C, faster than the standard library on a 100k-tensor
index, and declines anything else; the careful path reads it with the bounded JSON reader and
words every rejection.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

from hccli.base.bounded import one_line, read_json
from hccli.checkpoint.shardset import Index
from hccli.checkpoint.store import MAX_SHARDS
from hccli.base.errors import HcError

_EXPECTED = "a safetensors index"


def parse_index(raw: bytes, path: Path | str, shard_files: list[str] | None = None) -> Index:
    """`shard_files`, the .safetensors files beside the index, speed up the usual index whose
    every shard is among them (see _parse_index_fast)."""
    where = one_line(str(path))
    fast = _parse_index_fast(raw, where, shard_files)
    if fast is not None:
        wm, meta = fast
    else:
        wm, meta = _parse_index_careful(raw, where)
    if not isinstance(meta, dict):
        raise HcError(f"{where}: key 'metadata': expected an object")
    total = meta.get("total_size")
    if total is not None and (not isinstance(total, int) or isinstance(total, bool) or not 0 <= total < 2**64):
        raise HcError(f"{where}: key 'metadata.total_size': expected a non-negative integer below 2**64, got "
                      f"{one_line(repr(total), 40)}")
    return Index(path, wm, total, meta, list(dict.fromkeys(wm.values())))


def _parse_index_careful(raw: bytes, where: str) -> tuple[dict[str, str], Any]:
    """weight_map and metadata (or {}) by the bounded JSON reader, each rejection worded."""
    doc = read_json(raw, where, _EXPECTED)
    if not isinstance(doc, dict) or not isinstance(doc.get("weight_map"), dict):
        raise HcError(f"{where}: key 'weight_map': expected an object of tensor name -> shard file")
    wm = doc["weight_map"]
    for k, v in wm.items():
        if not isinstance(v, str):
            raise HcError(f"{where}: key 'weight_map.{one_line(k, 80)}': expected a shard file name, got "
                          f"{type(v).__name__}")
    return wm, doc.get("metadata") or {}


def _parse_index_fast(raw: bytes, where: str, shard_files: list[str] | None = None
                      ) -> tuple[dict[str, str], Any] | None:
    """The ordinary index decoded by msgspec; None for anything else, or without msgspec, and the
    careful path judges it. msgspec keeps the last of repeated keys and refuses invalid UTF-8 as
    json does; metadata, small, goes through the bounded JSON reader for its integer rule."""
    decode = _index_decoder()
    if decode is None or _metadata_may_repeat(raw):
        return None
    if shard_files and len(shard_files) <= MAX_SHARDS:
        # Values checked in C against the files present, and each one the listing's own string
        # rather than a new one per tensor (~100k), which is much of the decode. An index naming
        # any other file (a missing shard, an unsafe name) is decoded the general way.
        try:
            doc = _index_decoder(tuple(shard_files))(raw)
            return doc.weight_map, read_json(bytes(doc.metadata), where, _EXPECTED) or {}
        except (ValueError, RecursionError, HcError):
            pass
    try:
        doc = decode(raw)
        meta = read_json(bytes(doc.metadata), where, _EXPECTED)
    except (ValueError, RecursionError, HcError):  # msgspec's DecodeError and ValidationError are ValueErrors
        return None
    return doc.weight_map, meta or {}


# An escape of a printable ASCII character (json.dumps never writes one): it could spell a key.
_ESCAPED_ASCII = re.compile(rb"\\u00[2-7]")


def _metadata_may_repeat(raw: bytes) -> bool:
    """Whether "metadata" may be a key more than once. msgspec keeps the last one unread, while the
    careful path reads every one (and refuses an integer of more than MAX_INT_DIGITS digits in any
    of them): such an index goes to the careful path. Each weight_map msgspec reads is checked in
    full, so a repeated weight_map or name needs no test."""
    # (one byte's memchr first: most indexes hold no backslash at all)
    return raw.count(b'"metadata"') > 1 or (b"\\" in raw and _ESCAPED_ASCII.search(raw) is not None)


_INDEX_DECODERS: dict[tuple[str, ...] | None, Callable[[bytes], Any] | None] = {}


def _index_decoder(shard_files: tuple[str, ...] | None = None) -> Callable[[bytes], Any] | None:
    """msgspec's index decoder: weight_map values any string, or (shard_files) one of those."""
    if shard_files not in _INDEX_DECODERS:
        try:
            import msgspec
        except ImportError:
            _INDEX_DECODERS[shard_files] = None
        else:
            from typing import Literal

            value = str if shard_files is None else Literal[shard_files]  # type: ignore[valid-type]
            # defstruct: this module's annotations are strings that msgspec would resolve here
            doc = msgspec.defstruct("IndexDoc", [("weight_map", dict[str, value]),
                                                 ("metadata", msgspec.Raw, msgspec.Raw(b"null"))],
                                    forbid_unknown_fields=True, gc=False)
            _INDEX_DECODERS[shard_files] = msgspec.json.Decoder(doc).decode
    return _INDEX_DECODERS[shard_files]
