"""Rich renderables for `hc check-port` (built here, printed by output.show)."""

from __future__ import annotations

from typing import Any, Iterator

from rich.table import Table

from hccli.base.words import plural
from hccli.cli.output import markup, safe
from hccli.port.check import PortReport


def renderables(r: PortReport) -> Iterator[Any]:
    yield markup(f"port {safe(r.port)} against golden {safe(r.golden)} ({r.family}, {plural(r.sites, 'site')}): "
                 f"steps given: {', '.join(r.steps_given)}")
    t = Table(show_edge=False)
    for name in ("step", "sites", "max |diff|", "differing", "beyond float32", "worst / envelope", "first departs"):
        t.add_column(name, justify="left" if name in ("step", "first departs") else "right")
    for e in r.errors:
        style = "green" if e.first_site is None else "red"
        t.add_row(e.step, str(e.sites), f"{e.max_abs:.3g}", f"{e.differing:,}", f"[{style}]{e.beyond:,}[/]",
                  f"{e.worst:.3g}", e.first_site or "")
    yield t
    for u in r.inputs_used:
        drift = (f"{u.differing:,} elements differ from the golden's (max |diff| {u.max_abs:.3g}, first at "
                 f"{u.first_site})" if u.differing else "the golden's own values")
        yield markup(f"judged from the port's own {u.name} at {u.sites} sites: {safe(drift)}")
    style = "green" if r.departs_at is None else "red"
    yield markup(f"[{style}]{safe(r.summary)}[/]")
    for e in r.explained_by:
        yield markup(f"  {safe(e.text)}: {safe('; '.join(e.reports))}")
    for c in r.closest:
        yield markup(f"  closest: {safe(c.text)} (takes away {c.explains:.0%} of the difference at {r.departs_at})")
    if r.ignored:
        shown = ", ".join(r.ignored[:5]) + (" ..." if len(r.ignored) > 5 else "")
        yield markup(f"[yellow]note[/]: {plural(len(r.ignored), 'tensor')} of the port {'is' if len(r.ignored) == 1 else 'are'} no golden step, passed over: "
                     f"{safe(shown)}")
