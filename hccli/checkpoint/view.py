"""One view of any checkpoint `hc` can read, for `hc diff`: its HC tensors by
canonical name with a bounded float32 read, the model's hc_mult / layers / dim,
and the rest of the inventory as (canonical name, dtype, shape, bytes), no values.

A thin layer over the checkpoint core, as `inspect` reads: open_checkpoint for
every store and format (local, hub, safetensors, GGUF), checkpoint/hc.py for the
dialect, the HC sites and their values, values.py for streamed chunks. What is
diff's own: the inventory records, the model figures each side is compared by,
and the bytes each side read.
"""

from __future__ import annotations

import math
import threading
from itertools import chain, compress, repeat
from operator import floordiv, itemgetter, mul, not_, sub
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, NamedTuple

import numpy as np

from hccli.names import dialects as D
from hccli.base.bounded import one_line
from hccli.checkpoint.safetensors.header_types import DTYPES
from hccli.checkpoint.hc import MAX_HC_ELEMENTS
from hccli.checkpoint.source import ByteSource
from hccli.model.components import component_of  # noqa: F401 - diff's name for it
from hccli.model.packing import release_params
from hccli.model.config.model import ConfigUnusable
from hccli.base.errors import HcError
from hccli.model.shape import ModelShape, from_hc_shapes
from hccli.base.vocab import (
    DEFAULT_HC_EPS,
    DEFAULT_NORM_EPS,
    DEFAULT_SINKHORN_ITERS,
    STAGE,
    HcName,
    parse_hc_name,
)

if TYPE_CHECKING:
    from hccli.checkpoint.values import TensorStream

_COUNT_LOCK = threading.Lock()  # remote sides read from several threads


class CountingSource(ByteSource):
    """Passes reads through and adds their lengths to the view's counter."""

    def __init__(self, inner: ByteSource, counter: list[int]):
        self.inner, self.counter = inner, counter
        self.chunk_bytes = inner.chunk_bytes

    @property
    def name(self) -> str:
        return self.inner.name

    def size(self) -> int:
        return self.inner.size()

    def read(self, offset: int, length: int) -> bytes:
        out = self.inner.read(offset, length)
        _count(self.counter, len(out))
        return out

    def read_into(self, offset: int, into: memoryview) -> None:
        self.inner.read_into(offset, into)
        _count(self.counter, len(into))

    def close(self) -> None:
        self.inner.close()


def _count(counter: list[int], n: int) -> None:
    with _COUNT_LOCK:
        counter[0] += n


@dataclass(frozen=True)
class HcTensor:
    hc: HcName
    stored_name: str
    dtype: str  # safetensors dtype or GGML type, as stored
    shape: tuple[int, ...]  # the release's (row-major) order
    nbytes: int
    _read: Callable[[], np.ndarray] = field(repr=False, compare=False)

    @property
    def canonical(self) -> str:
        return self.hc.canonical()

    def read(self, max_elements: int = MAX_HC_ELEMENTS) -> np.ndarray:
        """The values as float32 in canonical layout; refuses more than max_elements."""
        n = math.prod(self.shape)
        if n > max_elements:
            raise HcError(f"tensor '{one_line(self.stored_name)}' has {n:,} elements; expected at most "
                          f"{max_elements:,} for an HC tensor")
        return np.asarray(self._read(), dtype=np.float32).reshape(self.shape)


_new = tuple.__new__
_NAME = itemgetter(0)  # OtherTensor.name


class OtherTensor(NamedTuple):  # ~96k of them at full scale: built in C, not by a dataclass __init__
    name: str  # canonical (release) name; the stored name where no dialect maps it
    stored_name: str
    dtype: str
    shape: tuple[int, ...]  # canonical order
    nbytes: int
    logical_params: int


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
    others: dict[str, OtherTensor]  # canonical name -> record: every tensor but the HC ones, in shard order
    config_note: ConfigUnusable | None = None  # the config.json beside it, set aside
    remote: bool = False  # each read is a round trip: worth overlapping
    counter: list[int] = field(default_factory=lambda: [0])
    second_spellings: list[tuple[str, str, str]] = field(default_factory=list)  # (name, name, canonical)
    _stream: Callable[[str], TensorStream | None] | None = field(default=None, repr=False)
    damage: tuple[Any, ...] = ()  # what opening found wrong (checkpoint/verify/damage.py): findings
    _absent: Callable[[str], str | None] | None = field(default=None, repr=False)

    def absent(self, canonical: str) -> str | None:
        """Why an HC tensor is not here where a shard that is gone explains it (damage.why_absent)."""
        return self._absent(canonical) if self._absent else None

    @property
    def bytes_read(self) -> int:
        return self.counter[0]

    def value_stream(self, stored_name: str) -> TensorStream | None:
        """A non-HC tensor's stored bytes in bounded chunks and their values in storage order
        (hc.value_stream, its reads counted), or None where its type cannot be decoded here."""
        return self._stream(stored_name) if self._stream else None

    def close(self) -> None:
        """Nothing is held open between reads; kept so that a view is used in `with`."""

    def __enter__(self) -> HcView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


_PACKED = frozenset({"I8", "F8_E8M0"})  # the dtypes whose logical parameters release_params decides


def _others(ckpt, stored_hc: set[str], gguf: bool) -> dict[str, OtherTensor]:
    """canonical name -> record of every tensor but the HC ones (`stored_hc`), in shard order. ~100k
    entries at full scale: built from the headers' columns by C-level passes; Python runs per tensor
    only for those release_params decides (a release's fp4 weights and their scales)."""
    if ckpt.unique:
        cols = [s.header.columns for s in ckpt.readable()]
    else:  # a name in two shards: the first occurrence's entry, as ckpt.tensors() keeps it
        infos = [info for _, info in ckpt.tensors().values()]
        cols = [(list(ckpt.tensors()), [i.dtype for i in infos], [i.shape for i in infos],
                 [i.begin for i in infos], [i.end for i in infos])]
    names: list[str] = []
    dtypes: list[str] = []
    shapes: list[tuple[int, ...]] = []
    nbytes: list[int] = []
    for c_names, c_dtypes, c_shapes, begins, ends in cols:
        names += c_names
        dtypes += c_dtypes
        shapes += c_shapes
        nbytes += map(sub, ends, begins)
    dialect = ckpt.dialect.dialect
    if gguf:
        params = list(map(math.prod, shapes))
    else:
        # a validated entry's bytes are its elements x bits / 8: no product of dims per tensor
        params = list(map(floordiv, map(mul, nbytes, repeat(8)), map(DTYPES.__getitem__, dtypes)))
        packed_at = list(compress(range(len(dtypes)), map(_PACKED.__contains__, dtypes)))
        if packed_at:
            sig_of = dict(zip(names, zip(dtypes, shapes))).get  # stored name -> (dtype, shape)
            for i in packed_at:
                params[i] = release_params(names[i], dtypes[i], shapes[i], params[i], sig_of)
        if dialect in (D.MLX_LM, D.COMPRESSED_TENSORS):  # a producer's packing (checkpoint/verify/producers.py)
            from hccli.checkpoint.verify.producers import logical_by_name

            params = list(map(logical_by_name(ckpt, dialect).get, names, params))
    canons = names if dialect == D.RELEASE else [D.canonical_name(n, dialect) or n for n in names]
    # tuple.__new__ is the C constructor; a NamedTuple's own __new__ is Python code, per tensor
    records = list(compress(map(_new, repeat(OtherTensor), zip(canons, names, dtypes, shapes, nbytes, params)),
                            map(not_, map(stored_hc.__contains__, names))))
    return dict(zip(map(_NAME, records), records))


def _shard_of(ckpt) -> dict[str, Any]:
    """stored name -> the shard whose entry ckpt.tensors() keeps (the first holding it), by C-level
    passes over the names alone: not the merged table's ~100k (shard, entry) pairs, of which diff
    reads the few its selection keeps."""
    shards = ckpt.readable()[::-1]  # later shards first: the first holding a name writes it last
    return dict(zip(chain.from_iterable(s.header.names for s in shards),
                    chain.from_iterable(repeat(s, len(s.header.names)) for s in shards)))


# --- the model's shape without a config ---------------------------------------------------

def _gguf_figures(ckpt) -> tuple[ModelShape | None, int, float, float]:
    """(model, iterations, eps, norm_eps) from a GGUF's metadata (checkpoint/gguf/settings.py: each
    key within its bound, else an error naming it), the model None where it lacks its figures,
    the reference defaults for keys it lacks."""
    from hccli.checkpoint.hc import gguf_model

    m = gguf_model(ckpt)
    if m is None:
        return None, DEFAULT_SINKHORN_ITERS, DEFAULT_HC_EPS, DEFAULT_NORM_EPS
    model = None if None in (m.n_layers, m.dim, m.hc_mult) else ModelShape(m.hc_mult, m.n_layers, m.dim,
                                                                           "GGUF metadata")
    return (model, DEFAULT_SINKHORN_ITERS if m.iters is None else m.iters, DEFAULT_HC_EPS if m.eps is None else m.eps,
            DEFAULT_NORM_EPS if m.norm_eps is None else m.norm_eps)


# --- the view ---------------------------------------------------------------------------

def _gguf_label(ckpt) -> str:
    """A local GGUF is named by its (first) file, as its split set is read from it."""
    if ckpt.remote is not None:
        return ckpt.label
    first = str(ckpt.shards[0].path)
    return first if len(ckpt.shards) == 1 else f"{first} (+{len(ckpt.shards) - 1} parts)"


def open_view(path: str | Path, config: str | Path | None = None, *, whole: bool = False) -> HcView:
    """whole: every shard the index names must be there (diff compares whole models); a GGUF
    split set must be whole in any case."""
    from hccli.checkpoint.verify import damage
    from hccli.checkpoint import hc as H
    from hccli.checkpoint.opening import open_checkpoint

    ckpt = open_checkpoint(str(path), config=config)
    gguf = any(H.is_gguf(s) for s in ckpt.shards)
    cfg = ckpt.config
    label = ckpt.label
    if gguf:
        H.require_whole(ckpt)  # a GGUF is one model: a part missing is an error, not a smaller model
        label = _gguf_label(ckpt)
    found = damage.findings(ckpt)
    gone = next((f for f in found if f.code == "missing_shard"), None)
    if whole and gone is not None:
        raise HcError(f"{gone.message}; expected every shard it names (hc diff compares whole checkpoints)")
    detection = ckpt.dialect
    counter = [0]

    def reader(site, part: str) -> Callable[[], np.ndarray]:
        def read() -> np.ndarray:
            out = H.read_part(ckpt, site, part)  # exactly the tensor's bytes
            _count(counter, site.parts[part][1].nbytes)
            return out
        return read

    hc: dict[str, HcTensor] = {}
    stored_hc: set[str] = set()
    for site in ckpt.hc_sites:
        for part, (_, info) in site.parts.items():
            h = parse_hc_name(site.tensor_name(part))
            hc[h.canonical()] = HcTensor(h, info.name, info.dtype, info.shape, info.nbytes, reader(site, part))
            stored_hc.add(info.name)
    others = _others(ckpt, stored_hc, gguf)

    shard_of: dict[str, Any] = {}

    def stream(stored: str) -> TensorStream | None:
        if not shard_of:  # on the first value read: --values hc never builds it
            shard_of.update(_shard_of(ckpt))
        shard = shard_of[stored]
        return H.value_stream(ckpt, shard, shard.header.by_name[stored], lambda src: CountingSource(src, counter))

    if cfg is not None:
        model = ModelShape(cfg.hc_mult, cfg.n_layers, cfg.dim, "config")
        iters, eps, norm_eps, n_stages = cfg.hc_sinkhorn_iters, cfg.hc_eps, cfg.norm_eps, cfg.n_stages
    else:
        model, iters, eps, norm_eps = _gguf_figures(ckpt) if gguf else (None, DEFAULT_SINKHORN_ITERS,
                                                                         DEFAULT_HC_EPS, DEFAULT_NORM_EPS)
        model = model or from_hc_shapes((t.hc, t.shape) for t in hc.values())
        n_stages = max((t.hc.num + 1 for t in hc.values() if t.hc.kind == STAGE), default=0)
    if gguf:
        n_stages = 0  # llama.cpp's converter drops the stages; the head mix is numbered without them
    return HcView(label, "gguf" if gguf else "safetensors", detection, model, n_stages, iters, eps, norm_eps, hc,
                  others, ckpt.config_note, ckpt.remote is not None, counter, H.second_spellings(ckpt), stream,
                  tuple(found), damage.absence(ckpt))
