"""`hc check-port` core: does a port compute the HC site as the published code does, and if
not, which known mistake makes its numbers?

PORT holds a port's outputs for GOLDEN's inputs (any subset of the steps, golden names).
Every step the port gave is compared with its expectation (hccli/port/expect.py: each step
from the port's own steps before it, within float32's envelope). Where one departs, the
known mistakes (hccli/port/mistakes.py) are tried as hypotheses: the whole file recomputed
with the mistake; a hypothesis explains the port when every step then lies within the
envelope. Single mistakes first, then pairs of mistakes of different kinds. Nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import ClassVar

import numpy as np

from hccli.port.expect import Check, SiteExpect, first_handoff, stack_starts
from hccli.port.mistakes import FACTOR, Mistake, catalogue, factor_name, snap_factor
from hccli.ops.site import REFERENCE, STEPS, Variant
from hccli.runsite.golden import SiteGolden

MATCHES = "matches within float32 rounding"


@dataclass(frozen=True)
class StepError:
    step: str
    sites: int  # sites where the port gave this step
    elements: int
    max_abs: float
    differing: int  # elements whose bits differ from the expectation
    beyond: int  # elements outside float32's envelope
    worst: float  # largest difference / envelope
    first_site: str | None  # the first site where it departs


@dataclass(frozen=True)
class Explanation:
    mistakes: tuple[str, ...]  # mistake keys, e.g. ("post-mult-1", "iters-10")
    text: str
    reports: tuple[str, ...]
    residual: float  # the largest |port - recomputed| left, within the envelope
    worst: float  # the largest residual / envelope


@dataclass(frozen=True)
class PortReport:
    port: str
    golden: str
    family: str  # the golden file's: "v4" | "v4.1"
    sites: int
    steps_given: tuple[str, ...]
    errors: tuple[StepError, ...]
    departs_at: str | None  # "3.attn.comb"
    summary: str  # the sentence: matches, or where it departs and what explains it
    explained_by: tuple[Explanation, ...]
    hypotheses_tried: int
    ignored: tuple[str, ...] = field(default=())  # port tensors that are no golden step

    VERDICTS: ClassVar[tuple[str, ...]] = ("matches", "departs")

    @property
    def exit_code(self) -> int:
        return 0 if self.departs_at is None else 1

    @property
    def verdict(self) -> str:
        return "matches" if self.departs_at is None else "departs"


class Evaluation:
    """A golden file and a port's steps, evaluated under any variant (steps computed once)."""

    def __init__(self, golden: SiteGolden, port: dict[str, dict[str, np.ndarray]]):
        self.golden, self.port = golden, port
        self.sites = [SiteExpect(gs.ref.key, gs.ref.site, gs.inputs, port.get(gs.ref.key, {}), golden.params)
                      for gs in golden.sites]
        self.starts = stack_starts([gs.ref for gs in golden.sites])
        self._fits: dict[tuple, float | None] = {}

    def checks(self, variant: Variant = REFERENCE, only: tuple[str, str] | None = None,
               stop: bool = False) -> list[Check]:
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
                        c = se.check(s, variant, handoff)
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


def _explains(ev: Evaluation, variant: Variant, first: tuple[str, str]) -> list[Check] | None:
    # the step that departs first must be mended before anything else is worth computing
    if not all(c.ok for c in ev.checks(variant, first)):
        return None
    checks = ev.checks(variant, stop=True)
    return checks if all(c.ok for c in checks) else None


def _explanation(ms: tuple[Mistake, ...], checks: list[Check], factor: float | None) -> Explanation:
    texts = [m.text.format(c=factor_name(factor)) if m is FACTOR else m.text for m in ms]
    return Explanation(tuple(m.key for m in ms), " and ".join(texts), tuple(m.report for m in ms),
                       max((c.max_abs for c in checks), default=0.0), max((c.worst for c in checks), default=0.0))


def _try(ev: Evaluation, ms: tuple[Mistake, ...], first: tuple[str, str]) -> Explanation | None:
    v = REFERENCE
    for m in ms:
        if m is not FACTOR:
            v = m.variant(v)
    factor = None
    if FACTOR in ms:
        factor = ev.fit_factor(v)
        if factor is None:
            return None
        v = replace(v, collapsed_factor=factor)
    checks = _explains(ev, v, first)
    return None if checks is None else _explanation(ms, checks, factor)


def _errors(checks: list[Check]) -> tuple[StepError, ...]:
    out = []
    for step in STEPS:
        cs = [c for c in checks if c.step == step]
        if cs:
            bad = next((c.key for c in cs if not c.ok), None)
            out.append(StepError(step, len(cs), sum(c.elements for c in cs), max(c.max_abs for c in cs),
                                 sum(c.differing for c in cs), sum(c.beyond for c in cs), max(c.worst for c in cs),
                                 bad))
    return tuple(out)


def check_port(golden: SiteGolden, port: dict[str, dict[str, np.ndarray]], port_label: str,
               ignored: tuple[str, ...] = ()) -> PortReport:
    ev = Evaluation(golden, port)
    ref = ev.checks()
    given = tuple(s for s in STEPS if any(s in p for p in port.values()))
    base = (port_label, golden.path, golden.params.family, len(golden.sites), given, _errors(ref))
    bad = next((c for c in ref if not c.ok), None)
    if bad is None:
        return PortReport(*base, None, MATCHES, (), 0, ignored)
    where = f"{bad.key}.{bad.step}"
    singles = [*catalogue(golden.params), FACTOR]
    tried = 0
    found = []
    for m in singles:
        tried += 1
        e = _try(ev, (m,), (bad.key, bad.step))
        if e is not None:
            found.append(e)
    if not found:
        for a, b in combinations(singles, 2):
            if a.kind == b.kind:
                continue
            tried += 1
            e = _try(ev, (a, b), (bad.key, bad.step))
            if e is not None:
                found.append(e)
    if not found:
        return PortReport(*base, where, f"departs at step {where}: no known mistake explains it", (), tried, ignored)
    found.sort(key=lambda e: (e.worst, e.text))
    best = found[0]
    summary = f"departs at step {where}: explained by {best.text}, residual {best.residual:.3g}"
    if len(found) > 1:
        summary += " (or equally: " + "; ".join(e.text for e in found[1:]) + ")"
    return PortReport(*base, where, summary, tuple(found), tried, ignored)
