"""The split-Sinkhorn op at zero mixes in plain Python, float32 to the operation, for `hc inspect`.

`hc inspect --json` needs the comb matrix of some 90 sites and nothing else from numpy, whose
import alone costs as much as reading every header of a full checkpoint. This module
computes the same op as ops/split_np.py (same order of operations: affine step, row softmax + eps,
one column normalisation, then iters-1 rounds of row and column normalisation, each dividing by
the sum + eps; sums in the kernel's halving tree) with every result rounded to float32 as numpy
rounds it: each +, -, *, / is done in double precision on float32 operands and rounded once,
which gives exactly the float32 result (a double holds more than twice float32's precision).
exp is the one difference: here the double-precision exp rounded to float32, i.e. correctly
rounded but for rare ties; numpy's float32 exp depends on the CPU's SIMD path and may differ by
one unit in the last place. The sites are processed together, one list per operation, so the
interpreter's cost per element stays small.

Only stream counts that are powers of two have a pure halving tree; for any other count
`supports(hc)` is False and the caller uses ops/split_np.py.
"""

from __future__ import annotations

import math
import struct
from array import array
from itertools import chain, repeat
from operator import add, sub, truediv

_INF = math.inf
_NAN = math.nan
_EXP_MAX = 709.0  # math.exp overflows past ~709.78; float32 is inf long before (~88.72)


def _f32(values) -> list[float]:
    """Round to float32 (to nearest; overflow to +-inf; NaN kept)."""
    values = values if isinstance(values, list) else list(values)
    packer = _PACKERS.get(len(values))
    if packer is None:
        packer = _PACKERS[len(values)] = struct.Struct(f"<{len(values)}f")
    try:  # struct's round trip is the quicker one, but refuses a finite value past float32's range
        return list(packer.unpack(packer.pack(*values)))
    except OverflowError:
        return array("f", values).tolist()


_PACKERS: dict[int, struct.Struct] = {}


def _exp(x: float) -> float:
    return _INF if x > _EXP_MAX else math.exp(x)  # NaN > x is False: exp(NaN) is NaN


def _quotient(a: float, b: float) -> float:
    """a / b as IEEE float division (Python raises for b == 0)."""
    if b:
        return a / b
    if a != a or a == 0:
        return _NAN
    return math.copysign(_INF, a) * math.copysign(1.0, b)


def _divide(values: list[float], dens: list[float]) -> list[float]:
    try:
        return _f32(map(truediv, values, dens))
    except ZeroDivisionError:  # only with eps rounding to 0 and a column of zeros
        return _f32(map(_quotient, values, dens))


def supports(hc: int) -> bool:
    return hc >= 1 and hc & (hc - 1) == 0


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
    x = _affine(bases, scales, 2 * hc, (2 + hc) * hc, 2)  # site-major: [site][row][col]
    n, k = hc * hc, len(bases)
    # Kept row-major across sites, [row][site][col]: a row's values are `hc` apart from the next
    # column's, and row r of every site is one block, so both reductions are slices and C-level
    # maps over all sites at once, never a loop per site or per value.
    to_rows = [s * n + r * hc + c for r in range(hc) for s in range(k) for c in range(hc)]
    x = [x[i] for i in to_rows]
    # row softmax: exp(x - row max), the max NaN when the row holds one (as numpy's max is)
    highs = []
    for r in range(0, len(x), hc):
        vals = x[r:r + hc]
        highs.append(_NAN if any(v != v for v in vals) else max(vals))
    comb = _f32(map(_exp, _f32(map(sub, x, _each_row(highs, hc)))))
    comb = _divide(comb, _each_row(_row_sums(comb, hc), hc))
    comb = _f32([v + e for v in comb])
    comb = _divide(comb, _col_sums(comb, hc, e))
    for _ in range(iters - 1):
        comb = _divide(comb, _each_row(_f32([v + e for v in _row_sums(comb, hc)]), hc))
        comb = _divide(comb, _col_sums(comb, hc, e))
    block = k * hc  # one row of every site
    per_site = [[comb[r * block + s * hc:r * block + (s + 1) * hc] for r in range(hc)] for s in range(k)]
    return [pre[s * hc:(s + 1) * hc] for s in range(k)], [post[s * hc:(s + 1) * hc] for s in range(k)], per_site


def _each_row(values: list[float], hc: int) -> list[float]:
    """One value per row, repeated for each of the row's `hc` entries."""
    return list(chain.from_iterable(map(repeat, values, repeat(hc))))


def _row_sums(comb: list[float], hc: int) -> list[float]:
    """Each row's sum in the kernel's halving tree ((x0+x2)+(x1+x3) for 4): column c of every
    row is comb[c::hc]; halves are added first."""
    parts = [comb[c::hc] for c in range(hc)]
    while len(parts) > 1:
        half = len(parts) // 2
        parts = [_f32(map(add, parts[c], parts[c + half])) for c in range(half)]
    return parts[0]


def _col_sums(comb: list[float], hc: int, e: float) -> list[float]:
    """Each column's sum + eps in the halving tree over rows (rows r and r + hc/2 first), as the
    divisor of every entry: row r of every site is one block of the [row][site][col] layout."""
    block = len(comb) // hc
    parts = [comb[r * block:(r + 1) * block] for r in range(hc)]
    while len(parts) > 1:
        half = len(parts) // 2
        parts = [_f32(map(add, parts[r], parts[r + half])) for r in range(half)]
    return _f32([v + e for v in parts[0]]) * hc


def head_pre_zero(bases: list[list[float]], scales: list[list[float]], eps: float) -> list[list[float]]:
    """The V4 head mix at zero mixes: sigmoid(0 * scale + base) + eps, no Sinkhorn; bases [K][hc]."""
    e = _f32([eps])[0]
    width = len(bases[0]) if bases else 0
    pre = _f32([v + e for v in _sigmoid(_affine(bases, scales, 0, width, 0))])
    return [pre[s * width:(s + 1) * width] for s in range(len(bases))]
