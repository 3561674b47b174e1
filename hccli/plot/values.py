"""Numbers for a figure from JSON-shaped data, validated: such data may come from a
file, and `hc --json` writes non-finite floats as the strings "nan", "inf", "-inf"."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hccli.base.errors import HcError

MAX_STREAMS = 64  # hc beyond this is no model of this family; it bounds what a figure allocates
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def as_float(x: Any, where: str) -> float:
    if isinstance(x, bool):
        raise HcError(f"{where}: expected a number, got {x!r}")
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str) and x in _NONFINITE:
        return _NONFINITE[x]
    raise HcError(f"{where}: expected a number, got {type(x).__name__}")


def as_vector(x: Any, where: str, size: int | None = None) -> np.ndarray:
    if not isinstance(x, (list, tuple)) or not 1 <= len(x) <= MAX_STREAMS:
        raise HcError(f"{where}: expected a list of 1..{MAX_STREAMS} numbers")
    if size is not None and len(x) != size:
        raise HcError(f"{where}: expected {size} numbers, got {len(x)}")
    return np.array([as_float(v, where) for v in x], dtype=np.float64)


def as_matrix(x: Any, where: str, size: int) -> np.ndarray:
    if not isinstance(x, (list, tuple)) or len(x) != size:
        raise HcError(f"{where}: expected a {size} x {size} matrix")
    return np.stack([as_vector(row, where, size) for row in x])
