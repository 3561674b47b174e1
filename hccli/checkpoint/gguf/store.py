"""GGUF files as shards of the checkpoint store: the header parsed over byte ranges
(so a hub GGUF costs its header and the HC tensors, never the weights), each
tensor a TensorInfo like a safetensors entry, and values dequantised by the
`gguf` package.

The header walk is gguf_file's bounded pre-scan (every count, length and the
total size checked against the file before anything is built), here keeping
what it reads. A TensorInfo's dtype is the GGML type name ("F32", "F16",
"Q8_0", ...) and its shape is canonical (GGUF's `ne` reversed), so that the
rest of `hc` reads a GGUF like any checkpoint. `gguf` is imported only here and
only when a .gguf is opened.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Iterable

from hccli.base.bounded import one_line
from hccli.checkpoint.gguf.prescan import (
    GGUF_MAGIC,
    KEPT_METADATA_BYTES,
    MAX_HEADER_BYTES,
    MAX_KV,
    MAX_SPLITS,
    MAX_TENSORS,
    SMALL_ARRAY,
    SPLIT_NAME,
    VERSIONS,
    HeaderScan,
)
from hccli.checkpoint.safetensors.header_types import Header, TensorInfo
from hccli.checkpoint.source import ByteSource
from hccli.base.errors import HcError

if TYPE_CHECKING:  # numpy only where values are decoded: opening a safetensors checkpoint never needs it
    import numpy as np

# GGUFValueType -> struct format of its scalar, and every type's name
_FMT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_SCALAR = {t: struct.Struct("<" + f) for t, f in _FMT.items()}
VALUE_TYPES = ("UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL", "STRING", "ARRAY",
               "UINT64", "INT64", "FLOAT64")
MAX_ARRAY = 1 << 24  # entries of one metadata array: a tokenizer's vocabulary is at most MAX_VOCAB
MAX_KEY_BYTES = 1 << 24  # metadata key names in all: each is kept (a real header's are a few KB)
FLOAT_TYPES = ("F32", "F16", "BF16")
# relative rounding of a value stored in the type (half an ulp): F16 keeps 11 significant bits, BF16 8
ROUNDING = {"F16": "2^-11", "BF16": "2^-8"}
_NAME_MAX = 1 << 16
_INFO_MAX = 8 + _NAME_MAX + 4 + 8 * 8 + 12  # the longest tensor record
_U32, _U64, _TAIL = struct.Struct("<I"), struct.Struct("<Q"), struct.Struct("<IQ")
_DIMS = {n: struct.Struct(f"<{n}Q") for n in range(1, 9)}
_new = tuple.__new__
_BEGIN = itemgetter(3)  # TensorInfo.begin


@dataclass(frozen=True)
class GgufHeader(Header):
    """A GGUF file's header in the store's terms, with its metadata (key -> value)."""

    kv: dict[str, Any] = field(default_factory=dict)

    @property
    def architecture(self) -> str:
        arch = self.kv.get("general.architecture")
        return arch if isinstance(arch, str) else ""


def _value(h: HeaderScan, vtype: int, budget: list[int]) -> Any:
    """One metadata value: a scalar as is; a string or array of scalars while `budget` (bytes
    kept) lasts; anything else summarised by its type and length, its bytes passed over."""
    if vtype in _SCALAR:
        fmt = _SCALAR[vtype]
        return fmt.unpack(h.take(fmt.size))[0]
    if vtype == 8:
        n = h.string_length()
        if n <= budget[0]:
            budget[0] -= n
            return h.take(n).decode("utf-8", "replace")
        h.skip(n)
        return {"string_of": n}
    if vtype == 9:
        sub, count = h.u32(), h.u64()
        if count > MAX_ARRAY:
            raise h.fail(f"array of {count:,} entries; expected at most {MAX_ARRAY:,}")
        if sub in _SCALAR:
            nbytes = count * _SCALAR[sub].size
            if count <= SMALL_ARRAY and nbytes <= budget[0]:
                budget[0] -= nbytes
                return list(struct.unpack(f"<{count}{_FMT[sub]}", h.take(nbytes)))
            h.skip(nbytes)
        elif sub == 8:
            h.skip_strings(count)  # strings inside arrays (a tokenizer's): never kept
        else:
            raise h.fail(f"value type {sub}; expected a GGUF value type")
        return {"array_of": count, "type": VALUE_TYPES[sub]}
    raise h.fail(f"value type {vtype}; expected a GGUF value type")


def _tensor_records(h: HeaderScan, n_tensors: int) -> list[tuple[bytes, tuple[int, ...], int, int]]:
    """(name, ne, GGML type code, offset) of each tensor, parsed in place in the scan's window
    (a header may hold a million of them): the window is refilled only when less than the
    longest record is left in it."""
    u64, u32, tail = _U64.unpack_from, _U32.unpack_from, _TAIL.unpack_from
    out = []
    append = out.append
    buf, i = h.ahead(_INFO_MAX)
    for _ in range(n_tensors):
        if len(buf) - i < _INFO_MAX:
            h.pos = h.start + i
            buf, i = h.ahead(_INFO_MAX)
        try:
            (n,) = u64(buf, i)
            j = i + 8 + n
            (n_dims,) = u32(buf, j)
            ne = _DIMS[n_dims].unpack_from(buf, j + 4)
            k = j + 4 + 8 * n_dims
            code, offset = tail(buf, k)
        except (struct.error, KeyError):
            h.pos = h.start + i
            _bad_record(h, buf, i)
            raise
        if n > _NAME_MAX:
            h.pos = h.start + i
            raise h.fail(f"string of {n:,} bytes; expected at most {_NAME_MAX:,}")
        append((buf[i + 8:j], ne, code, offset))
        i = k + 12
    h.pos = h.start + i
    return out


def _bad_record(h: HeaderScan, buf: bytes, i: int) -> None:
    """Why the tensor record at pos does not parse: a name or dimension count out of bounds, or
    a record that runs past what is left of the header (need() words which)."""
    n = _U64.unpack_from(buf, i)[0] if len(buf) - i >= 8 else 0
    if n > _NAME_MAX:
        raise h.fail(f"string of {n:,} bytes; expected at most {_NAME_MAX:,}")
    j = i + 8 + n
    if len(buf) >= j + 4:
        n_dims = _U32.unpack_from(buf, j)[0]
        if not 1 <= n_dims <= 8:
            name = one_line(buf[i + 8:j].decode("utf-8", "replace"), 80)
            raise h.fail(f"tensor '{name}' with {n_dims} dims; expected 1 to 8")
    h.need(len(buf) - i + 1)


def read_gguf_header(src: ByteSource) -> GgufHeader:
    """One GGUF file's metadata and tensor records, from its first bytes alone."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    name = src.name
    h = HeaderScan(name, src, src.size(), MAX_HEADER_BYTES)
    if h.buf[:4] != GGUF_MAGIC:
        raise HcError(f"{one_line(name)}: not a GGUF file (no GGUF magic); expected a .gguf file")
    h.pos = 4
    version = h.u32()
    if version not in VERSIONS:
        raise h.fail(f"version {version}; expected one of {VERSIONS}")
    n_tensors, n_kv = h.u64(), h.u64()
    if n_tensors > MAX_TENSORS or n_kv > MAX_KV:
        raise h.fail(f"{n_tensors:,} tensors and {n_kv:,} keys; expected at most {MAX_TENSORS:,} and {MAX_KV:,}")
    kv: dict[str, Any] = {}
    budget, key_bytes = [KEPT_METADATA_BYTES], 0
    for _ in range(n_kv):
        raw_key = h.string(_NAME_MAX)
        key_bytes += len(raw_key)
        if key_bytes > MAX_KEY_BYTES:
            raise h.fail(f"metadata keys of more than {MAX_KEY_BYTES:,} bytes in all; expected a few KB")
        kv[raw_key.decode("utf-8", "replace")] = _value(h, h.u32(), budget)
    records = _tensor_records(h, n_tensors)
    align = kv.get("general.alignment", 32)
    if not isinstance(align, int) or align <= 0 or align & (align - 1):
        raise HcError(f"{one_line(name)}: key 'general.alignment' is {one_line(repr(align), 60)}; expected a power "
                      "of two")
    data_start = -(-h.pos // align) * align
    size = src.size()
    types: dict[int, tuple[str, int, int]] = {}
    names = [r[0].decode("utf-8", "replace") for r in records]
    if len(set(names)) != len(names):
        seen: set[str] = set()
        twice = next(n for n in names if n in seen or seen.add(n))
        raise HcError(f"{one_line(name)}: tensor '{one_line(twice, 80)}' appears twice; expected unique names")
    tensors = []
    append = tensors.append
    for tname, (_, ne, code, offset) in zip(names, records):
        kind = types.get(code)
        if kind is None:
            try:
                qtype = GGMLQuantizationType(code)
                kind = types[code] = (qtype.name, *GGML_QUANT_SIZES[qtype])
            except (ValueError, KeyError):
                raise HcError(f"{one_line(name)}: tensor '{one_line(tname, 80)}' of GGML type {code}; expected a "
                              "type the gguf package knows") from None
        dtype, block, type_size = kind
        if ne[0] % block:
            raise HcError(f"{one_line(name)}: tensor '{one_line(tname, 80)}' has rows of {ne[0]} values; {dtype} "
                          f"stores blocks of {block}")
        end = offset + math.prod(ne) // block * type_size
        if data_start + end > size:
            raise HcError(f"{one_line(name)}: tensor '{one_line(tname, 80)}' ends at byte "
                          f"{data_start + end:,}; the file has {size:,} (truncated?)")
        append(_new(TensorInfo, (tname, dtype, ne[::-1], offset, end, data_start)))
    tensors.sort(key=_BEGIN)
    return GgufHeader(name, h.pos, data_start, size, None, tuple(tensors), kv)


def hub_gguf_header(store: Any, name: str) -> GgufHeader:
    """A hub GGUF's header: its ranges come through the store's cache, and its size is
    cached beside them, so that a second run (or an offline one) asks the server nothing."""
    asked = {"file": name, "subfolder": store.ref.subfolder, "gguf_size": True}
    path = store.cache.entry_path(store.sha, "headers", asked)
    raw = store.cache.get(path, asked)
    size = int.from_bytes(raw, "little") if raw is not None and len(raw) == 8 else None
    with store.source(name, size) as src:
        h = read_gguf_header(src)
    if size is None:
        store.cache.put(path, asked, h.file_size.to_bytes(8, "little"))
    return h


def is_gguf_name(name: str) -> bool:
    return name.endswith(".gguf")


def gguf_parts(files: Iterable[str], entry: str | None, where: str, store: Any = None) -> tuple[list[str], list[str]]:
    """(the GGUF files to read, the split parts that are missing): `entry` and the rest
    of its split set, or the one file or set among `files` (a folder); with the `store`
    they are in, a set of more than MAX_TENSORS tensors in all is refused before any is read."""
    files = [f for f in files if is_gguf_name(f) and "/" not in f]
    have = set(files)
    if entry is None:
        firsts = [f for f in files if (m := SPLIT_NAME.match(f)) and m["no"] == "00001"]
        singles = [f for f in files if not SPLIT_NAME.match(f)]
        sets = {(m["stem"], m["count"]) for f in files if (m := SPLIT_NAME.match(f))}
        if not firsts and not singles and len(sets) == 1:  # one set whose first part is gone: named as missing
            (stem, count), = sets
            firsts = [f"{stem}-00001-of-{count}.gguf"]
        if len(firsts) + len(singles) != 1:
            found = ", ".join(firsts + singles) or "none"
            raise HcError(f"{where}: expected one .gguf file or one split set, found {one_line(found)}")
        entry = (firsts or singles)[0]
    else:
        have.add(entry)
    m = SPLIT_NAME.match(entry)
    if m is None:
        return [entry], []
    count = int(m["count"])
    if not 1 <= count <= MAX_SPLITS:
        raise HcError(f"{where}: a split set of {count} parts; expected 1..{MAX_SPLITS}")
    parts = [f"{m['stem']}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
    found = [p for p in parts if p in have]
    if store is not None:
        check_split_total(store, found, where)
    return found, [p for p in parts if p not in have]


def check_split_total(store: Any, parts: list[str], where: str) -> None:
    """Refuses a split set of more than MAX_TENSORS tensors in all, from each part's first 24
    bytes, before any header is walked (each part is held to it alone by read_gguf_header)."""
    total = 0
    for part in parts if len(parts) > 1 else ():
        try:
            with store.source(part) as src:
                head = src.read(0, 24)
        except HcError:
            continue  # reading the part's header says what is wrong with it
        if head[:4] == GGUF_MAGIC:
            total += _U64.unpack_from(head, 8)[0]
    if total > MAX_TENSORS:
        raise HcError(f"{where}: a split set of {len(parts)} parts holding {total:,} tensors in all; expected at "
                      f"most {MAX_TENSORS:,}")


def holds_gguf(files: Iterable[str]) -> bool:
    return any(is_gguf_name(f) and "/" not in f for f in files)


def gguf_kv(shards: Iterable[Any]) -> dict[str, Any]:
    """The metadata of a GGUF checkpoint (its first readable part's), {} for safetensors."""
    for s in shards:
        if isinstance(s.header, GgufHeader):
            return s.header.kv
    return {}


def settings(kv: dict[str, Any]) -> dict[str, Any]:
    """The model settings: `{arch}.*` keys without the architecture prefix."""
    arch = kv.get("general.architecture")
    p = f"{arch}."
    return {k[len(p):]: v for k, v in kv.items() if isinstance(arch, str) and k.startswith(p)}


def dequantize(raw: bytes, ggml_type: str, shape: tuple[int, ...], where: str) -> np.ndarray:
    """A tensor's stored bytes as float32 in canonical shape, by the gguf package: every type
    its quants module dequantises (the IQ* quants too), and no other."""
    import numpy as np
    from gguf import GGMLQuantizationType, quants

    try:
        out = quants.dequantize(np.frombuffer(raw, dtype=np.uint8), GGMLQuantizationType[ggml_type])
    except NotImplementedError:
        raise HcError(f"{where}: the gguf package cannot dequantise {ggml_type}") from None
    return np.ascontiguousarray(out, dtype=np.float32).reshape(shape)


def quant_block(ggml_type: str) -> tuple[int, int]:
    """(values, bytes) of one block of a GGML type: a slice of whole blocks dequantises alone."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    return GGML_QUANT_SIZES[GGMLQuantizationType[ggml_type]]
