"""The site's eager reference chain in torch: the published forward, one torch op at a time.

    flat      = x.flatten(-2).float()
    mixes     = linear(flat, fn) * rsqrt(mean(flat**2, -1) + norm_eps)
    pre, post, comb = split(mixes, scale, base)          # the split kernel (or the torch reference)
    collapsed = sum_i pre_mix[i] * x[i]                   # float32, cast to x's dtype
    out[j]    = post[j] * f + sum_i comb[i, j] * residual[i]   # float32, cast

The sums over streams are written out left to right, ((t0 + t1) + t2) + t3,
each product and sum a separate float32 op (torch rounds each elementwise op
on its own), which is the order the site kernels (site_tl.py) reproduce bit
for bit. Run on float64 inputs (and fn), the same chain computes in float64
and keeps float64 outputs: the oracle the kernels' errors are measured against.

V4 collapses with the site's own pre (pre_mix None); V4.1 hands the previous
site's pre forward (pre_mix given). torch is imported inside the functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from hccli.base.vocab import DEFAULT_HC_EPS, DEFAULT_NORM_EPS, DEFAULT_SINKHORN_ITERS


@dataclass(frozen=True)
class SitePre:
    """The pre step's outputs: mixes [T, W], pre [T, hc], post [T, hc], comb [T, hc, hc] (float32 or
    float64), collapsed [T, dim] in the streams' dtype."""

    mixes: Any
    pre: Any
    post: Any
    comb: Any
    collapsed: Any

    OUTPUTS = ("mixes", "pre", "post", "comb", "collapsed")

    def items(self) -> tuple[tuple[str, Any], ...]:
        return tuple((name, getattr(self, name)) for name in self.OUTPUTS)


def _compute_dtype(torch: Any, t: Any) -> Any:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _left_sum(terms: Any) -> Any:
    acc = None
    for term in terms:
        acc = term if acc is None else acc + term
    return acc


def collapse_eager(x: Any, pre_mix: Any) -> Any:
    """sum_i pre_mix[i] * x[i] in pre_mix's dtype, cast to x's dtype; x [T, hc, dim], pre_mix [T, hc]."""
    dt = pre_mix.dtype
    return _left_sum(pre_mix[..., i:i + 1] * x[..., i, :].to(dt) for i in range(x.shape[-2])).to(x.dtype)


# The published site's arguments in its order, as site_pre takes them (tests/test_signatures.py allows it).
def site_pre_eager(x: Any, fn: Any, scale: Any, base: Any, *, hc_mult: int = 4,
                   sinkhorn_iters: int = DEFAULT_SINKHORN_ITERS, eps: float = DEFAULT_HC_EPS,
                   norm_eps: float = DEFAULT_NORM_EPS, pre_mix: Any = None,
                   split: Callable[..., tuple[Any, Any, Any]] | None = None) -> SitePre:
    """The pre step on streams x [T, hc, dim]; pre_mix None collapses with this site's pre (V4),
    else with pre_mix [T, hc] (V4.1). split(mixes, scale, base, hc, iters, eps) defaults to the
    torch reference; the eager chain on a GPU passes the exact kernel."""
    import torch
    import torch.nn.functional as F

    from hccli.kernels.torch_ref import hc_split_sinkhorn_torch

    cd = _compute_dtype(torch, x)
    flat = x.flatten(-2).to(cd)
    rsqrt = torch.rsqrt(flat.square().mean(-1, keepdim=True) + norm_eps)
    mixes = F.linear(flat, fn.to(cd)) * rsqrt
    pre, post, comb = (split or hc_split_sinkhorn_torch)(mixes, scale.to(cd), base.to(cd), hc_mult,
                                                         sinkhorn_iters, eps)
    weights = pre if pre_mix is None else pre_mix.to(cd)
    return SitePre(mixes, pre, post, comb, collapse_eager(x, weights))


def site_write_eager(f: Any, residual: Any, post: Any, comb: Any) -> Any:
    """out[j] = post[j] * f + sum_i comb[i, j] * residual[i], in post's dtype, cast to residual's dtype.

    f [T, dim], residual [T, hc, dim], post [T, hc], comb [T, hc, hc] (row i = source stream).
    """
    dt = post.dtype
    mixed = _left_sum(comb[..., i, :, None] * residual[..., i:i + 1, :].to(dt) for i in range(residual.shape[-2]))
    return (post.unsqueeze(-1) * f.unsqueeze(-2).to(dt) + mixed).to(residual.dtype)
