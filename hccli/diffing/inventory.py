"""`hc diff`'s inventory: every tensor of both sides by canonical name, summed per component
(the component table), and the HC tensors counted by the same components, so that a summary
line and the table count one way. Nothing here prints.

A DSpark/MTP stage's HC tensors (`mtp.N.hc_*`) sit under the `dspark` component with the rest
of the stage, as in `hc count-params`; the `hyper_connections` row holds the backbone's and the
head mix's. `changed` counts the tensors both sides hold whose dtype or shape differ, or whose
values were compared and differ: the HC tensors' values are always compared, the others' only
with `--values all`; the two causes are also counted apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import chain, compress, filterfalse
from operator import itemgetter, ne, or_
from typing import Collection

from hccli.checkpoint.view import HcView, OtherTensor, component_of
from hccli.model.inventory_types import COMPONENTS


@dataclass(frozen=True)
class Changed:
    name: str
    component: str
    dtype_a: str
    dtype_b: str
    shape_a: tuple[int, ...]
    shape_b: tuple[int, ...]


@dataclass(frozen=True)
class DiffComponentRow:
    component: str
    tensors_a: int
    tensors_b: int
    only_in_a: int
    only_in_b: int
    changed: int  # in both, with another dtype or shape, or values compared that differ (a tensor counts once)
    bytes_a: int
    bytes_b: int
    params_a: int
    params_b: int
    dtype_or_shape_changed: int = 0  # in both, with another dtype or shape
    values_differ: int = 0  # in both, values compared and beyond the tolerance


def _inventory(v: HcView) -> dict[str, OtherTensor]:
    """canonical name -> its record, HC tensors included."""
    out = {t.canonical: OtherTensor(t.canonical, t.stored_name, t.dtype, t.shape, t.nbytes, math.prod(t.shape))
           for t in v.hc.values()}
    out.update(v.others)
    return out


_DTYPE, _SHAPE, _NBYTES, _PARAMS = map(itemgetter, range(2, 6))  # OtherTensor's fields, by place


def compare_inventory(a: HcView, b: HcView, differ: Collection[str] = ()):
    """Names only in A or B, dtype or shape changes, and per component the tensors changed:
    another dtype or shape, or values that were compared and differ (`differ`). ~100k names a side:
    C-level passes over them, a component worked out once a name (both sides' in one pass)."""
    ia, ib = _inventory(a), _inventory(b)
    only_a = tuple(filterfalse(ib.__contains__, ia))
    only_b = tuple(filterfalse(ia.__contains__, ib))
    comp = dict(zip(chain(ia, only_b), map(component_of, chain(ia, only_b))))
    shared = list(filter(ib.__contains__, ia)) if only_a else list(ia)
    xa, xb = list(map(ia.__getitem__, shared)), list(map(ib.__getitem__, shared))
    moved = compress(shared, map(or_, map(ne, map(_DTYPE, xa), map(_DTYPE, xb)),
                                 map(ne, map(_SHAPE, xa), map(_SHAPE, xb))))
    changed = tuple(Changed(n, comp[n], ia[n].dtype, ib[n].dtype, ia[n].shape, ib[n].shape) for n in moved)
    acc: dict[str, _InventoryTally] = {}
    for side, inv, only in ((0, ia, only_a), (1, ib, only_b)):
        # a component's names come in runs (a layer's experts, its attention): summed a run at a time
        comps = list(map(comp.__getitem__, inv))
        k = len(comps)
        cuts = [0, *compress(range(1, k), map(ne, comps[1:], comps[:-1])), k] if k else []
        records = inv.values()
        nbytes, params = list(map(_NBYTES, records)), list(map(_PARAMS, records))
        for x, y in zip(cuts, cuts[1:]):
            t = acc.get(comps[x]) or acc.setdefault(comps[x], _InventoryTally())
            t.tensors[side] += y - x
            t.bytes[side] += sum(nbytes[x:y])
            t.params[side] += sum(params[x:y])
        for c in map(comp.__getitem__, only):
            acc[c].only_in[side] += 1
    reshaped = {ch.name for ch in changed}
    differing = {n for n in differ if n in ia and n in ib}
    for n in reshaped | differing:
        acc[comp[n]].changed += 1
    for n in reshaped:
        acc[comp[n]].dtype_or_shape += 1
    for n in differing:
        acc[comp[n]].values_differ += 1
    order = {c: i for i, c in enumerate((*COMPONENTS, "other"))}
    comps = tuple(t.row(c) for c, t in sorted(acc.items(), key=lambda kv: order[kv[0]]))
    return only_a, only_b, changed, comps


def _pair() -> list[int]:
    return [0, 0]


@dataclass(slots=True)
class _InventoryTally:
    """One component's DiffComponentRow as compare_inventory gathers it: [A, B] where each side has its own."""

    tensors: list[int] = field(default_factory=_pair)
    only_in: list[int] = field(default_factory=_pair)
    changed: int = 0
    bytes: list[int] = field(default_factory=_pair)
    params: list[int] = field(default_factory=_pair)
    dtype_or_shape: int = 0
    values_differ: int = 0

    def row(self, component: str) -> DiffComponentRow:
        return DiffComponentRow(component, *self.tensors, *self.only_in, self.changed, *self.bytes, *self.params,
                                self.dtype_or_shape, self.values_differ)


@dataclass(frozen=True)
class HcCounts:
    """The HC tensors of a diff counted once, in the components of the inventory table:
    `by_component` sums to `compared` (a stage's HC tensors under `dspark`)."""

    compared: int  # held by a side whose dialect can hold them: those of the other kind are not compared
    bit_identical: int
    within_tolerance: int  # not bit-identical, within --atol/--rtol
    not_kept: int  # missing, misshapen or beyond the tolerance (exit 1)
    not_in_dialect: int  # stage tensors a side's dialect cannot hold: not compared, not counted as differences
    by_component: dict[str, int]  # component -> HC tensors compared under it


def hc_counts(rows, equal: str, within: str, not_in_dialect: str) -> HcCounts:
    """rows: the DiffSiteRows; the statuses as diff names them."""
    compared = [r for r in rows if r.status != not_in_dialect]
    by: dict[str, int] = {}
    for r in compared:
        c = component_of(r.name)
        by[c] = by.get(c, 0) + 1
    order = {c: i for i, c in enumerate((*COMPONENTS, "other"))}
    return HcCounts(len(compared), sum(r.status == equal for r in compared), sum(r.status == within for r in compared),
                    sum(not r.ok for r in compared), len(rows) - len(compared),
                    dict(sorted(by.items(), key=lambda kv: order.get(kv[0], len(order)))))
