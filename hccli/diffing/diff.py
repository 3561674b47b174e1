"""`hc diff` core: did a conversion keep the hyper-connections?

Two views (hccli/checkpoint/view.py) are compared in canonical names. Per HC tensor:
presence (and whether the side's dialect can hold it at all: only the release
layouts carry the DSpark/MTP stages), shape (a transpose named as such), stored
dtype or GGML type, the largest absolute and relative difference, and the effect
downstream: the pre/post weights and comb matrix that the base alone gives
(mixes = 0), and those that seeded sample hidden states give through each side's
whole site (hccli/diffing/effect.py, through hccli/ops/site.py's projection). The rest of the inventory is compared by name,
dtype and shape unless values are asked for (hccli/diffing/values.py: the differences and
the tolerance are defined there, for the HC tensors too). Nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np

from hccli.names import dialects as D
from hccli.base.bounded import one_line
from hccli.model.config.model import ConfigUnusable
from hccli.diffing.effect import Effect, sample_hidden, sample_tokens, site_effects
from hccli.diffing.select import (Advance, DiffRequest, Meter, Selection,
                                  check_selection, hc_bytes, no_advance, numbering, shared_others, site_groups)
from hccli.base.errors import HcError
from hccli.checkpoint.view import HcTensor, HcView, read_both
from hccli.diffing.inventory import Changed, DiffComponentRow, HcCounts, compare_inventory, hc_counts
from hccli.model.layers import no_site_matches
from hccli.model.shape import differences
from hccli.diffing.values import DIFFERS, EQUAL, WITHIN, ValueRow, compare_arrays, compare_values
from hccli.ops.compare import COMPARE_VERDICTS, compare_verdict
from hccli.checkpoint.verify.findings import Finding, SidedFinding, sided
from hccli.base.vocab import HC_PARTS, SITE_ORDER


# Statuses, worst first. A tensor the side's dialect cannot hold is not a defect.
MISSING_A, MISSING_B, TRANSPOSED, SHAPE = "only_in_b", "only_in_a", "transposed", "shape"
NOT_IN_DIALECT = "not_in_dialect"  # DIFFERS, WITHIN, EQUAL: diffing/values.py's, one word for both tables
_RANK = {MISSING_A: 0, MISSING_B: 0, TRANSPOSED: 0, SHAPE: 0, DIFFERS: 1, WITHIN: 2, EQUAL: 3, NOT_IN_DIALECT: 4}
_PART_ORDER = {p: i for i, p in enumerate(HC_PARTS)}


@dataclass(frozen=True)
class DiffSiteRow:
    layer: int
    site: str
    part: str
    name: str  # canonical tensor name
    status: str
    max_abs: float | None
    max_rel: float | None
    beyond: int | None  # elements outside the tolerance
    rel_to_max: float | None  # max abs / A's largest |value|: comparable across tensors; sorts the table
    dtype_a: str | None
    dtype_b: str | None
    shape_a: tuple[int, ...] | None
    shape_b: tuple[int, ...] | None
    stored_a: str | None
    stored_b: str | None
    effect: Effect | None = None

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("ok",)

    @property
    def ok(self) -> bool:
        return self.status in (WITHIN, EQUAL, NOT_IN_DIALECT)


@dataclass(frozen=True)
class DiffReport:
    label_a: str
    label_b: str
    dialect_a: str
    dialect_b: str
    model: dict[str, Any]  # hc_mult, n_layers, dim and where each side's came from
    atol: float
    rtol: float
    sample_tokens: int
    seed: int
    sites: tuple[DiffSiteRow, ...]
    only_in_a: tuple[str, ...]
    only_in_b: tuple[str, ...]
    changed: tuple[Changed, ...]
    components: tuple[DiffComponentRow, ...]
    values: tuple[ValueRow, ...] | None
    bytes_read_a: int
    bytes_read_b: int
    config_note_a: ConfigUnusable | None = None  # a config.json beside A or B, set aside
    config_note_b: ConfigUnusable | None = None
    notes: tuple[str, ...] = ()  # what diff chose for itself (fewer sample tokens), said once
    selection: Selection = Selection(None, None)  # the layers and sites compared (None: all)
    hc_tensors: int = 0  # HC tensor names on either side, selected or not
    shared_others: int = 0  # other tensors both sides hold, selected or not
    findings_a: tuple[Finding, ...] = ()  # what opening found wrong with each side (checkpoint/verify/damage.py)
    findings_b: tuple[Finding, ...] = ()

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("hc_ok", "hc_counts", "not_kept")
    VERDICTS: ClassVar[tuple[str, ...]] = COMPARE_VERDICTS  # the envelope's word, with exit_code

    @property
    def hc_ok(self) -> bool:
        return all(r.ok for r in self.sites)

    @property
    def hc_compared(self) -> int:
        """HC tensors compared: those a side's dialect cannot hold are not."""
        return sum(r.status != NOT_IN_DIALECT for r in self.sites)

    @property
    def hc_counts(self) -> HcCounts:
        """The HC tensors compared, by outcome and by the inventory table's component."""
        return hc_counts(self.sites, EQUAL, WITHIN, NOT_IN_DIALECT)

    @property
    def not_kept(self) -> int:
        """HC tensors not kept and other tensors whose values differ: exit 1 when any."""
        return sum(not r.ok for r in self.sites) + sum(v.status == DIFFERS for v in self.values or ())

    @property
    def exit_code(self) -> int:
        return 1 if self.not_kept else 0

    @property
    def verdict(self) -> str:
        return compare_verdict(self.not_kept, sum(r.status == WITHIN for r in (*self.sites, *(self.values or ()))))

    @property
    def findings(self) -> tuple[SidedFinding, ...]:  # the envelope's: both sides', each saying its side
        return sided(self.findings_a, "a") + sided(self.findings_b, "b")


# --- the model they are ------------------------------------------------------------------

def model_difference(a: HcView, b: HcView) -> str | None:
    """How two views are different models (model_shape.differences: what --verify holds a
    checkpoint to its config by), or None."""
    diffs = differences(a.model, b.model)
    if not diffs:
        return None
    return (f"{a.label} and {b.label} are different models: {', '.join(f'{d.what} {d.a} vs {d.b}' for d in diffs)} "
            f"(A from {a.model.source}, B from {b.model.source})")


# --- comparing values ----------------------------------------------------------------------

def _row(layer: int, hc, ta: HcTensor | None, tb: HcTensor | None, status: str, stats=None) -> DiffSiteRow:
    mx, mr, beyond, scaled = stats if stats else (None, None, None, None)
    return DiffSiteRow(layer, hc.site, hc.part, hc.canonical(), status, mx, mr, beyond, scaled,
                   ta.dtype if ta else None, tb.dtype if tb else None,
                   ta.shape if ta else None, tb.shape if tb else None,
                   ta.stored_name if ta else None, tb.stored_name if tb else None)


def compare_hc(a: HcView, b: HcView, *, atol: float, rtol: float, tokens: int, seed: int,
               advance: Advance = no_advance, selection: Selection = Selection(None, None)) -> list[DiffSiteRow]:
    n_layers, n_stages = numbering(a, b)
    hc_mult, dim = a.model.hc_mult or b.model.hc_mult, a.model.dim or b.model.dim
    hidden = sample_hidden(tokens, seed, hc_mult, dim) if hc_mult and dim and tokens else None
    via = f"{tokens} sample tokens (seed {seed})"
    sites = site_groups(a, b, selection)
    rows: list[DiffSiteRow] = []
    for ((owner, site), names), (ra, rb) in zip(sites.items(), read_both(a, b, sites.values())):
        va: dict[str, np.ndarray] = {}
        vb: dict[str, np.ndarray] = {}
        part_rows: dict[str, DiffSiteRow] = {}
        for hc in sorted(names, key=lambda h: _PART_ORDER[h.part]):
            layer = hc.layer(n_layers, n_stages)
            ta, tb = a.hc.get(hc.canonical()), b.hc.get(hc.canonical())
            if ta is None or tb is None:
                side = b if ta is not None else a
                absent = D.spell_hc(hc, side.dialect.dialect) is None
                status = NOT_IN_DIALECT if absent else (MISSING_B if ta is not None else MISSING_A)
                part_rows[hc.part] = _row(layer, hc, ta, tb, status)
                continue
            xa, xb = ra[hc.part], rb[hc.part]
            if xa.shape != xb.shape:
                status = TRANSPOSED if xa.ndim == 2 and xa.shape == xb.shape[::-1] else SHAPE
                part_rows[hc.part] = _row(layer, hc, ta, tb, status)
                continue
            mx, mr, beyond, same, scaled = compare_arrays(xa, xb, atol, rtol)
            status = EQUAL if same else (WITHIN if beyond == 0 else DIFFERS)
            part_rows[hc.part] = _row(layer, hc, ta, tb, status, (mx, mr, beyond, scaled))
            va[hc.part], vb[hc.part] = xa, xb
        alone, sample = site_effects(a, b, site, va, vb, hidden, via)
        for part, row in part_rows.items():
            eff = alone if part == "base" else sample
            rows.append(row if eff is None else DiffSiteRow(**{**row.__dict__, "effect": eff}))
        advance(hc_bytes(a, b, names), owner or "head")
    return sort_rows(rows)


def sort_rows(rows: list[DiffSiteRow]) -> list[DiffSiteRow]:
    """Worst first: structural defects, then the largest difference against the tensor's own
    magnitude (an F16 fn's rounding sorts below a Q8_0 fn's blocks, whatever the elements)."""
    def key(r: DiffSiteRow):
        s = 0.0 if r.rel_to_max is None else (np.inf if r.rel_to_max != r.rel_to_max else r.rel_to_max)
        return (_RANK[r.status], -s, r.layer, SITE_ORDER[r.site], _PART_ORDER[r.part])
    return sorted(rows, key=key)


def build_diff(a: HcView, b: HcView, request: DiffRequest = DiffRequest(), *,
               progress: Callable[[int, int, str], None] | None = None) -> DiffReport:
    """A (the reference) and B compared as request asks."""
    atol, rtol, tokens, seed, sites = request.atol, request.rtol, request.tokens, request.seed, request.sites
    for v, side in ((a, "A"), (b, "B")):
        if not v.hc:
            raise HcError(f"{v.label}: no hyper-connection tensors found (dialect {v.dialect.dialect}); "
                          f"expected a DeepSeek-V4-family checkpoint as {side}")
        if v.second_spellings:
            (x, y, canonical), more = v.second_spellings[0], len(v.second_spellings) - 1
            raise HcError(f"{v.label}: '{one_line(x, 120)}' and '{one_line(y, 120)}' both spell "
                          f"'{one_line(canonical, 120)}' (duplicate_spelling"
                          f"{f', and {more} more pairs' if more else ''}); expected one name per tensor in {side}, "
                          "as a loader may take either")
    why = model_difference(a, b)
    if why:
        raise HcError(why)
    if atol < 0 or rtol < 0 or atol != atol or rtol != rtol:
        raise HcError(f"--atol {atol} / --rtol {rtol}: expected non-negative numbers")
    n_layers, n_stages = numbering(a, b)
    head_mix = any(not t.hc.kind for v in (a, b) for t in v.hc.values())
    selection = check_selection(Selection(request.layers, sites), n_layers, n_stages, head_mix)
    tokens, sampled = sample_tokens(tokens, a.model.hc_mult or b.model.hc_mult, a.model.dim or b.model.dim)
    total = sum(hc_bytes(a, b, names) for names in site_groups(a, b, selection).values())
    pairs = shared_others(a, b, selection) if request.values_all else []
    total += sum(x.nbytes + y.nbytes for x, y in pairs)
    advance = Meter(total, progress) if progress else no_advance
    rows = compare_hc(a, b, atol=atol, rtol=rtol, tokens=tokens, seed=seed, advance=advance, selection=selection)
    if not rows:
        why = " (this family has no head mix)" if sites and "head" in sites and not head_mix else ""
        raise HcError(no_site_matches("A and B", ((t.hc.layer(n_layers, n_stages), t.hc.site)
                                                  for v in (a, b) for t in v.hc.values()),
                                      selection.layers, selection.sites, "HC tensor") + why)
    values = compare_values(a, b, pairs, atol=atol, rtol=rtol, advance=advance) if request.values_all else None
    differ = {r.name for r in rows if r.status == DIFFERS} | {v.name for v in values or () if v.status == DIFFERS}
    only_a, only_b, changed, comps = compare_inventory(a, b, differ)
    model = {"hc_mult": a.model.hc_mult or b.model.hc_mult, "n_layers": a.model.n_layers or b.model.n_layers,
             "dim": a.model.dim or b.model.dim, "source_a": a.model.source, "source_b": b.model.source}
    return DiffReport(a.label, b.label, a.dialect.dialect, b.dialect.dialect, model, atol, rtol, tokens, seed,
                      tuple(rows), only_a, only_b, changed, comps, values, a.bytes_read, b.bytes_read,
                      a.config_note, b.config_note, (sampled,) if sampled else (), selection,
                      len({*a.hc, *b.hc}), len(a.others.keys() & b.others.keys()),
                      a.damage, b.damage)
