"""`hc check-port` core: does a port compute the HC site as the published code does, and if
not, which known mistake makes its numbers?

PORT holds a port's outputs for GOLDEN's inputs (any subset of the steps, golden names), and may
hold the inputs it used in their place (a port run chained hands its own streams_out on): each
site is then judged from those, and their drift from the golden's is reported apart. Every step
the port gave is compared with its expectation (hccli/port/expect.py: each step from the port's
own steps before it, within the envelope of hccli/port/envelope.py). Where one departs, the known
mistakes (hccli/port/mistakes.py) are tried as hypotheses (hccli/port/hypotheses.py); the
explanations are ranked, at most three kept, and where none explains, the closest hypotheses are
named apart. A variant a library ships on purpose is named with what it costs, and --accept takes
it as the reference, so that the rest of the port is judged. Nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from hccli.ops.compare import gaps
from hccli.ops.site import REFERENCE, STEPS
from hccli.port.envelope import bf16_step
from hccli.port.expect import Check
from hccli.port.hypotheses import Evaluation, Trial, search
from hccli.port.mistakes import FACTOR, SHIPPED, catalogue
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
    shipped: tuple[str, ...] = ()  # of its mistakes, the variants a library ships: "key: who"
    cost_ulps: float | None = None  # what those cost: the largest |port - reference| in bf16 units of the reference
    parts: tuple[str, ...] = ()  # each mistake's text, in the order of mistakes


@dataclass(frozen=True)
class Closest:
    """A hypothesis that explains nothing, and how much of the first departing step it mends."""

    mistakes: tuple[str, ...]
    text: str
    explains: float  # the share of the difference at departs_at it takes away (1 = all of it)


@dataclass(frozen=True)
class InputUse:
    """An input the port gave in place of the golden's, at how many sites, and its drift from it."""

    name: str  # streams_in | pre_mix_in | f
    sites: int
    max_abs: float
    differing: int  # elements whose float32 bits differ from the golden's
    first_site: str | None  # the first site where they differ


@dataclass(frozen=True)
class PortReport:
    port: str
    golden: str
    family: str  # the golden file's: "v4" | "v4.1"
    sites: int
    steps_given: tuple[str, ...]
    errors: tuple[StepError, ...]
    departs_at: str | None  # "3.attn.comb"; None where the port matches (given the accepted variants)
    summary: str  # the sentence: matches, or where it departs and what explains it
    explained_by: tuple[Explanation, ...]
    hypotheses_tried: int
    ignored: tuple[str, ...] = field(default=())  # port tensors that are no golden step
    inputs_used: tuple[InputUse, ...] = field(default=())  # the port's own inputs the sites were judged from
    accepted: tuple[str, ...] = field(default=())  # --accept: shipped variants taken as the reference
    closest: tuple[Closest, ...] = field(default=())  # where nothing explains: the nearest hypotheses, ranked

    VERDICTS: ClassVar[tuple[str, ...]] = ("matches", "departs")

    @property
    def exit_code(self) -> int:
        return 0 if self.departs_at is None else 1

    @property
    def verdict(self) -> str:
        return "matches" if self.departs_at is None else "departs"


MAX_EXPLANATIONS = 3
# a hypothesis is named as close where it takes away at least this share of the first departure
CLOSE_ENOUGH = 0.01


def _explanation(ev: Evaluation, t: Trial) -> Explanation:
    shipped = tuple(f"{m.key}: {m.shipped}" for m in t.mistakes if m.shipped)
    parts = tuple(Trial((m,), t.factor, None, 0.0).text() for m in t.mistakes)
    return Explanation(tuple(m.key for m in t.mistakes), t.text(), tuple(m.report for m in t.mistakes),
                       max((c.max_abs for c in t.checks), default=0.0), max((c.worst for c in t.checks), default=0.0),
                       shipped, _cost(ev) if shipped else None, parts)


def _cost(ev: Evaluation) -> float:
    """The largest |port - reference| of the written-back streams, in bf16 units of the reference."""
    worst = 0.0
    for se in ev.sites:
        if "streams_out" in se.port:
            want = se.expectation("streams_out", REFERENCE)[0]
            c = gaps(se.port["streams_out"], want)
            step = bf16_step(want).reshape(-1)
            ok = (step > 0) & c.keep & np.isfinite(c.gap)
            if ok.any():
                worst = max(worst, float((c.gap[ok] / step[ok]).max()))
    return worst


def _shipped_text(e: Explanation, accepted: tuple[str, ...]) -> str:
    who = "; ".join(s.split(": ", 1)[1] for s in e.shipped)
    cost = f"up to {e.cost_ulps:,.0f} bf16 units off the float32 reference"
    if all(k in accepted for k in e.mistakes if k in SHIPPED):
        return f"the accepted variant that {who} ships ({cost})"
    keys = ",".join(k for k in e.mistakes if k in SHIPPED)
    return f"a variant that {who} ships ({cost}; --accept {keys} judges the rest)"


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


def _inputs_used(ev: Evaluation) -> tuple[InputUse, ...]:
    out = []
    for name in ("streams_in", "pre_mix_in", "f"):
        ds = [d for d in ev.drift if d.name == name]
        if ds:
            first = next((d.key for d in ds if d.differing), None)
            out.append(InputUse(name, len(ds), max(d.max_abs for d in ds), sum(d.differing for d in ds), first))
    return tuple(out)


def check_port(golden: SiteGolden, port: dict[str, dict[str, np.ndarray]], port_label: str,
               ignored: tuple[str, ...] = (), accept: tuple[str, ...] = ()) -> PortReport:
    """accept: keys of SHIPPED variants taken as the reference (exit 0 where only they remain)."""
    ev = Evaluation(golden, port)
    ref = ev.checks()
    given = tuple(s for s in STEPS if any(s in p for p in port.values()))
    base = (port_label, golden.path, golden.params.family, len(golden.sites), given, _errors(ref))
    extra = dict(ignored=ignored, inputs_used=_inputs_used(ev), accepted=tuple(accept))
    bad = next((c for c in ref if not c.ok), None)
    if bad is None:
        return PortReport(*base, None, MATCHES, (), 0, **extra)
    where = f"{bad.key}.{bad.step}"
    singles = [*catalogue(golden.params), FACTOR]
    trials, tried = search(ev, singles, (bad.key, bad.step), bad.total)
    found = [t for t in trials if t.checks is not None]
    if not found:
        near = sorted((t for t in trials if t.explains_first >= CLOSE_ENOUGH), key=lambda t: (-t.explains_first, t.text()))
        closest = tuple(Closest(tuple(m.key for m in t.mistakes), t.text(), t.explains_first)
                        for t in near[:MAX_EXPLANATIONS])
        verdict = f"departs at step {where}: no known mistake explains it"
        if closest:
            verdict += f"; closest: {closest[0].text} (takes away {closest[0].explains:.0%} of the difference there)"
        return PortReport(*base, where, verdict, (), tried, **extra, closest=closest)
    explained = [_explanation(ev, t) for t in found]

    def rank(e: Explanation):  # fewest mistakes not accepted, then fewest, then the smallest residual
        return (sum(k not in accept for k in e.mistakes), len(e.mistakes), e.worst, e.text)
    explained = sorted(explained, key=rank)[:MAX_EXPLANATIONS]
    best = explained[0]
    left = [k for k in best.mistakes if k not in accept]
    if not left:
        verdict = f"{MATCHES}, given {_shipped_text(best, tuple(accept))}"
        return PortReport(*base, None, verdict, tuple(explained), tried, **extra)
    text = best.text
    if best.shipped:
        mine = [t for k, t in zip(best.mistakes, best.parts) if k not in SHIPPED]
        shipped = [t for k, t in zip(best.mistakes, best.parts) if k in SHIPPED]
        text = " and ".join(mine) + (", on top of " if mine else "") + " and ".join(shipped) + (
            ": " + _shipped_text(best, tuple(accept)))
    verdict = f"departs at step {where}: explained by {text}, residual {best.residual:.3g}"
    if len(explained) > 1:
        verdict += " (or: " + "; ".join(e.text for e in explained[1:]) + ")"
    return PortReport(*base, where, verdict, tuple(explained), tried, **extra)
