"""One view of any checkpoint `hc` can read, for `hc diff`: its HC tensors by
canonical name with a bounded float32 read, the model's hc_mult / layers / dim,
and the rest of the inventory as (canonical name, dtype, shape, bytes), no values.

The one module that touches the checkpoint readers (open_checkpoint, tensors(),
read_tensor; open_gguf): when the store moves to one protocol, only this file is
re-pointed. Values are read through a counting byte source (bytes read per side).
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple

import numpy as np

from hccli import dialects as D
from hccli.checkpoint.header import DTYPES
from hccli.checkpoint.source import ByteSource, one_line
from hccli.checkpoint.values import _NATIVE, _TABLES, read_tensor  # the chunked reader decodes as read_tensor
from hccli.errors import HcError
from hccli.vocab import (BACKBONE, DEFAULT_HC_EPS, DEFAULT_NORM_EPS, DEFAULT_SINKHORN_ITERS, STAGE, HcName,
                         hc_from_mix_width, parse_hc_name)

MAX_HC_ELEMENTS = 1 << 26  # a V4-Pro fn is 24 x 4*7168 = 688k; 64M is past any real one
# --values all decodes this many elements at a time: float64 copies of 32 MB, a few of them live
CHUNK_ELEMENTS = 1 << 22
MAX_CONFIG_BYTES = 16 << 20  # a published config.json is a few KB
_COUNT_LOCK = threading.Lock()  # remote sides read from several threads


class CountingSource(ByteSource):
    """Passes reads through and adds their lengths to the view's counter."""

    def __init__(self, inner: ByteSource, counter: list[int]):
        self.inner, self.counter = inner, counter

    @property
    def name(self) -> str:
        return self.inner.name

    def size(self) -> int:
        return self.inner.size()

    def read(self, offset: int, length: int) -> bytes:
        out = self.inner.read(offset, length)
        with _COUNT_LOCK:
            self.counter[0] += len(out)
        return out

    def close(self) -> None:
        self.inner.close()


@dataclass(frozen=True)
class HcTensor:
    hc: HcName
    stored_name: str
    dtype: str  # safetensors dtype or GGML type, as stored
    stored_shape: tuple[int, ...]
    shape: tuple[int, ...]  # the release's (row-major) order
    nbytes: int
    _read: Callable[[int], np.ndarray] = field(repr=False, compare=False)

    @property
    def canonical(self) -> str:
        return self.hc.canonical()

    def read(self, max_elements: int = MAX_HC_ELEMENTS) -> np.ndarray:
        """The values as float32 in canonical layout; refuses more than max_elements."""
        n = math.prod(self.shape)
        if n > max_elements:
            raise HcError(f"tensor '{one_line(self.stored_name)}' has {n:,} elements; expected at most "
                          f"{max_elements:,} for an HC tensor")
        return np.asarray(self._read(max_elements), dtype=np.float32).reshape(self.shape)


_new = tuple.__new__


class OtherTensor(NamedTuple):  # ~96k of them at full scale: built in C, not by a dataclass __init__
    name: str  # canonical (release) name; the stored name where no dialect maps it
    stored_name: str
    dtype: str
    shape: tuple[int, ...]  # canonical order
    nbytes: int
    logical_params: int


@dataclass(frozen=True)
class ModelShape:
    hc_mult: int | None
    n_layers: int | None
    dim: int | None
    source: str  # where the figures came from: "config", "GGUF metadata", "tensor shapes"


@dataclass
class HcView:
    label: str
    kind: str  # "safetensors" | "gguf"
    dialect: D.Detection
    model: ModelShape
    n_stages: int
    iters: int
    eps: float
    norm_eps: float
    hc: dict[str, HcTensor]
    others: list[OtherTensor]
    config_note: str = ""
    remote: bool = False  # each read is a round trip: worth overlapping
    counter: list[int] = field(default_factory=lambda: [0])
    _chunks: Callable[[str], Iterator[np.ndarray] | None] | None = field(default=None, repr=False)
    _close: Callable[[], None] | None = field(default=None, repr=False)

    @property
    def bytes_read(self) -> int:
        return self.counter[0]

    def value_chunks(self, stored_name: str) -> Iterator[np.ndarray] | None:
        """A non-HC tensor's values as float64 chunks in storage order (bounded memory),
        or None where its type cannot be decoded here."""
        return self._chunks(stored_name) if self._chunks else None

    def close(self) -> None:
        if self._close:
            self._close()

    def __enter__(self) -> HcView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_gguf(p: Path) -> bool:
    if p.suffix == ".gguf":
        return True
    return p.is_dir() and any(p.glob("*.gguf")) and not any(p.glob("*.safetensors"))


def open_view(path: str | Path, config: str | Path | None = None) -> HcView:
    p = Path(str(path))
    return _open_gguf(p, config) if p.exists() and _is_gguf(p) else _open_safetensors(str(path), config)


def component_of(name: str) -> str:
    """The count-params component of a canonical tensor name (hccli/inventory.py's)."""
    if name.startswith("mtp."):
        return "dspark"
    if name.startswith(("vision.", "aligner.", "image_")):
        return "vision"
    if parse_hc_name(name) is not None:
        return "hyper_connections"
    for mark, comp in ((".engram.", "engram"), (".attn.indexer.", "indexer"), (".attn.compressor.", "compressor"),
                       (".attn.", "attention"), (".ffn.gate.", "router"), (".ffn.experts.", "routed_experts"),
                       (".ffn.shared_experts.", "shared_expert")):
        if mark in name:
            return comp
    if name in ("embed.weight", "head.weight"):
        return "embeddings_head"
    return "norms" if name.endswith("norm.weight") else "other"


PREFETCH_SITES = 8  # sites read ahead when a side is remote: overlapped round trips, bounded memory


def read_both(a: HcView, b: HcView, groups: Iterable[list[HcName]]) -> Iterator[tuple[dict, dict]]:
    """Per group of HC names (a site), ({part: values} of A, of B) for the names both sides hold;
    read in threads a few groups ahead when a side is remote (each read a round trip)."""
    def load(names) -> tuple[dict, dict]:
        both = [h for h in names if h.canonical() in a.hc and h.canonical() in b.hc]
        return ({h.part: a.hc[h.canonical()].read() for h in both}, {h.part: b.hc[h.canonical()].read() for h in both})
    if not (a.remote or b.remote):
        yield from map(load, groups)
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(PREFETCH_SITES) as pool:
        ahead: deque = deque()
        for names in groups:
            ahead.append(pool.submit(load, names))
            if len(ahead) > PREFETCH_SITES:
                yield ahead.popleft().result()
        while ahead:
            yield ahead.popleft().result()


# --- configs ----------------------------------------------------------------------------

def _read_config(path: Path, explicit: bool) -> tuple[Any, dict | None, str]:
    """(ModelConfig or None, the raw dict or None, a note when it could not be used)."""
    from hccli.config import parse_config
    from hccli.config_hf import is_transformers_config, release_config_from_transformers

    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise HcError(f"{path}: larger than {MAX_CONFIG_BYTES:,} bytes; expected a config.json")
        data = json.loads(raw)
        if isinstance(data, dict) and is_transformers_config(data):
            raw = json.dumps(release_config_from_transformers(data, str(path))).encode()
        return parse_config(raw, str(path)), data if isinstance(data, dict) else None, ""
    except (OSError, ValueError, RecursionError, HcError) as exc:
        if explicit:
            raise HcError(getattr(exc, "message", None) or f"{path}: cannot read config ({one_line(str(exc))})") \
                from None
        return None, None, f"config.json not used: {one_line(getattr(exc, 'message', str(exc)))}"


def _from_shapes(hc: dict[str, HcTensor]) -> ModelShape:
    fn = next((t for t in hc.values() if t.hc.part == "fn" and t.hc.site != "head" and len(t.shape) == 2), None)
    layers = [t.hc.num for t in hc.values() if t.hc.kind == BACKBONE]
    hc_mult = hc_from_mix_width(fn.shape[0]) if fn else None
    dim = fn.shape[1] // hc_mult if fn and hc_mult and fn.shape[1] % hc_mult == 0 else None
    return ModelShape(hc_mult, max(layers) + 1 if layers else None, dim, "tensor shapes")


# --- safetensors ------------------------------------------------------------------------

def _logical(name: str, dtype: str, shape: tuple[int, ...], n: int, get: Callable[[str], Any]) -> int:
    """Logical parameters of a tensor of n elements: packed fp4 counts 2 a byte, scales 0."""
    if dtype == "F8_E8M0":
        return 0  # quantisation scales are not parameters
    if dtype == "I8" and len(shape) == 2 and name.endswith(".weight") and shape[1]:
        sib = get(name[:-7] + ".scale")
        # one E8M0 scale per 32 fp4 values, two values a byte: packed fp4 holds 2 a byte
        if sib is not None and sib[1].dtype == "F8_E8M0" and sib[1].shape == (shape[0], shape[1] // 16):
            return 2 * n
    return n


def _open_safetensors(path: str, config: str | Path | None) -> HcView:
    from hccli.checkpoint.shardset import open_checkpoint

    ckpt = open_checkpoint(path)  # config read below, in every style transformers writes too
    cfg, raw_cfg, note = None, None, ""
    cfg_path = Path(config) if config is not None else ckpt.root / "config.json"
    if ckpt.remote is None and (config is not None or cfg_path.is_file()):
        cfg, raw_cfg, note = _read_config(cfg_path, config is not None)
    elif ckpt.remote is not None:
        cfg = ckpt.config
    tensors = ckpt.tensors()
    # a routed expert's name says nothing its layer's other names do not; ~70% of a checkpoint
    detection = D.detect_dialect((n for n in tensors if ".ffn.experts." not in n), raw_cfg)
    dialect = detection.dialect
    counter = [0]

    def reader(shard, info):
        def read(max_elements: int) -> np.ndarray:
            with CountingSource(ckpt.source(shard), counter) as src:
                return read_tensor(src, shard.header, info.name)  # read-only; no copy of a 2 MB fn
        return read

    hc: dict[str, HcTensor] = {}
    others: list[OtherTensor] = []
    get = tensors.get
    for name, (shard, info) in tensors.items():
        h = D.hc_name(name, dialect) if "hc" in name else None
        if h is not None:
            hc[h.canonical()] = HcTensor(h, name, info.dtype, info.shape, info.shape, info.nbytes,
                                         reader(shard, info))
            continue
        canon = name if dialect == D.RELEASE else (D.canonical_name(name, dialect) or name)  # release: canonical
        # a validated entry's bytes are its elements x bits / 8: no product of dims per tensor
        n = info.nbytes * 8 // DTYPES[info.dtype]
        dt = info.dtype
        params = n if dt not in ("I8", "F8_E8M0") else _logical(name, dt, info.shape, n, get)
        # tuple.__new__ is the C constructor; a NamedTuple's own __new__ is Python, 0.3 s a full checkpoint
        others.append(_new(OtherTensor, (canon, name, dt, info.shape, info.nbytes, params)))

    def chunks(stored: str) -> Iterator[np.ndarray] | None:
        shard, info = tensors[stored]
        return _safetensors_chunks(ckpt, shard, info, counter)

    if cfg is not None:
        model = ModelShape(cfg.hc_mult, cfg.n_layers, cfg.dim, "config")
        iters, eps, norm_eps, n_stages = cfg.hc_sinkhorn_iters, cfg.hc_eps, cfg.norm_eps, cfg.n_stages
    else:
        model = _from_shapes(hc)
        iters, eps, norm_eps = DEFAULT_SINKHORN_ITERS, DEFAULT_HC_EPS, DEFAULT_NORM_EPS
        n_stages = max((t.hc.num + 1 for t in hc.values() if t.hc.kind == STAGE), default=0)
    return HcView(ckpt.label, "safetensors", detection, model, n_stages, iters, eps, norm_eps, hc, others,
                  note, ckpt.remote is not None, counter, chunks)


def _safetensors_chunks(ckpt, shard, info, counter) -> Iterator[np.ndarray] | None:
    dt = info.dtype
    if dt not in _NATIVE and dt != "BF16" and dt not in _TABLES:
        return None
    width = DTYPES[dt] // 8

    def gen() -> Iterator[np.ndarray]:
        step = CHUNK_ELEMENTS * width
        with CountingSource(ckpt.source(shard), counter) as src:
            for off in range(0, info.nbytes, step):
                raw = src.read(info.abs_begin + off, min(step, info.nbytes - off))
                if dt == "BF16":
                    x = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
                elif dt in _TABLES:
                    x = _TABLES[dt][np.frombuffer(raw, np.uint8)]
                else:
                    x = np.frombuffer(raw, np.dtype(_NATIVE[dt]))
                yield x.astype(np.float64)
    return gen()


# --- GGUF -------------------------------------------------------------------------------

_GGUF_FLOAT = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}


def _open_gguf(p: Path, config: str | Path | None) -> HcView:
    from hccli.checkpoint.gguf_file import open_gguf

    g = open_gguf(p)
    try:
        return _gguf_view(p, g, config)
    except BaseException:
        g.close()
        raise


def _gguf_view(p: Path, g, config) -> HcView:
    counter = [0]
    names = [t.name for t in g.tensors]
    detection = D.detect_dialect(names)
    hc: dict[str, HcTensor] = {}
    others: list[OtherTensor] = []
    by = g.by_name()

    def reader(t):
        def read(max_elements: int) -> np.ndarray:
            out = g.dequantize(t.name, max_elements)
            counter[0] += t.nbytes
            return out
        return read

    for t in g.tensors:
        h = D.hc_name(t.name, D.GGUF)
        if h is not None:
            hc[h.canonical()] = HcTensor(h, t.name, t.ggml_type, t.ne, t.shape, t.nbytes, reader(t))
            continue
        canon = D.canonical_name(t.name, D.GGUF) or t.name
        others.append(OtherTensor(canon, t.name, t.ggml_type, t.shape, t.nbytes, t.elements))

    def chunks(stored: str) -> Iterator[np.ndarray] | None:
        t = by[stored]
        if t.elements > MAX_HC_ELEMENTS and t.ggml_type not in _GGUF_FLOAT:
            return None  # quantised blocks are dequantised whole; past the cap, not compared

        def gen() -> Iterator[np.ndarray]:
            if t.ggml_type in _GGUF_FLOAT:
                width = np.dtype(_GGUF_FLOAT[t.ggml_type]).itemsize
                step = CHUNK_ELEMENTS * width
                with open(t.file, "rb") as f:
                    for off in range(0, t.nbytes, step):
                        f.seek(t.offset + off)
                        raw = f.read(min(step, t.nbytes - off))
                        counter[0] += len(raw)
                        yield np.frombuffer(raw, _GGUF_FLOAT[t.ggml_type]).astype(np.float64)
            else:
                yield reader(t)(MAX_HC_ELEMENTS).reshape(-1).astype(np.float64)
        return gen()

    cfg = None
    note = ""
    if config is not None:
        cfg, _, note = _read_config(Path(config), True)
    s = g.settings()
    if cfg is not None:
        model = ModelShape(cfg.hc_mult, cfg.n_layers, cfg.dim, "config")
        iters, eps, norm_eps = cfg.hc_sinkhorn_iters, cfg.hc_eps, cfg.norm_eps
    elif all(isinstance(s.get(k), int) for k in ("block_count", "embedding_length", "hyper_connection.count")):
        model = ModelShape(s["hyper_connection.count"], s["block_count"], s["embedding_length"], "GGUF metadata")
        iters = s.get("hyper_connection.sinkhorn_iterations", DEFAULT_SINKHORN_ITERS)
        eps, norm_eps = (s.get(k, d) for k, d in (("hyper_connection.epsilon", DEFAULT_HC_EPS),
                                                    ("attention.layer_norm_rms_epsilon", DEFAULT_NORM_EPS)))
        for k, v in (("hyper_connection.epsilon", eps), ("attention.layer_norm_rms_epsilon", norm_eps)):
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v < 1:
                raise HcError(f"{p}: key '{g.architecture}.{k}' is {one_line(repr(v), 60)}; "
                              "expected a number in [0, 1)")
    else:
        model = _from_shapes(hc)
        iters, eps, norm_eps = DEFAULT_SINKHORN_ITERS, DEFAULT_HC_EPS, DEFAULT_NORM_EPS
    if not isinstance(iters, int) or isinstance(iters, bool) or not 1 <= iters <= 1000:
        raise HcError(f"{p}: key '{g.architecture}.hyper_connection.sinkhorn_iterations' is "
                      f"{one_line(repr(iters), 60)}; expected an integer 1..1000")
    label = g.paths[0] if len(g.paths) == 1 else f"{g.paths[0]} (+{len(g.paths) - 1} parts)"
    return HcView(label, "gguf", detection, model, 0, iters, eps, norm_eps, hc, others, note, False, counter,
                  chunks, g.close)

