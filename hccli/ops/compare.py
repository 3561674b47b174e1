"""Two arrays of one size compared element by element: the one comparison `hc diff`, the golden
files of run-kernel and run-site and check-port share. Each caller judges the gaps by its own
tolerance (diff's atol + rtol, a golden's atol, a port's envelope); what a difference is, is said here.

NaN at the same place on both sides is no difference; NaN on one side only is one that no tolerance
covers (`lone_nan`). Equal values are 0 apart, equal infinities too (inf - inf is NaN, not 0). Gaps
are float64 |b - a| of the values as given. "The same bits" is stricter than 0 apart: +0.0 and
-0.0 are equal numbers with other bits.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Iterable

import numpy as np

# A comparison's one word (hc diff, run-site --compare, run-kernel --compare: the JSON envelope's
# verdict): every value the same bits or 0 apart, some apart within the tolerance, some beyond it.
COMPARE_VERDICTS = ("identical", "within_tolerance", "differs")


def compare_verdict(beyond: int, apart: int) -> str:
    """beyond: values (or tensors) past the tolerance (exit 1); apart: those that differ within it."""
    return "differs" if beyond else "within_tolerance" if apart else "identical"


class Compared:
    """ok, exit_code and the envelope's verdict of a comparison of many parts (tensors, steps),
    from its parts' `beyond_atol` and `differing` counts: `parts()` says which they are."""

    VERDICTS: ClassVar[tuple[str, ...]] = COMPARE_VERDICTS

    def parts(self) -> Iterable[Any]:
        raise NotImplementedError

    @property
    def ok(self) -> bool:
        return all(d.beyond_atol == 0 for d in self.parts())

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    @property
    def verdict(self) -> str:
        parts = list(self.parts())
        return compare_verdict(sum(d.beyond_atol for d in parts), sum(d.differing for d in parts))


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit for bit the same values (+0.0 and -0.0 are equal numbers, not the same value; two types: as float64)."""
    a, b = (a, b) if a.dtype == b.dtype else (a.astype(np.float64), b.astype(np.float64))
    bits = np.dtype(f"u{a.dtype.itemsize}")
    return a.shape == b.shape and np.array_equal(a.view(bits), b.view(bits))


@dataclass(frozen=True)
class Gaps:
    """The comparison of `a` and `b`, flat, in their order. Full-size arrays, so that a caller
    judging every element needs no masked copies."""

    a: np.ndarray  # float64
    b: np.ndarray
    gap: np.ndarray  # |b - a|: 0 where equal or NaN on both sides, NaN where NaN on one side only
    lone_nan: np.ndarray  # NaN on exactly one side
    both_nan: np.ndarray
    _given: tuple[np.ndarray, np.ndarray]

    @property
    def keep(self) -> np.ndarray:
        """Elements NaN on neither side."""
        return ~(self.lone_nan | self.both_nan)

    def max_kept(self) -> float:
        """The largest gap over elements NaN on neither side (0.0 where there is none)."""
        d = self.gap[self.keep]
        return float(d.max()) if d.size else 0.0

    @cached_property
    def differing(self) -> int:
        """Elements whose float32 bits differ, NaN on both sides counting as equal: what a float32
        output file and the values re-run from its inputs are held to."""
        x, y = (np.asarray(v).astype(np.float32).reshape(-1).view(np.int32) for v in self._given)
        return int(((x != y) & ~self.both_nan).sum())


def gaps(a: np.ndarray, b: np.ndarray) -> Gaps:
    """a and b element by element (as float64: no type holds a difference of float32 values more
    exactly). They hold as many elements; their shapes are the caller's to have checked."""
    a64, b64 = np.asarray(a).astype(np.float64).reshape(-1), np.asarray(b).astype(np.float64).reshape(-1)
    an, bn = np.isnan(a64), np.isnan(b64)
    both = an & bn
    with np.errstate(all="ignore"):
        gap = np.where(both | (a64 == b64), 0.0, np.abs(b64 - a64))  # inf == inf: 0, not nan
    return Gaps(a64, b64, gap, an ^ bn, both, (a, b))
