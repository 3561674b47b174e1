"""How far a correct port's steps may lie from the recomputed ones: the envelope of each element.

Two parts, added. The op's own rounding: what float32 arithmetic in another valid order may change
(U = 2^-24, ULP = 2U, n = hc*dim):

    rsqrt        ULP * (4 + sqrt(n)/4) * |rsqrt|                  (a sum of n squares)
    mixes        ULP * (4 + sqrt(n)/16) * sum_k |flat_k fn_ik| * rsqrt + 2 ULP * |mixes|
    pre, post    ULP * (8 |v| + c * s(1-s) * (|m scale| + |base|))   (c = 2 for pre, 4 for post)
    comb         ULP * (16 + 2 (|l| + max |l| of its row)) * |comb|,  l = m scale + base
    collapsed    ULP * (2 + hc) * sum_i |w_i x_i|
    streams_out  ULP * (2 + hc) * (|post f| + sum_j |comb_jk x_j|)

And the rounding the port carried in from the steps before it that it did not give: a port
without mixes (mlx-lm computes none) rounded its own projection, which moved its pre, post and
comb by the mixes' envelope carried through the split's derivative (sigmoid's s(1-s) scale, and
for comb the derivative of softmax and Sinkhorn, taken numerically in float64); a port without
pre, post or comb carries theirs into the collapse and the write-back the same way.

Both parts are first-order bounds; MARGIN (2) multiplies them. Its reason: each term takes one
op's rounding as one float32 unit, which is what correct rounding of each op gives, but the
functions ports call promise less: libm's and the vector libraries' exp, the sigmoid built on
them and the hardware rsqrt estimate (refined by one Newton step) are faithful, within one unit
but not half of one, and an implementation may compute a step with one more op than the published
one (a reciprocal then a multiply for a division). Twice the bound holds for those, and costs no
detection (docs/commands/check-port.md: the known mistakes move a step by 13 times it or more).

Steps cast to bf16 (collapsed and streams_out in bf16 streams) add one bf16 unit of the value,
exactly and outside the margin: a float32 difference within the envelope rounds a value to its
bf16 neighbour at most, and a correct port's element that did so sits at 1.000 of the envelope.
Ports whose arithmetic is a known variant have envelopes of their own: a bf16 projection result
may round to its bf16 neighbour (one bf16 unit of the result, where the order of its float32 sum
decides); a bf16 operand after normalising may round to its neighbour where the port's own
rsqrt puts it across a rounding midpoint (counted element by element); a bf16 write-back's matmul
sum and final sum may each round to their neighbour.
"""

from __future__ import annotations

import math

import numpy as np

U = 2.0 ** -24
ULP = 2 * U
MARGIN = 2.0


def bf16_step(v: np.ndarray) -> np.ndarray:
    """One bf16 unit at |v| (0 at 0)."""
    mant, exp = np.frexp(np.abs(np.asarray(v, dtype=np.float64)))
    return np.where(mant > 0, np.ldexp(1.0, exp - 8), 0.0)


def rsqrt_env(r: np.ndarray, n: int) -> np.ndarray:
    return MARGIN * ULP * (4 + math.sqrt(n) / 4) * np.abs(r.astype(np.float64))


def mixes_env(x: np.ndarray, fn: np.ndarray, r: np.ndarray, m: np.ndarray, r_env: np.ndarray | None
              ) -> np.ndarray:
    """The projection's rounding; r_env: the envelope of the rsqrt it used where that was not the port's."""
    n = x[0].size
    r64 = r.astype(np.float64)
    scaled = x.astype(np.float64) * (r64[..., None] if r.ndim == 2 else 1.0)
    s = np.abs(scaled.reshape(x.shape[0], -1)) @ np.abs(fn.astype(np.float64)).T
    s = s * (np.abs(r64)[:, None] if r.ndim == 1 else 1.0)
    m64 = np.abs(m.astype(np.float64))
    env = MARGIN * (ULP * (4 + math.sqrt(n) / 16) * s + 2 * ULP * m64)
    if r_env is not None and r.ndim == 1:
        env = env + m64 * (r_env / np.maximum(np.abs(r64), np.finfo(np.float64).tiny))[:, None]
    return env


def bf16_result_env(m: np.ndarray, r: np.ndarray, norm_first: bool) -> np.ndarray:
    """A projection that returns bf16: the result may round to its neighbour (then times rsqrt)."""
    if norm_first or r.ndim != 1:
        return bf16_step(m)
    r64 = np.abs(r.astype(np.float64))[:, None]
    with np.errstate(all="ignore"):
        return np.nan_to_num(bf16_step(m.astype(np.float64) / r64) * r64)


def operand_flips(x: np.ndarray, fn: np.ndarray, r: np.ndarray, r_env: np.ndarray) -> np.ndarray:
    """bf16 operands flat * rsqrt (normalised first): where the port's rsqrt, within r_env of ours,
    may put an element across a bf16 rounding midpoint, that operand may be its bf16 neighbour."""
    t = x.shape[0]
    flat = x.reshape(t, -1).astype(np.float64)
    v = flat * r.astype(np.float64)[:, None]
    step = bf16_step(v)
    # distance to the nearest midpoint between bf16 neighbours
    with np.errstate(all="ignore"):
        frac = np.abs(v) / np.where(step > 0, step, 1.0)
    mid = np.abs(frac - np.floor(frac) - 0.5) * step
    reach = np.abs(flat) * r_env[:, None] + ULP * np.abs(v)
    flips = np.where(mid <= reach, step, 0.0)
    return flips @ np.abs(fn.astype(np.float64)).T


def sigmoid_env(v: np.ndarray, ms: np.ndarray, b: np.ndarray, c: float, value: np.ndarray | None = None
                ) -> np.ndarray:
    s = np.clip(v.astype(np.float64), 0, 1)
    full = np.abs((value if value is not None else v).astype(np.float64))
    return MARGIN * ULP * (8 * full + c * s * (1 - s) * (np.abs(ms) + np.abs(b)))


def sigmoid_carried(v: np.ndarray, scale: float, m_env: np.ndarray, mult: float = 1.0) -> np.ndarray:
    """What the mixes' envelope moves mult * sigmoid(m scale + b) by: its derivative, mult s(1-s) scale."""
    s = np.clip(v.astype(np.float64), 0, 1)
    return mult * s * (1 - s) * abs(scale) * m_env


def comb_env(m: np.ndarray, scale: np.ndarray, base: np.ndarray, comb: np.ndarray, hc: int) -> np.ndarray:
    logit = np.abs(m[:, 2 * hc:] * scale[2] + base[2 * hc:]).reshape(-1, hc, hc)
    top = np.maximum(logit.max(axis=-1, keepdims=True), logit.max(axis=-2, keepdims=True))
    return MARGIN * ULP * (16 + 2 * (logit + top)) * np.abs(comb.astype(np.float64))


def comb_carried(split64, m: np.ndarray, m_env: np.ndarray, hc: int) -> np.ndarray:
    """sum_i |d comb / d mixes_i| * m_env_i over the comb's mixes, by forward differences in float64
    (one pass over every token and direction at once); split64(mixes) -> comb is the site's split
    (its scale, base, iterations and eps)."""
    m64 = m.astype(np.float64)
    w = hc * hc
    h = 1e-7 * np.maximum(1.0, np.abs(m64[:, 2 * hc:]))  # [T, hc*hc]
    stack = np.repeat(m64[None], w + 1, axis=0)
    for a in range(w):
        stack[1 + a, :, 2 * hc + a] += h[:, a]
    with np.errstate(all="ignore"):
        c = split64(stack)
        d = (c[1:] - c[0]) / h.T[:, :, None, None]  # [hc*hc, T, hc, hc]
    d = np.nan_to_num(np.abs(d), nan=np.inf)
    return np.einsum("atjk,ta->tjk", d, m_env[:, 2 * hc:].astype(np.float64))


def collapse_env(x: np.ndarray, w: np.ndarray, factor: float, w_env: np.ndarray | None) -> np.ndarray:
    hc = x.shape[1]
    ax = np.abs(x.astype(np.float64))
    env = MARGIN * ULP * (2 + hc) * abs(factor) * np.einsum("ti,tid->td", np.abs(w.astype(np.float64)), ax)
    if w_env is not None:
        env = env + abs(factor) * np.einsum("ti,tid->td", w_env, ax)
    return env


def write_back_env(f: np.ndarray, x: np.ndarray, post: np.ndarray, comb: np.ndarray, post_env, comb_env_
                   ) -> np.ndarray:
    """comb as the write-back applies it ([t, j, k]: the weight of stream j in stream k)."""
    hc = x.shape[1]
    af, ax = np.abs(f.astype(np.float64))[:, None, :], np.abs(x.astype(np.float64))
    mag = np.abs(post)[:, :, None] * af + np.einsum("tjk,tjd->tkd", np.abs(comb), ax)
    env = MARGIN * ULP * (2 + hc) * mag
    if post_env is not None:
        env = env + post_env[:, :, None] * af
    if comb_env_ is not None:
        env = env + np.einsum("tjk,tjd->tkd", comb_env_, ax)
    return env
