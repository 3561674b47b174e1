"""`hc inspect --stats`: value statistics of the HC tensors (fn, base, scale of each site): min,
max, mean and standard deviation of the finite values, and how many are not finite.

Each tensor is streamed in bounded chunks (checkpoint/hc.value_stream, diff's reader), so that
a tensor of any size is looked at without holding it; the chunks' moments are merged exactly
(Chan et al.'s pairwise update, in float64). The bytes read by one --stats are bounded
(MAX_STATS_BYTES): a real V4-Pro's HC tensors are ~0.35 GB, and a hostile header may claim
terabytes; tensors past the bound are left out and said so in a note.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from hccli.base.words import plural
from hccli.base.bounded import one_line
from hccli.checkpoint.hc import value_stream
from hccli.checkpoint.shardset import Checkpoint, HcSiteTensors

# stored bytes of HC tensors one --stats reads: ~6x a V4-Pro's (fn 24 x 28,672 F32 at ~125 sites)
MAX_STATS_BYTES = 1 << 31
# values decoded at a time (float64: 16 MB a chunk)
STATS_CHUNK_ELEMENTS = 1 << 21
_PARTS = ("fn", "base", "scale")


@dataclass(frozen=True, slots=True)
class TensorStats:
    """One HC tensor's values. min, max, mean, std (population) are of its finite values; None
    when it has none."""

    name: str  # as the checkpoint spells it
    layer: int
    site: str
    part: str  # fn, base or scale
    dtype: str
    elements: int
    nonfinite: int  # NaN and +-Inf
    min: float | None
    max: float | None
    mean: float | None
    std: float | None


class _Moments:
    __slots__ = ("n", "mean", "m2", "lo", "hi", "bad")

    def __init__(self) -> None:
        self.n, self.mean, self.m2, self.lo, self.hi, self.bad = 0, 0.0, 0.0, None, None, 0

    def add(self, x) -> None:
        import numpy as np

        finite = np.isfinite(x)
        k = int(np.count_nonzero(finite))
        self.bad += x.size - k
        if k < x.size:
            x = x[finite]
        if not k:
            return
        mean = float(x.mean())
        m2 = float(np.square(x - mean).sum())
        lo, hi = float(x.min()), float(x.max())
        n = self.n + k
        delta = mean - self.mean
        self.mean += delta * k / n
        self.m2 += m2 + delta * delta * self.n * k / n
        self.n = n
        self.lo = lo if self.lo is None else min(self.lo, lo)
        self.hi = hi if self.hi is None else max(self.hi, hi)


def hc_stats(ckpt: Checkpoint, sites: list[HcSiteTensors], progress: Callable[[int, int, str], None] | None = None
             ) -> tuple[list[TensorStats], list[str], int]:
    """(each HC tensor's statistics, in site order; a line for each reason some were left out;
    the bytes of values read). progress(bytes done, bytes in all, tensor name)."""
    tensors = [(s, part, *s.parts[part]) for s in sites for part in _PARTS if part in s.parts]
    notes: list[str] = []
    kept, total = [], 0
    for t in tensors:
        if total + t[3].nbytes > MAX_STATS_BYTES:
            break
        kept.append(t)
        total += t[3].nbytes
    if len(kept) < len(tensors):
        claimed = sum(t[3].nbytes for t in tensors)
        notes.append(f"{ckpt.label}: statistics of {len(tensors) - len(kept):,} of {plural(len(tensors), 'HC tensor')} left "
                     f"out: they hold {claimed:,} bytes in all, past the {MAX_STATS_BYTES:,} one --stats reads "
                     "(--layers picks the sites)")
    out, before, undecoded, read = [], 0, [], 0  # before: bytes of the tensors finished
    for site, part, shard, info in kept:
        name = one_line(info.name)
        stream = value_stream(ckpt, shard, info)
        if stream is None:
            undecoded.append(f"'{name}' ({info.dtype})")
        else:
            m, seen = _Moments(), 0
            step = max(1, STATS_CHUNK_ELEMENTS // stream.unit_values) * stream.unit_values
            with stream.open() as src:
                for raw in stream.chunks(src, step):
                    x = stream.decode(raw)
                    m.add(x)
                    seen += x.size
                    if progress is not None:
                        progress(before + seen * info.nbytes // max(1, info.n_elements), total, name)
            read += info.nbytes
            std = (m.m2 / m.n) ** 0.5 if m.n else None
            out.append(TensorStats(info.name, site.layer, site.site, part, info.dtype, info.n_elements, m.bad,
                                   m.lo, m.hi, m.mean if m.n else None, std))
        before += info.nbytes
    if undecoded:
        notes.append(f"{ckpt.label}: no statistics of {plural(len(undecoded), 'HC tensor')} whose type is decoded nowhere "
                     f"here: {', '.join(undecoded[:5])}{' ...' if len(undecoded) > 5 else ''}")
    return out, notes, read
