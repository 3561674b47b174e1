"""`hc inspect --metadata`: each file's own metadata, as its header holds it: safetensors'
`__metadata__` (an object of strings) and a GGUF's key/values (the store's bounded reading:
checkpoint/gguf/store.py keeps scalars, strings and small arrays, and summarises the rest by type
and length).

What is shown is bounded whatever a header holds: keys per file (MAX_METADATA_KEYS), characters
of a string (MAX_METADATA_CHARS), items of an array (MAX_METADATA_ITEMS). Files whose entries are
the same (48 shards each saying {"format": "pt"}) are one group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hccli.checkpoint.shardset import Checkpoint, Shard
from hccli.base.jsonable import OMIT_IF_NONE

# keys listed per file: a GGUF's are ~40 (MAX_KV bounds what the store keeps), safetensors' a few
MAX_METADATA_KEYS = 256
# characters of one string value shown: a GGUF's chat template is a few KB, a key's name less
MAX_METADATA_CHARS = 1024
# first items of an array shown (the store keeps those of small arrays only)
MAX_METADATA_ITEMS = 16


@dataclass(frozen=True, slots=True)
class MetadataEntry:
    key: str
    type: str  # "string", "integer", "float", "bool", "array of T"
    value: Any  # a scalar; a string's first characters; an array's first items (None: not read)
    length: int | None = field(default=None, metadata=OMIT_IF_NONE)  # an array's items; a string's, when cut


@dataclass(frozen=True, slots=True)
class FileMetadata:
    """The files that hold the same entries, and those entries (none: the file has no metadata)."""

    files: list[str]
    format: str  # "safetensors" or "gguf"
    entries: list[MetadataEntry]
    more_keys: int  # past MAX_METADATA_KEYS, not listed


def _string(key: str, text: str) -> MetadataEntry:
    cut = len(text) > MAX_METADATA_CHARS
    return MetadataEntry(key, "string", text[:MAX_METADATA_CHARS], len(text) if cut else None)


def _entry(key: str, v: Any) -> MetadataEntry:
    if isinstance(v, str):
        return _string(key, v)
    if isinstance(v, bool):
        return MetadataEntry(key, "bool", v)
    if isinstance(v, int):
        return MetadataEntry(key, "integer", v)
    if isinstance(v, float):
        return MetadataEntry(key, "float", v)
    if isinstance(v, list):  # a small array of scalars, kept whole by the store
        kinds = {type(x).__name__ for x in v}
        kind = {"int": "integer", "float": "float", "bool": "bool"}.get(kinds.pop(), "value") if len(kinds) == 1 else "value"
        return MetadataEntry(key, f"array of {kind}", v[:MAX_METADATA_ITEMS], len(v))
    if isinstance(v, dict) and "array_of" in v:  # summarised by the store: its items were passed over
        return MetadataEntry(key, f"array of {str(v.get('type', '')).lower() or 'value'}", None, int(v["array_of"]))
    if isinstance(v, dict) and "string_of" in v:  # past the bytes the store keeps
        return MetadataEntry(key, "string", None, int(v["string_of"]))
    return MetadataEntry(key, type(v).__name__, None)


def _of_shard(s: Shard) -> tuple[str, list[tuple[str, Any]]]:
    kv = getattr(s.header, "kv", None)  # a GGUF header (checkpoint/gguf/store.py's GgufHeader)
    if kv is not None:
        return "gguf", list(kv.items())
    return "safetensors", list((s.header.metadata or {}).items())


def file_metadata(ckpt: Checkpoint) -> list[FileMetadata]:
    """Each readable file's metadata, files of the same entries grouped, in shard order."""
    groups: dict[tuple, FileMetadata] = {}
    for s in ckpt.readable():
        fmt, items = _of_shard(s)
        entries = [_entry(k, v) for k, v in items[:MAX_METADATA_KEYS]]
        key = (fmt, tuple((e.key, e.type, repr(e.value), e.length) for e in entries), len(items))
        group = groups.get(key)
        if group is None:
            groups[key] = FileMetadata([s.file], fmt, entries, max(0, len(items) - MAX_METADATA_KEYS))
        else:
            group.files.append(s.file)
    return list(groups.values())
