"""The HC section of `hc inspect`: each site's scale and base values, and what its base alone
yields (mixes = 0), computed without numpy where the float32 op allows (sinkhorn_f32.py)."""

from __future__ import annotations

from dataclasses import dataclass

from hccli.checkpoint.hc import is_gguf, op_settings, read_base_scale_lists, site_hc
from hccli.checkpoint.shardset import Checkpoint, HcSiteTensors
from hccli.sinkhorn_f32 import head_pre_zero, split_sinkhorn_zero, supports


@dataclass(frozen=True, slots=True)
class HeadParts:
    """A head mix's base: hc pre offsets, nothing else."""

    pre: list[float]


@dataclass(frozen=True, slots=True)
class SplitParts:
    """An attn/ffn site's base, (2 + hc) * hc values: pre, post, then the comb rows."""

    pre: list[float]
    post: list[float]
    comb: list[list[float]]


@dataclass(frozen=True, slots=True)
class HcEntry:
    """One HC site's values and what its base alone yields (mixes = 0). As is, the root
    or a stage's head mix (no Sinkhorn there); attn and ffn sites are HcSplitEntry."""

    layer: int
    name: str  # "layers.3", "mtp.0" or "head"
    site: str
    stage: bool
    scale: list[float]
    base: list[float]
    base_parts: HeadParts | SplitParts
    pre_from_base: list[float]

    @property
    def hc(self) -> int:
        return len(self.pre_from_base)


@dataclass(frozen=True, slots=True)
class HcSplitEntry(HcEntry):
    post_from_base: list[float]
    comb_from_base: list[list[float]]


def read_hc_entries(ckpt: Checkpoint, sites: list[HcSiteTensors]) -> list[HcEntry]:
    iters, eps = op_settings(ckpt)
    usable = [s for s in sites if site_hc(s) is not None
              and all(s.parts[p][1].dtype == "F32" or is_gguf(s.parts[p][0]) for p in ("base", "scale"))]
    # (the others are --verify's to report: hc_incomplete / hc_shape / hc_dtype; nothing to compute,
    # and nothing read: a header past the hc_mult bound may claim gigabytes)

    def read(s: HcSiteTensors):
        base, scale = read_base_scale_lists(ckpt, s)
        return s, base, scale

    workers = ckpt.store.workers
    if workers > 1:  # each read is a round trip: overlap them
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2 * workers) as pool:
            values = list(pool.map(read, usable))
    else:
        values = [read(s) for s in usable]
    out: dict[int, HcEntry] = {}
    # the sites of one shape go through the op together, one row each (mixes = 0)
    by_shape: dict[tuple[int, bool], list] = {}
    for i, (s, base, scale) in enumerate(values):
        by_shape.setdefault((site_hc(s), s.site == "head"), []).append(i)
    for (hc, head), idx in by_shape.items():
        bases, scales = [values[i][1] for i in idx], [values[i][2] for i in idx]
        if head:
            pre = head_pre_zero(bases, scales, eps)
        elif supports(hc):
            pre, post, comb = split_sinkhorn_zero(bases, scales, hc, iters, eps)
        else:  # no pure halving tree: numpy's op (sinkhorn_np.py)
            pre, post, comb = _split_sinkhorn_np(bases, scales, hc, iters, eps)
        for row, i in enumerate(idx):
            s, b, scale = values[i]
            common = (s.layer, s.name, s.site, s.is_stage, scale, b)
            if head:
                out[i] = HcEntry(*common, HeadParts(b), pre[row])
            else:
                parts = SplitParts(b[:hc], b[hc:2 * hc], [b[(2 + j) * hc:(3 + j) * hc] for j in range(hc)])
                out[i] = HcSplitEntry(*common, parts, pre[row], post[row], comb[row])
    return [out[i] for i in sorted(out)]


def _split_sinkhorn_np(bases: list, scales: list, hc: int, iters: int, eps: float) -> tuple[list, list, list]:
    import numpy as np

    from hccli.sinkhorn_np import split_sinkhorn

    b = np.array(bases, dtype=np.float32)
    with np.errstate(all="ignore"):
        pre, post, comb = split_sinkhorn(np.zeros_like(b), np.array(scales, dtype=np.float32), b, hc, iters, eps)
    return pre.tolist(), post.tolist(), comb.tolist()
