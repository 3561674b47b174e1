"""The known mistakes tried as hypotheses on a port that departs: each recomputes the file with the
mistake (or a pair of them) and explains the port when every step then lies within the envelope.

The step that departs first must be mended before anything else is worth computing, so each
hypothesis is judged there first (quickly: hccli/port/expect.py's quick check), and how much of
that step's departure it takes away ranks the hypotheses that explain nothing. Nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import combinations

import numpy as np

from hccli.ops.site import REFERENCE, STEPS, Variant
from hccli.port.expect import Check, InputDrift, SiteExpect, first_handoff, stack_starts, used_inputs
from hccli.port.mistakes import FACTOR, Mistake, factor_name, snap_factor
from hccli.runsite.golden import SiteGolden


class Evaluation:
    """A golden file and a port's tensors, evaluated under any variant (steps computed once). Each
    site is judged from the inputs the port used: its own streams_in, pre_mix_in and f where it
    gave them, else the golden's."""

    def __init__(self, golden: SiteGolden, port: dict[str, dict[str, np.ndarray]]):
        self.golden, self.port = golden, port
        self.sites: list[SiteExpect] = []
        self.drift: list[InputDrift] = []
        for gs in golden.sites:
            given = port.get(gs.ref.key, {})
            inputs, drift = used_inputs(gs.ref.key, gs.inputs, given)
            steps = {s: a for s, a in given.items() if s in STEPS}
            self.sites.append(SiteExpect(gs.ref.key, gs.ref.site, inputs, steps, golden.params))
            self.drift += drift
        self.starts = stack_starts([gs.ref for gs in golden.sites])
        self._fits: dict[tuple, float | None] = {}

    def checks(self, variant: Variant = REFERENCE, only: tuple[str, str] | None = None,
               stop: bool = False, quick: bool = False) -> list[Check]:
        """The port's steps against their expectation, site by site in order. only: one (site key,
        step) (the sites before it still hand on their pre); stop: end at the first that departs."""
        out: list[Check] = []
        handoff = None
        for i, se in enumerate(self.sites):
            if i in self.starts:
                handoff = first_handoff(self.golden.tokens, self.golden.params.hc_mult)
            if only is None or se.key == only[0]:
                for s in STEPS:
                    if s in se.port and (only is None or s == only[1]):
                        c = se.check(s, variant, handoff, quick)
                        if c is not None:
                            out.append(c)
                            if stop and not c.ok:
                                return out
                if only is not None:
                    break
            if variant.collapse_with == "handoff":
                pre = se.pre_used(variant)
                handoff = pre if pre is not None else handoff
        return out

    def fit_factor(self, base: Variant) -> float | None:
        """The least-squares constant between the port's collapsed and the recomputed one; once
        for each set of the fields collapsed reads (most mistakes paired with the factor leave
        collapsed as it is, and the fit walks every site)."""
        v = replace(base, collapsed_factor=1.0)
        key = tuple(se.fields("collapsed", v) for se in self.sites)
        if key not in self._fits:
            self._fits[key] = self._fit(v)
        return self._fits[key]

    def _fit(self, v: Variant) -> float | None:
        num = den = 0.0
        handoff = None
        for i, se in enumerate(self.sites):
            if i in self.starts:
                handoff = first_handoff(self.golden.tokens, self.golden.params.hc_mult)
            if "collapsed" in se.port:
                h = se.collapsed(v, handoff)[0].astype(np.float64)
                p = se.port["collapsed"].astype(np.float64)
                ok = np.isfinite(h) & np.isfinite(p)
                num += float((h[ok] * p[ok]).sum())
                den += float((h[ok] * h[ok]).sum())
            if v.collapse_with == "handoff":
                pre = se.pre_used(v)
                handoff = pre if pre is not None else handoff
        if den == 0 or not np.isfinite(num / den) or abs(num / den - 1) < 1e-3:
            return None
        return snap_factor(num / den)


@dataclass(frozen=True)
class Trial:
    """One hypothesis tried: its mistakes, the checks it passed (None where it fails) and the share of
    the first departing step's difference it takes away (1: all of it; 0 or less: none)."""

    mistakes: tuple[Mistake, ...]
    factor: float | None
    checks: tuple[Check, ...] | None
    explains_first: float

    def text(self) -> str:
        return " and ".join(m.text.format(c=factor_name(self.factor)) if m is FACTOR else m.text
                            for m in self.mistakes)


def variant_of(ms: tuple[Mistake, ...], base: Variant = REFERENCE) -> Variant:
    v = base
    for m in ms:
        if m is not FACTOR:
            v = m.variant(v)
    return v


def try_one(ev: Evaluation, ms: tuple[Mistake, ...], first: tuple[str, str], departure: float,
            base: Variant = REFERENCE) -> Trial:
    v = variant_of(ms, base)
    factor = None
    if FACTOR in ms:
        factor = ev.fit_factor(v)
        if factor is None:
            return Trial(ms, None, None, 0.0)
        v = replace(v, collapsed_factor=factor)
    at = ev.checks(v, first, quick=True)
    share = 1.0 - (at[0].total / departure if at and departure > 0 else 1.0)
    if not all(c.ok for c in at):
        return Trial(ms, factor, None, share)
    checks = ev.checks(v, stop=True, quick=True)
    if not all(c.ok for c in checks):
        return Trial(ms, factor, None, share)
    return Trial(ms, factor, tuple(checks), share)  # all passed, so exact: a quick check is partial only where it departs


def search(ev: Evaluation, singles: list[Mistake], first: tuple[str, str], departure: float,
           base: Variant = REFERENCE) -> tuple[list[Trial], int]:
    """Every single mistake; where none explains, every pair of mistakes of different kinds."""
    trials = [try_one(ev, (m,), first, departure, base) for m in singles]
    if not any(t.checks is not None for t in trials):
        trials += [try_one(ev, (a, b), first, departure, base) for a, b in combinations(singles, 2)
                   if a.kind != b.kind]
    return trials, len(trials)
