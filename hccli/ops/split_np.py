"""The split-Sinkhorn op in numpy (no torch), for `hc inspect`: the comb matrix
that a site's base alone yields (mixes = 0).

Same order of operations as the reference kernel: affine step, row softmax + eps,
one column normalisation, then iters-1 rounds of row and column normalisation,
each dividing by the sum + eps; 4-sums as (x0+x2)+(x1+x3) like the kernel's
reduction. float32 by default, float64 on request.

The keyword-only knobs (post multiplier, where eps is added, the softmax's axis) are
the reference's by default; `hc check-port` (hccli/port/check.py) turns them to
recompute a port's known mistakes with this same op.
"""

from __future__ import annotations

import numpy as np


def _pairwise_sum(x: np.ndarray, axis: int) -> np.ndarray:
    # the kernel's reduction tree: halves first, then pairs ((x0+x2)+(x1+x3) for 4)
    n = x.shape[axis]
    lo = [slice(None)] * x.ndim
    hi = [slice(None)] * x.ndim
    while n > 1:
        if n % 2:
            return np.sum(x, axis=axis, dtype=x.dtype)
        lo[axis], hi[axis] = slice(0, n // 2), slice(n // 2, n)
        x = x[tuple(lo)] + x[tuple(hi)]
        n //= 2
    return np.squeeze(x, axis=axis)


# The published kernel's arguments, then the variants' switches: one flat list, as ports call it
# (tests/test_signatures.py allows it).
def split_sinkhorn(mixes: np.ndarray, scale: np.ndarray, base: np.ndarray, hc: int, iters: int, eps: float,
                   dtype=np.float32, *, post_mult: float = 2.0, softmax_eps: bool = True, sum_eps: bool = True,
                   softmax_axis: int = -1, kernel_sums: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """kernel_sums=False sums in numpy's own order: for a derivative, where the order does not matter
    and the kernel's halving tree costs several times as much."""
    m = np.asarray(mixes, dtype=dtype)
    total = _pairwise_sum if kernel_sums else (lambda x, axis: x.sum(axis=axis))
    s = np.asarray(scale, dtype=dtype)
    b = np.asarray(base, dtype=dtype)
    e = dtype(eps)
    add = e if softmax_eps else dtype(0)  # the eps added to every entry after the softmax
    d = e if sum_eps else dtype(0)  # the eps added to each row and column sum
    one = dtype(1)
    # scale [3] or one per row [..., 3]; base [(2+hc)*hc] or one per row
    pre = one / (one + np.exp(-(m[..., :hc] * s[..., 0:1] + b[..., :hc]))) + e
    post = dtype(post_mult) * (one / (one + np.exp(-(m[..., hc:2 * hc] * s[..., 1:2] + b[..., hc:2 * hc]))))
    comb = (m[..., 2 * hc:] * s[..., 2:3] + b[..., 2 * hc:]).reshape(*m.shape[:-1], hc, hc)
    comb = np.exp(comb - comb.max(axis=softmax_axis, keepdims=True))
    comb = comb / np.expand_dims(total(comb, softmax_axis), softmax_axis) + add
    comb = comb / (total(comb, -2)[..., None, :] + d)
    for _ in range(iters - 1):
        comb = comb / (total(comb, -1)[..., :, None] + d)
        comb = comb / (total(comb, -2)[..., None, :] + d)
    return pre, post, comb


def head_pre(mixes: np.ndarray, scale: np.ndarray, base: np.ndarray, eps: float, dtype=np.float32) -> np.ndarray:
    """The V4 head mix: sigmoid(mixes * scale + base) + eps, no Sinkhorn."""
    m = np.asarray(mixes, dtype=dtype)
    one = dtype(1)
    s = np.asarray(scale, dtype=dtype)
    return one / (one + np.exp(-(m * s[..., 0:1] + np.asarray(base, dtype=dtype)))) + dtype(eps)

