"""GGUF files (llama.cpp's deepseek4 / deepseek41) read through the `gguf`
package's own reader, GGUFReader, as typed records.

`gguf` (and numpy through it) is imported only inside the functions here, so
`hc count-params` and `hc inspect` of safetensors never load it. A GGUF is
hostile input like any file: before GGUFReader sees it, a bounded pre-scan of
the header checks the magic, the version, the tensor and key counts, every
string and array length and the header's total size against the file, so a
forged count cannot make the reader loop or allocate past the file.

Shapes are given in canonical (row-major, release) order: GGUF lists `ne`
fastest dimension first, so `blk.L.hc_attn_fn` with ne = [4*dim, 24] is
[24, 4*dim] here, as in the release.
"""

from __future__ import annotations

import os
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hccli.errors import HcError

GGUF_MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_TENSORS = 1 << 20  # a whole V4.1-Flash is ~96k tensors before llama.cpp merges the experts
MAX_KV = 1 << 16
MAX_ARRAY = 1 << 24  # a vocabulary or merges list is ~130k entries
MAX_STRING = 1 << 26
MAX_HEADER_BYTES = 1 << 28  # metadata + tensor infos; a tokenizer is a few MB
MAX_SPLITS = 1024
MAX_DEQUANT_ELEMENTS = 1 << 28  # 1 GiB of float32 out
SPLIT_NAME = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
# metadata kept whole; longer arrays are summarised by their length
SMALL_ARRAY = 4096

# GGUFValueType: byte size of the scalar types; 8 = string, 9 = array
_SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


@dataclass(frozen=True, slots=True)
class GgufTensor:
    name: str
    ggml_type: str  # "F32", "F16", "BF16", "Q8_0", ...
    shape: tuple[int, ...]  # canonical (row-major) order: ne reversed
    offset: int  # absolute byte offset of the data in its file
    nbytes: int
    file: str
    part: int  # index of its file in GgufSet.paths

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def ne(self) -> tuple[int, ...]:
        """The dims as the GGUF header lists them."""
        return self.shape[::-1]


@dataclass
class GgufSet:
    """One GGUF file, or every part of a split set, read through GGUFReader."""

    paths: tuple[str, ...]
    architecture: str
    metadata: dict[str, Any]  # scalars and small arrays whole; large arrays as {"array_of": n}
    tensors: tuple[GgufTensor, ...]
    _readers: list[Any] = field(default_factory=list, repr=False)

    def settings(self) -> dict[str, Any]:
        """The model settings: `{arch}.*` keys with the architecture prefix removed."""
        p = self.architecture + "."
        return {k[len(p):]: v for k, v in self.metadata.items() if k.startswith(p)}

    def by_name(self) -> dict[str, GgufTensor]:
        return {t.name: t for t in self.tensors}

    def dequantize(self, name: str, max_elements: int = MAX_DEQUANT_ELEMENTS):
        """One tensor as float32 in canonical shape (F32/F16/BF16/Q8_0 and every type
        gguf.quants can dequantise); refuses tensors past max_elements."""
        import numpy as np
        from gguf import GGMLQuantizationType, quants

        t = self.by_name().get(name)
        if t is None:
            raise HcError(f"{self.paths[0]}: no tensor '{name}' in the GGUF")
        if t.elements > max_elements:
            raise HcError(f"{t.file}: tensor '{name}' has {t.elements:,} elements; "
                          f"expected at most {max_elements:,} to dequantise")
        rt = next(r for r in self._readers[t.part].tensors if r.name == name)
        qtype = GGMLQuantizationType[t.ggml_type]
        if qtype.name.startswith("I"):
            raise HcError(f"{t.file}: tensor '{name}' is {t.ggml_type}, an integer type; "
                          "expected a float or quant type")
        try:
            out = quants.dequantize(np.asarray(rt.data), qtype)
        except NotImplementedError:
            raise HcError(f"{t.file}: tensor '{name}': the gguf package cannot dequantise {t.ggml_type}") from None
        return np.ascontiguousarray(out, dtype=np.float32).reshape(t.shape)

    def close(self) -> None:
        for r in self._readers:
            mm = getattr(r, "data", None)
            if mm is not None and getattr(mm, "_mmap", None) is not None:
                mm._mmap.close()
        self._readers.clear()

    def __enter__(self) -> GgufSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- the bounded pre-scan ---------------------------------------------------------------

class _Header:
    """The header bytes, read on demand (a shard is GBs; its header a few MB)."""

    def __init__(self, path: Path, f: Any, size: int):
        self.path, self.f, self.size, self.pos = path, f, size, 0
        self.limit = min(size, MAX_HEADER_BYTES)
        self.buf = f.read(min(self.limit, 1 << 20))

    def fail(self, what: str) -> HcError:
        return HcError(f"{self.path}: not a readable GGUF ({what} at byte {self.pos})")

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.buf) and end <= self.limit:
            self.buf += self.f.read(min(self.limit, max(end, 2 * len(self.buf))) - len(self.buf))
        if end > len(self.buf):
            raise self.fail("header runs past the end of the file" if end > self.size
                            else f"header larger than {MAX_HEADER_BYTES:,} bytes")
        b = self.buf[self.pos:end]
        self.pos += n
        return b

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def string(self, limit: int = MAX_STRING) -> bytes:
        n = self.u64()
        if n > limit:
            raise self.fail(f"string of {n:,} bytes; expected at most {limit:,}")
        return self.take(n)

    def value(self, vtype: int, depth: int = 0) -> None:
        if vtype in _SCALAR_SIZE:
            self.take(_SCALAR_SIZE[vtype])
        elif vtype == 8:
            self.string()
        elif vtype == 9 and depth == 0:
            sub, count = self.u32(), self.u64()
            if count > MAX_ARRAY:
                raise self.fail(f"array of {count:,} entries; expected at most {MAX_ARRAY:,}")
            if sub in _SCALAR_SIZE:
                self.take(count * _SCALAR_SIZE[sub])
            else:
                for _ in range(count):
                    self.value(sub, depth + 1)
        else:
            raise self.fail(f"value type {vtype}; expected a GGUF value type")


def _prescan(path: Path) -> None:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise HcError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise HcError(f"{path}: not a regular file; expected a .gguf file")
    with open(path, "rb") as f:
        h = _Header(path, f, st.st_size)
        if h.buf[:4] != GGUF_MAGIC:
            raise HcError(f"{path}: not a GGUF file (no GGUF magic); expected a .gguf file")
        h.pos = 4
        _walk(h)


def _walk(h: _Header) -> None:
    version = h.u32()
    if version not in VERSIONS:
        raise h.fail(f"version {version}; expected one of {VERSIONS}")
    n_tensors, n_kv = h.u64(), h.u64()
    if n_tensors > MAX_TENSORS or n_kv > MAX_KV:
        raise h.fail(f"{n_tensors:,} tensors and {n_kv:,} keys; expected at most {MAX_TENSORS:,} and {MAX_KV:,}")
    for _ in range(n_kv):
        h.string(1 << 16)
        h.value(h.u32())
    for _ in range(n_tensors):
        h.string(1 << 16)
        n_dims = h.u32()
        if n_dims > 8:
            raise h.fail(f"tensor with {n_dims} dims; expected at most 8")
        h.take(8 * n_dims + 4 + 8)


# --- reading ----------------------------------------------------------------------------

def _metadata_value(f: Any) -> Any:
    from gguf import GGUFValueType

    if f.types and f.types[0] == GGUFValueType.ARRAY and len(f.data) > SMALL_ARRAY:
        return {"array_of": len(f.data)}
    try:
        return f.contents()
    except (UnicodeDecodeError, ValueError, IndexError):
        return None  # undecodable text in an informational key; the reader kept the bytes


def split_parts(path: str | os.PathLike[str]) -> list[Path]:
    """The files of a GGUF: the file itself, every part of its split set when it
    is one (`*-00001-of-0000N.gguf`), or the one set or file in a folder."""
    p = Path(path)
    if p.is_dir():
        ggufs = sorted(q for q in p.iterdir() if q.name.endswith(".gguf"))
        firsts = [q for q in ggufs if (m := SPLIT_NAME.match(q.name)) and m["no"] == "00001"]
        singles = [q for q in ggufs if not SPLIT_NAME.match(q.name)]
        if len(firsts) + len(singles) != 1:
            found = ", ".join(q.name for q in firsts + singles) or "none"
            raise HcError(f"{p}: expected one .gguf file or one split set in the folder, found {found}")
        p = (firsts or singles)[0]
    m = SPLIT_NAME.match(p.name)
    if m is None:
        return [p]
    count = int(m["count"])
    if not 1 <= count <= MAX_SPLITS:
        raise HcError(f"{p}: a split set of {count} parts; expected 1..{MAX_SPLITS}")
    parts = [p.with_name(f"{m['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    for q in parts:
        if not q.exists():
            raise HcError(f"{q}: missing part {parts.index(q) + 1} of the split set {p.name}; expected {count} parts")
    return parts


def open_gguf(path: str | os.PathLike[str]) -> GgufSet:
    """Read a GGUF (or its split set) through GGUFReader into records; values stay on disk."""
    parts = split_parts(path)
    for q in parts:
        _prescan(q)
    from gguf import GGUFReader

    readers: list[Any] = []
    tensors: list[GgufTensor] = []
    metadata: dict[str, Any] = {}
    seen: set[str] = set()
    try:
        for i, q in enumerate(parts):
            try:
                r = GGUFReader(q, "r")
            except (ValueError, IndexError, KeyError, TypeError, OverflowError) as exc:
                raise HcError(f"{q}: not a readable GGUF ({exc})") from None
            readers.append(r)
            size = os.path.getsize(q)
            for k, f in r.fields.items():
                if not k.startswith("GGUF.") and (i == 0 or k not in metadata):
                    metadata[k] = _metadata_value(f)
            for t in r.tensors:
                if t.name in seen:
                    raise HcError(f"{q}: tensor '{t.name}' appears twice in the set; expected unique names")
                seen.add(t.name)
                if t.data_offset + t.n_bytes > size:
                    raise HcError(f"{q}: tensor '{t.name}' runs past the end of the file")
                shape = tuple(int(d) for d in t.shape.tolist())[::-1]
                tensors.append(GgufTensor(t.name, t.tensor_type.name, shape, int(t.data_offset), int(t.n_bytes),
                                          str(q), i))
    except BaseException:
        GgufSet(tuple(map(str, parts)), "", {}, (), readers).close()
        raise
    declared = metadata.get("split.count")
    if len(parts) > 1 and declared != len(parts):
        GgufSet(tuple(map(str, parts)), "", {}, (), readers).close()
        raise HcError(f"{parts[0]}: key 'split.count' is {declared}; expected {len(parts)} as the file names say")
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str):
        GgufSet(tuple(map(str, parts)), "", {}, (), readers).close()
        raise HcError(f"{parts[0]}: no general.architecture key; expected a GGUF model file")
    return GgufSet(tuple(map(str, parts)), arch, metadata, tuple(tensors), readers)
