"""`hc diff --values all`: every selected tensor both sides hold, compared bytes first.

A tensor's stored bytes are read a chunk at a time into buffers reused all along
(values.TensorStream) and compared as bytes. Only a chunk whose bytes differ, or whose sides store
other types, is decoded, to float64, for the figures (max abs, max rel, elements beyond the
tolerance): equal bytes of one type decode to the same values, so such a chunk is 0 apart with
the same bits, exactly what decoding it would have found. Two threads compare pieces of the
tensors: a read releases the GIL, so one thread's reads overlap the other's compares.

Relative difference is |b - a| / max(|a|, |b|) per element (0 where both are 0);
an element is within tolerance when |b - a| <= atol + rtol * |a| (A is the
reference). NaN equals NaN at the same place. "equal" (bit-identical) means the
same bits: +0.0 against -0.0 is within any tolerance, not equal. Nothing here prints.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from hccli.checkpoint.values import TensorStream
from hccli.checkpoint.view import HcView, OtherTensor, component_of
from hccli.diffing.select import Advance, no_advance
from hccli.ops.compare import gaps, same_bits

DIFFERS, WITHIN, EQUAL = "differs", "within", "equal"

# A tensor's figures are formed over windows of this many values from its start, as the
# streaming comparison has always formed them: a window's largest difference is NaN where it holds
# a value NaN on one side only (np.max), and the tensor's is the largest of its windows' that is a
# number (its status says "differs" all the same: such a value is beyond any tolerance).
WINDOW_VALUES = 1 << 22
# values decoded at a time where bytes differ, a side (float64: 8 MB arrays, a few live a thread)
CHUNK_ELEMENTS = 1 << 20
# stored bytes of the wider side one piece of work holds (whole windows; one window at least)
PIECE_BYTES = 16 << 20
VALUE_THREADS = 2  # benchmarks/NOTES.md (issue 37): a second thread pays on 2 cores; reads release the GIL


@dataclass(frozen=True)
class ValueRow:
    name: str
    component: str
    status: str  # "equal" | "within" | "differs" | "not compared: ..."
    max_abs: float | None
    max_rel: float | None


def compare_arrays(a: np.ndarray, b: np.ndarray, atol: float, rtol: float) -> tuple[float, float, int, bool, float]:
    """(max abs, max rel, elements beyond tolerance, bit-identical values, max abs / max |a|)."""
    if same_bits(a, b):  # the common case, without float64 copies
        return 0.0, 0.0, 0, True, 0.0
    c = gaps(a, b)
    a64, diff = c.a, c.gap
    with np.errstate(all="ignore"):
        denom = np.maximum(np.abs(a64), np.abs(c.b))
        rel = np.where(diff == 0, 0.0, diff / np.where(denom == 0, 1.0, denom))
        bad = (diff != 0) & ~(diff <= atol + rtol * np.abs(a64))  # a nan difference is beyond any tolerance
    identical = False  # the bits differ (same_bits above); numerically equal values are "within", 0 apart
    mx = float(np.max(diff)) if diff.size else 0.0
    mr = float(np.max(rel)) if rel.size else 0.0
    top = float(np.max(np.abs(a64))) if a64.size else 0.0
    scaled = 0.0 if mx == 0 else (mx / top if top > 0 and np.isfinite(top) else float("inf"))
    return mx, mr, int(bad.sum()), identical, scaled


@dataclass(frozen=True)
class _Piece:
    """Windows of one tensor pair, values start .. stop: one thread's work."""

    row: int  # the tensor's place among the rows
    a: TensorStream
    b: TensorStream
    start: int
    stop: int
    window: int  # WINDOW_VALUES in whole units of both sides
    nbytes: int  # both sides' stored bytes: what the progress counts


def _common_unit(a: TensorStream, b: TensorStream) -> tuple[int, int]:
    """(values of the least run that is whole units of both sides, the wider side's bytes of it)."""
    unit = math.lcm(a.unit_values, b.unit_values)
    return unit, max(a.nbytes(unit), b.nbytes(unit))


def _nan_max(x: float, y: float) -> float:
    """The larger, NaN where either is (as np.max over a window is)."""
    return x if x != x else y if y != y or y > x else x


Figures = tuple[float, float, int, bool]  # max abs, max rel, elements beyond the tolerance, the same bits


def _compare_piece(p: _Piece, atol: float, rtol: float) -> list[Figures]:
    """The figures of each window of one piece."""
    out = []
    a, b = p.a, p.b
    with a.open() as ra, b.open() as rb:
        unit, wide = _common_unit(a, b)
        step = unit * max(1, min(ra.chunk_bytes, rb.chunk_bytes) // wide)  # the sources' read size
        part = unit * max(1, CHUNK_ELEMENTS // unit)  # the values decoded at a time where bytes differ
        one_type = a.dtype == b.dtype  # then both sides' chunks are of one length
        for start in range(p.start, p.stop, p.window):
            stop = min(start + p.window, p.stop)
            mx = mr = 0.0
            beyond, same = 0, True
            for xa, xb in zip(a.chunks(ra, step, start, stop), b.chunks(rb, step, start, stop)):
                # xa is a view of the start of its bytearray (TensorStream.chunks): bytearray.startswith
                # is one memcmp, where memoryview == memoryview compares byte by byte in Python
                if one_type:
                    if xa.obj.startswith(xb):
                        continue
                    same = False  # stored bits differ: never "equal", even where the values decode alike
                n = len(xa) // a.unit_bytes * a.unit_values
                for i in range(0, n, part):
                    j = min(i + part, n)
                    m, r, bad, eq, _ = compare_arrays(a.decode(xa[a.nbytes(i):a.nbytes(j)]),
                                                      b.decode(xb[b.nbytes(i):b.nbytes(j)]), atol, rtol)
                    mx, mr, beyond, same = _nan_max(mx, m), _nan_max(mr, r), beyond + bad, same and eq
            out.append((mx, mr, beyond, same))
    return out


class _TensorFigures:
    """One tensor's figures, its windows folded in as they come."""

    __slots__ = ("name", "component", "max_abs", "max_rel", "beyond", "same", "pieces")

    def __init__(self, name: str, component: str, pieces: int):
        self.name, self.component, self.pieces = name, component, pieces
        self.max_abs = self.max_rel = 0.0
        self.beyond, self.same = 0, True

    def add(self, windows: list[Figures]) -> None:
        for m, r, bad, eq in windows:
            # max() keeps the first of a pair that is not smaller: a window's NaN is passed over
            self.max_abs, self.max_rel = max(self.max_abs, m), max(self.max_rel, r)
            self.beyond, self.same = self.beyond + bad, self.same and eq
        self.pieces -= 1

    def row(self) -> ValueRow:
        status = EQUAL if self.same else (WITHIN if self.beyond == 0 else DIFFERS)
        return ValueRow(self.name, self.component, status, self.max_abs, self.max_rel)


def compare_values(a: HcView, b: HcView, pairs: list[tuple[OtherTensor, OtherTensor]], *, atol: float, rtol: float,
                   advance: Advance = no_advance) -> tuple[ValueRow, ...]:
    """Each pair of non-HC tensors of A and B (select.shared_others), in pieces over VALUE_THREADS
    threads (bounded memory: a few pieces in flight, each read a chunk at a time)."""
    rows: list[ValueRow | None] = []
    tallies: dict[int, _TensorFigures] = {}

    def pieces() -> Iterator[_Piece]:
        for ta, tb in pairs:
            comp, i = component_of(ta.name), len(rows)
            rows.append(None)
            if ta.shape != tb.shape or math.prod(ta.shape) != math.prod(tb.shape):
                rows[i] = ValueRow(ta.name, comp, f"not compared: shape {list(ta.shape)} vs {list(tb.shape)}",
                                   None, None)
                advance(ta.nbytes + tb.nbytes, ta.name)
                continue
            sa, sb = a.value_stream(ta.stored_name), b.value_stream(tb.stored_name)
            if sa is None or sb is None:
                what = ta.dtype if sa is None else tb.dtype
                rows[i] = ValueRow(ta.name, comp, f"not compared: {what} values are not decoded here", None, None)
                advance(ta.nbytes + tb.nbytes, ta.name)
                continue
            unit, wide = _common_unit(sa, sb)
            window = max(unit, WINDOW_VALUES // unit * unit)
            size = window * max(1, PIECE_BYTES // (window // unit * wide))
            starts = range(0, sa.elements, size)
            tallies[i] = _TensorFigures(ta.name, comp, len(starts))
            if not starts:  # no values: nothing apart
                rows[i] = tallies[i].row()
                advance(ta.nbytes + tb.nbytes, ta.name)
            for start in starts:
                stop = min(start + size, sa.elements)
                yield _Piece(i, sa, sb, start, stop, window, sa.nbytes(stop - start) + sb.nbytes(stop - start))

    def finish(p: _Piece, windows: list[Figures]) -> None:
        t = tallies[p.row]
        t.add(windows)
        advance(p.nbytes, t.name)
        if not t.pieces:
            rows[p.row] = t.row()

    # Each thread takes the next piece itself: no thread hands pieces out, so none waits on one
    # that does. The lock keeps the pieces, the tallies and the progress in one order.
    work, lock, stop, failed = pieces(), threading.Lock(), threading.Event(), []

    def worker() -> None:
        try:
            while not stop.is_set():
                with lock:
                    p = next(work, None)
                if p is None:
                    return
                windows = _compare_piece(p, atol, rtol)
                with lock:
                    finish(p, windows)
        except BaseException as exc:  # an unreadable file, a decoding error: said once, by the caller
            failed.append(exc)
            stop.set()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(VALUE_THREADS)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    finally:
        stop.set()  # a stop (Ctrl-C, SIGTERM): the pieces begun end, no other begins
        for t in threads:
            t.join()
    if failed:
        raise failed[0]
    return tuple(r for r in rows if r is not None)
