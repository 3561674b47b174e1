"""The per-token arithmetic of the token-per-thread kernels (token_kernels.py), as tilelang macros.

Each factory returns a `T.macro` that works on one thread's registers:
x [(2+hc)*hc] holds the token's mixes, ps the 3 scales and pb the (2+hc)*hc
offsets (hc_scale, hc_base); it leaves pre in pv, post in qv and the
hc x hc matrix, row-major, in m (row j = source stream j, column k = target
stream k, as in the reference). Loops are `T.unroll`, so that every register
index is a constant after nvcc unrolls them; sums over a row or a column are
built here in Python as one expression tree, in the order each variant needs.

tilelang is imported inside the factories only.
"""

from __future__ import annotations

import functools
from typing import Any

# Smallest dividend for which the shared-reciprocal quotient is certainly the IEEE one
# (exact.py): below 2^-102 the remainder a - d*q could lose bits to underflow.
SAFE_DIVIDEND = 2.0 ** -100


def butterfly_sum(T: Any, vals: list[Any]) -> Any:
    """The published kernel's reduce order: pairs n/2 apart first, then n/4 ...: (x0+x2)+(x1+x3) for 4."""
    while len(vals) > 1:
        h = len(vals) // 2
        vals = [T.ieee_add(vals[i], vals[i + h]) for i in range(h)]
    return vals[0]


def tree_sum(vals: list[Any]) -> Any:
    """A balanced sum (order free, for the fast kernel)."""
    while len(vals) > 1:
        nxt = [vals[i] + vals[i + 1] for i in range(0, len(vals) - 1, 2)]
        vals = nxt + ([vals[-1]] if len(vals) % 2 else [])
    return vals[0]


def dot(T: Any, a: list[Any], b: list[Any]) -> Any:
    """sum a_i b_i as one multiply and a chain of FMAs."""
    acc = a[0] * b[0]
    for ai, bi in zip(a[1:], b[1:]):
        acc = T.ieee_fmaf(ai, bi, acc)
    return acc


def sinkhorn_loop(T: Any, n: int, unroll: int) -> Any:
    """The loop over the Sinkhorn iterations: serial (1), fully unrolled (0) or `#pragma unroll k`."""
    if unroll == 1:
        return T.serial(n)
    if unroll == 0:
        return T.unroll(n)
    return T.unroll(n, annotations={"pragma_unroll_factor": unroll})


def token_start(T: Any, hc: int, eps: float, exp: Any, rcp: Any) -> tuple[Any, Any]:
    """The two macros both variants open a token with, made from their own exp and reciprocal:

    gates(x, m, pv, qv, ps, pb): pre and post into pv and qv, the comb logits into m, each affine
    step one fused multiply-add; numerators(m, j): row j of m as exp(m - the row's max), the
    softmax's numerators.
    """
    two = 2 * hc

    @T.macro
    def gates(x: Any, m: Any, pv: Any, qv: Any, ps: Any, pb: Any) -> None:
        for j in T.unroll(hc):
            pv[j] = rcp(1.0 + exp(0.0 - T.ieee_fmaf(x[j], ps[0], pb[j]))) + eps
            qv[j] = 2.0 * rcp(1.0 + exp(0.0 - T.ieee_fmaf(x[hc + j], ps[1], pb[hc + j])))
        for i in T.unroll(hc * hc):
            m[i] = T.ieee_fmaf(x[two + i], ps[2], pb[two + i])

    @T.macro
    def numerators(m: Any, j: Any) -> None:
        mx = functools.reduce(T.max, [m[j * hc + k] for k in range(hc)])
        for k in T.unroll(hc):
            m[j * hc + k] = exp(m[j * hc + k] - mx)

    return gates, numerators


def exact_token(hc: int, iters: int, eps: float, shared_rcp: bool, loop_unroll: int = 1) -> Any:
    """The published kernel's float32 arithmetic, operation for operation (see exact.py's docstring)."""
    import tilelang.language as T

    # the precise expf, sigmoid as 1 / (1 + expf(0 - x)) with an IEEE quotient
    gates, numerators = token_start(T, hc, eps, T.exp, lambda d: 1.0 / d)

    def bsum(vals: list[Any]) -> Any:
        return butterfly_sum(T, vals)

    def normaliser(at: Any) -> Any:
        """A macro dividing each of the hc lines of m by its sum + eps; at(line, i) is the flat
        index of the line's i-th entry (a row: line * hc + i, a column: i * hc + line)."""

        @T.macro
        def normalise(m: Any) -> None:
            for a in T.unroll(hc):
                d = T.ieee_add(bsum([m[at(a, b)] for b in range(hc)]), eps)
                if shared_rcp:
                    # nvcc's fast path of div.rn.f32: MUFU.RCP and 2 FFMA for the refined
                    # reciprocal (once per line), then 3 FFMA per quotient
                    y0 = T.fast_rcp(d)
                    y = T.ieee_fmaf(y0, T.ieee_fmaf(-d, y0, 1.0), y0)
                    for b in T.unroll(hc):
                        q0 = T.ieee_fmaf(m[at(a, b)], y, 0.0)
                        m[at(a, b)] = T.ieee_fmaf(y, T.ieee_fmaf(-d, q0, m[at(a, b)]), q0)
                else:
                    for b in T.unroll(hc):
                        m[at(a, b)] = m[at(a, b)] / d

        return normalise

    normalise_rows = normaliser(lambda j, k: j * hc + k)
    normalise_cols = normaliser(lambda k, j: j * hc + k)

    @T.macro
    def token(x: Any, m: Any, pv: Any, qv: Any, ps: Any, pb: Any) -> None:
        gates(x, m, pv, qv, ps, pb)
        # softmax over each row, then eps
        for j in T.unroll(hc):
            numerators(m, j)
            rs = bsum([m[j * hc + k] for k in range(hc)])
            # rs is in [1, hc] (the row's largest e is exp(0) = 1), so one refined
            # reciprocal serves the row unless an e is small enough for the remainder to
            # underflow; then (rarely) the row takes nvcc's division
            lo = functools.reduce(T.min, [m[j * hc + k] for k in range(hc)])
            if lo >= SAFE_DIVIDEND:
                y0 = T.fast_rcp(rs)
                y = T.ieee_fmaf(y0, T.ieee_fmaf(-rs, y0, 1.0), y0)
                for k in T.unroll(hc):
                    q0 = T.ieee_fmaf(m[j * hc + k], y, 0.0)
                    m[j * hc + k] = T.ieee_add(T.ieee_fmaf(y, T.ieee_fmaf(-rs, q0, m[j * hc + k]), q0), eps)
            else:
                for k in T.unroll(hc):
                    m[j * hc + k] = m[j * hc + k] / rs + eps
        normalise_cols(m)
        if iters > 1:
            for _ in sinkhorn_loop(T, iters - 1, loop_unroll):
                normalise_rows(m)
                normalise_cols(m)

    return token


def fast_token(hc: int, iters: int, eps: float, loop_unroll: int = 1) -> Any:
    """Approximate exp and reciprocal, Sinkhorn on the scalings: comb = diag(r) A diag(c).

    With R = 1/r and C = 1/c a row step is R_j <- sum_k A_jk c_k + eps R_j and a
    column step C_k <- sum_j r_j A_jk + eps C_k: the same recurrence as dividing
    the matrix by its sums + eps, with hc reciprocals a half-step and the matrix
    formed once at the end.
    """
    import tilelang.language as T

    # MUFU ex2 and rcp (subnormals flushed)
    gates, numerators = token_start(T, hc, eps, T.__exp, T.fast_rcp)

    @T.macro
    def token(x: Any, m: Any, pv: Any, qv: Any, ps: Any, pb: Any) -> None:
        r = T.alloc_local((hc,), "float32")
        c = T.alloc_local((hc,), "float32")
        big_r = T.alloc_local((hc,), "float32")
        big_c = T.alloc_local((hc,), "float32")
        gates(x, m, pv, qv, ps, pb)
        for j in T.unroll(hc):
            numerators(m, j)
            inv = T.fast_rcp(tree_sum([m[j * hc + k] for k in range(hc)]))
            for k in T.unroll(hc):
                m[j * hc + k] = T.ieee_fmaf(m[j * hc + k], inv, eps)
        # the first column step, with r = 1
        for k in T.unroll(hc):
            big_c[k] = tree_sum([m[j * hc + k] for j in range(hc)]) + eps
            c[k] = T.fast_rcp(big_c[k])
        for j in T.unroll(hc):
            big_r[j] = 1.0
            r[j] = 1.0
        if iters > 1:
            for _ in sinkhorn_loop(T, iters - 1, loop_unroll):
                for j in T.unroll(hc):
                    big_r[j] = T.ieee_fmaf(big_r[j], eps, dot(T, [m[j * hc + k] for k in range(hc)],
                                                              [c[k] for k in range(hc)]))
                    r[j] = T.fast_rcp(big_r[j])
                for k in T.unroll(hc):
                    big_c[k] = T.ieee_fmaf(big_c[k], eps, dot(T, [m[j * hc + k] for j in range(hc)],
                                                              [r[j] for j in range(hc)]))
                    c[k] = T.fast_rcp(big_c[k])
        for j in T.unroll(hc):
            for k in T.unroll(hc):
                m[j * hc + k] = (m[j * hc + k] * c[k]) * r[j]

    return token
