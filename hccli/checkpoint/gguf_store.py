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

import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from hccli.bounded import one_line
from hccli.checkpoint.gguf_file import (
    GGUF_MAGIC,
    MAX_HEADER_BYTES,
    MAX_KV,
    MAX_SPLITS,
    MAX_TENSORS,
    SMALL_ARRAY,
    SPLIT_NAME,
    VERSIONS,
)
from hccli.checkpoint.gguf_file import HeaderScan as _Scan
from hccli.checkpoint.header_types import Header, TensorInfo
from hccli.checkpoint.source import ByteSource
from hccli.errors import HcError

if TYPE_CHECKING:  # numpy only where values are decoded: opening a safetensors checkpoint never needs it
    import numpy as np

# GGUFValueType -> struct format of its scalar
_FMT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
FLOAT_TYPES = ("F32", "F16", "BF16")
# relative rounding of a value stored in the type (half an ulp): F16 keeps 11 significant bits, BF16 8
ROUNDING = {"F16": "2^-11", "BF16": "2^-8"}


@dataclass(frozen=True)
class GgufHeader(Header):
    """A GGUF file's header in the store's terms, with its metadata (key -> value)."""

    kv: dict[str, Any] = field(default_factory=dict)

    @property
    def architecture(self) -> str:
        arch = self.kv.get("general.architecture")
        return arch if isinstance(arch, str) else ""


class _Walk(_Scan):
    """The pre-scan's reader, starting with 64 KiB: over HTTP a tiny GGUF's header is a
    few KB, and a real one (with its tokenizer, a few MB) grows by doubling."""

    FIRST = 64 * 1024

    def __init__(self, name: str, f: Any, size: int):
        self.path, self.f, self.size, self.pos = name, f, size, 0
        self.limit = min(size, MAX_HEADER_BYTES)
        self.buf = f.read(min(self.limit, self.FIRST))


class _Reader:
    """A ByteSource read front to back, as the pre-scan reads a file."""

    def __init__(self, src: ByteSource):
        self.src, self.pos, self.size = src, 0, src.size()

    def read(self, n: int) -> bytes:
        n = max(0, min(n, self.size - self.pos))
        out = self.src.read(self.pos, n) if n else b""
        self.pos += n
        return out


def _value(h: _Scan, vtype: int, depth: int = 0) -> Any:
    if vtype in _FMT:
        fmt = "<" + _FMT[vtype]
        return struct.unpack(fmt, h.take(struct.calcsize(fmt)))[0]
    if vtype == 8:
        return h.string().decode("utf-8", "replace")
    if vtype == 9 and depth == 0:
        sub, count = h.u32(), h.u64()
        if count > (1 << 24):
            raise h.fail(f"array of {count:,} entries; expected at most {1 << 24:,}")
        if sub in _FMT:
            size = struct.calcsize("<" + _FMT[sub])
            raw = h.take(count * size)
            return list(struct.unpack(f"<{count}{_FMT[sub]}", raw)) if count <= SMALL_ARRAY else {"array_of": count}
        items = [_value(h, sub, depth + 1) for _ in range(count)]
        return items if count <= SMALL_ARRAY else {"array_of": count}
    raise h.fail(f"value type {vtype}; expected a GGUF value type")


def read_gguf_header(src: ByteSource) -> GgufHeader:
    """One GGUF file's metadata and tensor records, from its first bytes alone."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    name = src.name
    h = _Walk(name, _Reader(src), src.size())
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
    for _ in range(n_kv):
        key = h.string(1 << 16).decode("utf-8", "replace")
        kv[key] = _value(h, h.u32())
    raw: list[tuple[str, tuple[int, ...], str, int, int]] = []
    for _ in range(n_tensors):
        tname = h.string(1 << 16).decode("utf-8", "replace")
        n_dims = h.u32()
        if not 1 <= n_dims <= 8:
            raise h.fail(f"tensor '{one_line(tname, 80)}' with {n_dims} dims; expected 1 to 8")
        ne = struct.unpack(f"<{n_dims}Q", h.take(8 * n_dims))
        code, offset = struct.unpack("<IQ", h.take(12))
        try:
            qtype = GGMLQuantizationType(code)
            block, type_size = GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise h.fail(f"tensor '{one_line(tname, 80)}' of GGML type {code}; expected a type the gguf package "
                         "knows") from None
        elements = 1
        for d in ne:
            elements *= d
        if ne[0] % block:
            raise h.fail(f"tensor '{one_line(tname, 80)}' has rows of {ne[0]} values; {qtype.name} stores blocks "
                         f"of {block}")
        raw.append((tname, tuple(ne[::-1]), qtype.name, offset, elements // block * type_size))
    align = kv.get("general.alignment", 32)
    if not isinstance(align, int) or align <= 0 or align & (align - 1):
        raise HcError(f"{one_line(name)}: key 'general.alignment' is {align!r}; expected a power of two")
    data_start = -(-h.pos // align) * align
    size = src.size()
    tensors, seen = [], set()
    for tname, shape, dtype, offset, nbytes in raw:
        if tname in seen:
            raise HcError(f"{one_line(name)}: tensor '{one_line(tname, 80)}' appears twice; expected unique names")
        seen.add(tname)
        if data_start + offset + nbytes > size:
            raise HcError(f"{one_line(name)}: tensor '{one_line(tname, 80)}' ends at byte "
                          f"{data_start + offset + nbytes:,}; the file has {size:,} (truncated?)")
        tensors.append(TensorInfo(tname, dtype, shape, offset, offset + nbytes, data_start))
    tensors.sort(key=lambda t: t.begin)
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


def gguf_parts(files: Iterable[str], entry: str | None, where: str) -> tuple[list[str], list[str]]:
    """(the GGUF files to read, the split parts that are missing): `entry` and the rest
    of its split set, or the one file or set among `files` (a folder)."""
    files = [f for f in files if is_gguf_name(f) and "/" not in f]
    if entry is None:
        firsts = [f for f in files if (m := SPLIT_NAME.match(f)) and m["no"] == "00001"]
        singles = [f for f in files if not SPLIT_NAME.match(f)]
        if len(firsts) + len(singles) != 1:
            found = ", ".join(firsts + singles) or "none"
            raise HcError(f"{where}: expected one .gguf file or one split set, found {one_line(found)}")
        entry = (firsts or singles)[0]
    m = SPLIT_NAME.match(entry)
    if m is None:
        return [entry], []
    count = int(m["count"])
    if not 1 <= count <= MAX_SPLITS:
        raise HcError(f"{where}: a split set of {count} parts; expected 1..{MAX_SPLITS}")
    parts = [f"{m['stem']}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
    have = set(files) | {entry}
    return [p for p in parts if p in have], [p for p in parts if p not in have]


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
    """A tensor's stored bytes as float32 in canonical shape, by the gguf package."""
    import numpy as np
    from gguf import GGMLQuantizationType, quants

    if ggml_type.startswith("I"):
        raise HcError(f"{where} is {ggml_type}, an integer type; expected a float or quant type")
    try:
        out = quants.dequantize(np.frombuffer(raw, dtype=np.uint8), GGMLQuantizationType[ggml_type])
    except NotImplementedError:
        raise HcError(f"{where}: the gguf package cannot dequantise {ggml_type}") from None
    return np.ascontiguousarray(out, dtype=np.float32).reshape(shape)

