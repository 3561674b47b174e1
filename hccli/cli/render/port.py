"""Rich renderables for `hc check-port` (built here, printed by output.show)."""

from __future__ import annotations

from typing import Any, Iterator

from rich.table import Table

from hccli.cli.output import markup, safe
from hccli.port.check import PortReport


def renderables(r: PortReport) -> Iterator[Any]:
    yield markup(f"port {safe(r.port)} against golden {safe(r.golden)} ({r.family}, {r.sites} sites): "
                 f"steps given: {', '.join(r.steps_given)}")
    t = Table(show_edge=False)
    for name in ("step", "sites", "max |diff|", "differing", "beyond float32", "worst / envelope", "first departs"):
        t.add_column(name, justify="left" if name in ("step", "first departs") else "right")
    for e in r.errors:
        style = "green" if e.first_site is None else "red"
        t.add_row(e.step, str(e.sites), f"{e.max_abs:.3g}", f"{e.differing:,}", f"[{style}]{e.beyond:,}[/]",
                  f"{e.worst:.3g}", e.first_site or "")
    yield t
    style = "green" if r.departs_at is None else "red"
    yield markup(f"[{style}]{safe(r.summary)}[/]")
    for e in r.explained_by:
        yield markup(f"  {safe(e.text)}: {safe('; '.join(e.reports))}")
    if r.ignored:
        shown = ", ".join(r.ignored[:5]) + (" ..." if len(r.ignored) > 5 else "")
        yield markup(f"[yellow]note[/]: {len(r.ignored)} tensor(s) of the port are no golden step, passed over: "
                     f"{safe(shown)}")
