"""The split-Sinkhorn op at zero mixes in plain Python, float32 to the operation, for `hc inspect`.

`hc inspect --json` needs the comb matrix of some 90 sites and nothing else from numpy, whose
import alone costs as much as reading every header of a full checkpoint (issue #14). This module
computes the same op as sinkhorn_np.py (same order of operations: affine step, row softmax + eps,
one column normalisation, then iters-1 rounds of row and column normalisation, each dividing by
the sum + eps; sums in the kernel's halving tree) with every result rounded to float32 as numpy
rounds it: each +, -, *, / is done in double precision on float32 operands and rounded once,
which gives exactly the float32 result (a double holds more than twice float32's precision).
exp is the one difference: here the double-precision exp rounded to float32, i.e. correctly
rounded but for rare ties; numpy's float32 exp depends on the CPU's SIMD path and may differ by
one unit in the last place. The sites are processed together, one list per operation, so the
interpreter's cost per element stays small.

Only stream counts that are powers of two have a pure halving tree; for any other count
`supports(hc)` is False and the caller uses sinkhorn_np.py.
"""

from __future__ import annotations

import math
from array import array

_INF = math.inf
_NAN = math.nan
_EXP_MAX = 709.0  # math.exp overflows past ~709.78; float32 is inf long before (~88.72)


def _f32(values: list[float]) -> list[float]:
    """Round to float32 (C's conversion: to nearest, overflow to +-inf, NaN kept)."""
    return array("f", values).tolist()


def _exp(x: float) -> float:
    return _INF if x > _EXP_MAX else math.exp(x)  # NaN > x is False: exp(NaN) is NaN


def _quotient(a: float, b: float) -> float:
    """a / b as IEEE float division (Python raises for b == 0)."""
    if b:
        return a / b
    if a != a or a == 0:
        return _NAN
    return math.copysign(_INF, a) * math.copysign(1.0, b)


def _divide(values: list[float], dens: list[float], which: list[int]) -> list[float]:
    try:
        return _f32([v / dens[i] for v, i in zip(values, which)])
    except ZeroDivisionError:  # only with eps rounding to 0 and a column of zeros
        return _f32([_quotient(v, dens[i]) for v, i in zip(values, which)])


def supports(hc: int) -> bool:
    return hc >= 1 and hc & (hc - 1) == 0


def _halving_plan(groups: list[list[int]]) -> list[list[tuple[int, int]]]:
    """The pairs each stage of the kernel's reduction adds: halves first, then halves of those
    (for 4: (x0+x2)+(x1+x3)); every group has the same power-of-two length."""
    stages = []
    while groups and len(groups[0]) > 1:
        half = len(groups[0]) // 2
        pairs, nxt = [], []
        for g in groups:
            start = len(pairs)
            pairs += [(g[i], g[i + half]) for i in range(half)]
            nxt.append(list(range(start, start + half)))
        stages.append(pairs)
        groups = nxt
    return stages


def _sums(values: list[float], first: list[int], stages: list[list[tuple[int, int]]]) -> list[float]:
    out = values
    for pairs in stages:
        out = _f32([out[i] + out[j] for i, j in pairs])
    return out if stages else [values[i] for i in first]


def _sigmoid(x: list[float]) -> list[float]:
    """1 / (1 + exp(-x)) in float32 steps."""
    t = _f32([_exp(-v) for v in x])
    t = _f32([1.0 + v for v in t])
    return _f32([1.0 / v for v in t])  # v >= 1, inf or NaN: never 0


def _affine(bases: list[list[float]], scales: list[list[float]], lo: int, hi: int, k: int) -> list[float]:
    """mixes * scale[k] + base[lo:hi] with mixes = 0: 0 * scale is 0, or NaN for an inf/NaN scale."""
    return _f32([0.0 * s[k] + v for b, s in zip(bases, scales) for v in b[lo:hi]])


def split_sinkhorn_zero(bases: list[list[float]], scales: list[list[float]], hc: int, iters: int,
                        eps: float) -> tuple[list[list[float]], list[list[float]], list[list[list[float]]]]:
    """pre [K][hc], post [K][hc] and comb [K][hc][hc] of K sites at zero mixes; bases [K][(2+hc)*hc]
    and scales [K][3] hold float32 values. `hc` must be a power of two (see `supports`)."""
    if not supports(hc):
        raise ValueError(f"hc = {hc}: the plain-Python op takes a power of two")
    e = _f32([eps])[0]
    pre = _f32([v + e for v in _sigmoid(_affine(bases, scales, 0, hc, 0))])
    post = [2.0 * v for v in _sigmoid(_affine(bases, scales, hc, 2 * hc, 1))]  # doubling is exact
    x = _affine(bases, scales, 2 * hc, (2 + hc) * hc, 2)
    n, k = hc * hc, len(bases)
    rows = [list(range(r * hc, (r + 1) * hc)) for r in range(k * hc)]
    cols = [[s * n + r * hc + c for r in range(hc)] for s in range(k) for c in range(hc)]
    row_of = [i // hc for i in range(k * n)]
    col_of = [(i // n) * hc + i % hc for i in range(k * n)]
    row_plan, col_plan = _halving_plan(rows), _halving_plan(cols)
    first_row, first_col = [g[0] for g in rows], [g[0] for g in cols]
    # row softmax: exp(x - row max), the max NaN when the row holds one (as numpy's max is)
    highs = []
    for g in rows:
        vals = [x[i] for i in g]
        highs.append(_NAN if any(v != v for v in vals) else max(vals))
    comb = _f32([_exp(v) for v in _f32([v - highs[r] for v, r in zip(x, row_of)])])
    comb = _divide(comb, _sums(comb, first_row, row_plan), row_of)
    comb = _f32([v + e for v in comb])
    comb = _divide(comb, _f32([v + e for v in _sums(comb, first_col, col_plan)]), col_of)
    for _ in range(iters - 1):
        comb = _divide(comb, _f32([v + e for v in _sums(comb, first_row, row_plan)]), row_of)
        comb = _divide(comb, _f32([v + e for v in _sums(comb, first_col, col_plan)]), col_of)
    per_site = [comb[s * n:(s + 1) * n] for s in range(k)]
    return ([pre[s * hc:(s + 1) * hc] for s in range(k)], [post[s * hc:(s + 1) * hc] for s in range(k)],
            [[m[r * hc:(r + 1) * hc] for r in range(hc)] for m in per_site])


def head_pre_zero(bases: list[list[float]], scales: list[list[float]], eps: float) -> list[list[float]]:
    """The V4 head mix at zero mixes: sigmoid(0 * scale + base) + eps, no Sinkhorn; bases [K][hc]."""
    e = _f32([eps])[0]
    width = len(bases[0]) if bases else 0
    pre = _f32([v + e for v in _sigmoid(_affine(bases, scales, 0, width, 0))])
    return [pre[s * width:(s + 1) * width] for s in range(len(bases))]
