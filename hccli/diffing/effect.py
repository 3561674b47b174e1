"""`hc diff`'s effect downstream: what a site's tensors do to the pre/post weights and comb
matrix, from the base alone (mixes = 0) and from seeded sample hidden states sent through
each side's whole site (the fn projection with RMS scaling, then ops/split_np.py's op).
The sample is bounded: [tokens, hc, dim] holds at most base/limits.py's MAX_ELEMENTS values,
whatever a config or a GGUF's metadata says the model's width is. Nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hccli.ops import site
from hccli.checkpoint.view import HcView
from hccli.base.limits import MAX_ELEMENTS
from hccli.ops.split_np import head_pre, split_sinkhorn
from hccli.base.vocab import HC_PARTS, hc_from_mix_width


@dataclass(frozen=True)
class Effect:
    via: str  # "base alone (mixes = 0)" or "16 sample tokens (seed 0)"
    pre: float  # max abs difference of the pre weights
    post: float | None  # None for the head mix, which has pre only
    comb: float | None


def _ops(hc: int, view: HcView, site: str, mixes: np.ndarray, scale: np.ndarray, base: np.ndarray):
    with np.errstate(all="ignore"):
        if site == "head":
            return head_pre(mixes, scale, base, view.eps), None, None
        return split_sinkhorn(mixes, scale, base, hc, view.iters, view.eps)


def _effect(via: str, ea, eb) -> Effect:
    def mx(x, y) -> float | None:
        if x is None or y is None:
            return None
        with np.errstate(all="ignore"):
            d = np.abs(x.astype(np.float64) - y.astype(np.float64))
        return float(np.nan if np.isnan(d).any() else d.max())
    return Effect(via, mx(ea[0], eb[0]), mx(ea[1], eb[1]), mx(ea[2], eb[2]))


def sample_tokens(tokens: int, hc: int | None, dim: int | None) -> tuple[int, str]:
    """(the sample tokens sent, a note when fewer than asked): [tokens, hc, dim] holds at most
    MAX_ELEMENTS values, however large a config or a GGUF's metadata says the model is."""
    per = hc * dim if hc and dim and hc > 0 and dim > 0 else 0
    fit = min(tokens, MAX_ELEMENTS // per) if per > 0 else 0
    if fit == tokens or not (hc and dim):
        return tokens, ""
    return fit, (f"{tokens} sample tokens x hc_mult {hc:,} x dim {dim:,}: expected at most {MAX_ELEMENTS:,} values "
                 f"(base/limits.py's MAX_ELEMENTS) and a positive hc_mult and dim; "
                 + (f"{fit} sent" if fit else "none sent (effects from the base alone)"))


def sample_hidden(tokens: int, seed: int, hc: int, dim: int) -> np.ndarray:
    """The fixed sample hidden states [tokens, hc, dim]: N(0, 1), float32, seeded."""
    return np.random.default_rng(seed).standard_normal((tokens, hc, dim), dtype=np.float32)


def site_mixes(hidden: np.ndarray, fn: np.ndarray, norm_eps: float) -> np.ndarray:
    """The model's projection, the one the site runs (hccli/ops/site.py):
    x = h.flatten(-2); (x @ fn.T) * rsqrt(mean(x^2) + norm_eps)."""
    with np.errstate(all="ignore"):
        return site.project(hidden.astype(np.float32), fn, norm_eps)[1]


def site_effects(a: HcView, b: HcView, site: str, va: dict, vb: dict, hidden: np.ndarray | None, via: str
                 ) -> tuple[Effect | None, Effect | None]:
    """(base-alone effect, sample-token effect); None where a part is missing or misshapen."""
    if not all(p in va and p in vb and va[p].shape == vb[p].shape for p in HC_PARTS):
        return None, None
    same_op = (a.iters, a.eps, a.norm_eps) == (b.iters, b.eps, b.norm_eps)
    if same_op and all(np.array_equal(va[p], vb[p]) for p in HC_PARTS):  # the same inputs give the same outputs
        none = 0.0 if site != "head" else None
        return (Effect("base alone (mixes = 0)", 0.0, none, none),
                Effect(via, 0.0, none, none) if hidden is not None else None)
    (ba, sa), (bb, sb) = ((v["base"].reshape(-1), v["scale"].reshape(-1)) for v in (va, vb))
    hc = len(ba) if site == "head" else hc_from_mix_width(len(ba))
    if hc is None or (site != "head" and len(sa) != 3):
        return None, None
    zero = np.zeros((1, len(ba)), np.float32)
    alone = _effect("base alone (mixes = 0)", _ops(hc, a, site, zero, sa, ba), _ops(hc, b, site, zero, sb, bb))
    if hidden is None or va["fn"].shape != (len(ba), hidden.shape[1] * hidden.shape[2]):
        return alone, None
    return alone, _effect(via, _ops(hc, a, site, site_mixes(hidden, va["fn"], a.norm_eps), sa, ba),
                          _ops(hc, b, site, site_mixes(hidden, vb["fn"], b.norm_eps), sb, bb))
