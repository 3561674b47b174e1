"""The split-Sinkhorn op in numpy (no torch), for `hc inspect`: the comb matrix
that a site's base alone yields (mixes = 0).

Same order of operations as the reference kernel: affine step, row softmax + eps,
one column normalisation, then iters-1 rounds of row and column normalisation,
each dividing by the sum + eps; 4-sums as (x0+x2)+(x1+x3) like the kernel's
reduction. float32 by default, float64 on request.
"""

from __future__ import annotations

import numpy as np


def _pairwise_sum(x: np.ndarray, axis: int) -> np.ndarray:
    # the kernel's reduction tree: halves first, then pairs ((x0+x2)+(x1+x3) for 4)
    x = np.moveaxis(x, axis, -1)
    while x.shape[-1] > 1:
        n = x.shape[-1]
        if n % 2:
            return np.sum(x, axis=-1, dtype=x.dtype)
        x = x[..., : n // 2] + x[..., n // 2:]
    return x[..., 0]


def split_sinkhorn(mixes: np.ndarray, scale: np.ndarray, base: np.ndarray, hc: int, iters: int, eps: float,
                   dtype=np.float32) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    m = np.asarray(mixes, dtype=dtype)
    s = np.asarray(scale, dtype=dtype)
    b = np.asarray(base, dtype=dtype)
    e = dtype(eps)
    one = dtype(1)
    # scale [3] or one per row [..., 3]; base [(2+hc)*hc] or one per row
    pre = one / (one + np.exp(-(m[..., :hc] * s[..., 0:1] + b[..., :hc]))) + e
    post = dtype(2) * (one / (one + np.exp(-(m[..., hc:2 * hc] * s[..., 1:2] + b[..., hc:2 * hc]))))
    comb = (m[..., 2 * hc:] * s[..., 2:3] + b[..., 2 * hc:]).reshape(*m.shape[:-1], hc, hc)
    comb = np.exp(comb - comb.max(axis=-1, keepdims=True))
    comb = comb / _pairwise_sum(comb, -1)[..., :, None] + e
    comb = comb / (_pairwise_sum(comb, -2)[..., None, :] + e)
    for _ in range(iters - 1):
        comb = comb / (_pairwise_sum(comb, -1)[..., :, None] + e)
        comb = comb / (_pairwise_sum(comb, -2)[..., None, :] + e)
    return pre, post, comb


def head_pre(mixes: np.ndarray, scale: np.ndarray, base: np.ndarray, eps: float, dtype=np.float32) -> np.ndarray:
    """The V4 head mix: sigmoid(mixes * scale + base) + eps, no Sinkhorn."""
    m = np.asarray(mixes, dtype=dtype)
    one = dtype(1)
    s = np.asarray(scale, dtype=dtype)
    return one / (one + np.exp(-(m * s[..., 0:1] + np.asarray(base, dtype=dtype)))) + dtype(eps)


def split_sinkhorn_zero_lists(bases: list, scales: list, hc: int, iters: int, eps: float) -> tuple[list, list, list]:
    """split_sinkhorn at zero mixes for rows of bases and scales given as lists (`inspect`'s sites of
    a stream count sinkhorn_f32 has no halving tree for), as lists."""
    b = np.array(bases, dtype=np.float32)
    with np.errstate(all="ignore"):
        pre, post, comb = split_sinkhorn(np.zeros_like(b), np.array(scales, dtype=np.float32), b, hc, iters, eps)
    return pre.tolist(), post.tolist(), comb.tolist()
