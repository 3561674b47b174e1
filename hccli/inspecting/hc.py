"""The HC section of `hc inspect`: each site's scale and base, and what its base alone
yields (mixes = 0): pre and post weights, and the comb matrix after the Sinkhorn split.

The work is bounded by what a real model needs, whatever a file claims: the base values
read and reported (MAX_INSPECT_VALUES; sites past them are left out, said in a note, and
--layers picks the ones to show), and so the split's element-iterations (sites x hc^2 x
iterations, under MAX_INSPECT_VALUES x MAX_SINKHORN_ITERS), done in plain Python
(ops/split_f32.py, no numpy import) up to PLAIN_SPLIT_BUDGET and by numpy (ops/split_np.py,
the same float32 operations) past it.
"""

from __future__ import annotations

from dataclasses import dataclass

from hccli.base.words import plural
from hccli.checkpoint.hc import is_gguf, op_settings, read_base_scale_lists, site_hc
from hccli.checkpoint.shardset import Checkpoint, HcSiteTensors
from hccli.ops.split_f32 import head_pre_zero, split_sinkhorn_zero, supports
from hccli.base.vocab import mix_width

# base values read and reported in one inspect: a real checkpoint's ~120 sites of hc 4 hold ~3k,
# every site hc allows at up to hc 9; hc_mult at its bound (64) holds 4,224 a site
MAX_INSPECT_VALUES = 1 << 18
# sites x hc^2 x iterations done in plain Python, which costs far more a step than numpy's op
# (imported only past it): a real checkpoint's ~120 sites of hc 4 at 20 iterations are ~40k
PLAIN_SPLIT_BUDGET = 1 << 21


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


def read_hc_entries(ckpt: Checkpoint, sites: list[HcSiteTensors]) -> tuple[list[HcEntry], list[str]]:
    """(the entries, in site order; a line for each reason sites were left out)."""
    iters, eps = op_settings(ckpt)
    usable = [s for s in sites if site_hc(s) is not None
              and all(s.parts[p][1].dtype == "F32" or is_gguf(s.parts[p][0]) for p in ("base", "scale"))]
    # (the others are --verify's to report: hc_incomplete / hc_shape / hc_dtype; nothing to compute,
    # and nothing read: a header past the hc_mult bound may claim gigabytes)
    notes = []  # sites left out, and why
    held, n_values = 0, 0
    for s in usable:
        n_values += mix_width(site_hc(s)) if s.site != "head" else site_hc(s)
        held += n_values <= MAX_INSPECT_VALUES
    if held < len(usable):
        notes.append(f"{ckpt.label}: {len(usable) - held:,} of {plural(len(usable), 'HC site')} left out: their bases "
                     f"hold {n_values:,} values in all, past the {MAX_INSPECT_VALUES:,} one inspect reads (--hc --layers "
                     "picks the sites to show)")
        usable = usable[:held]

    def read(s: HcSiteTensors):
        base, scale = read_base_scale_lists(ckpt, s)
        return s, base, scale

    workers = ckpt.store.workers if ckpt.store is not None else 1
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
    plain = 0  # element-iterations done in plain Python
    for (hc, head), idx in by_shape.items():
        bases, scales = [values[i][1] for i in idx], [values[i][2] for i in idx]
        cost = len(idx) * hc * hc * iters
        if head:
            pre = head_pre_zero(bases, scales, eps)
        elif supports(hc) and plain + cost <= PLAIN_SPLIT_BUDGET:
            plain += cost
            pre, post, comb = split_sinkhorn_zero(bases, scales, hc, iters, eps)
        else:  # no pure halving tree, or past the plain budget: numpy's op (ops/split_np.py)
            pre, post, comb = _split_sinkhorn_np(bases, scales, hc, iters, eps)
        for row, i in enumerate(idx):
            s, b, scale = values[i]
            common = (s.layer, s.name, s.site, s.is_stage, scale, b)
            if head:
                out[i] = HcEntry(*common, HeadParts(b), pre[row])
            else:
                parts = SplitParts(b[:hc], b[hc:2 * hc], [b[(2 + j) * hc:(3 + j) * hc] for j in range(hc)])
                out[i] = HcSplitEntry(*common, parts, pre[row], post[row], comb[row])
    return [out[i] for i in sorted(out)], notes


def _split_sinkhorn_np(bases: list, scales: list, hc: int, iters: int, eps: float) -> tuple[list, list, list]:
    import numpy as np

    from hccli.ops.split_np import split_sinkhorn

    b = np.array(bases, dtype=np.float32)
    with np.errstate(all="ignore"):
        pre, post, comb = split_sinkhorn(np.zeros_like(b), np.array(scales, dtype=np.float32), b, hc, iters, eps)
    return pre.tolist(), post.tolist(), comb.tolist()
