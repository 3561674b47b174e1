"""Rich renderables for `hc run-site` (built here, printed by output.show)."""

from __future__ import annotations

from typing import Any, Iterator

from rich.table import Table
from rich.text import Text

from hccli.base.words import plural
from hccli.cli.output import markup, safe
from hccli.runsite.golden import GoldenComparison
from hccli.runsite.run import SiteRunReport


def _vec(xs) -> str:
    return "[" + ", ".join(f"{x:.4f}" for x in xs) + "]"


def _rms(xs) -> str:
    return " ".join(f"{x:.3g}" for x in xs)


def renderables(r: SiteRunReport) -> Iterator[Any]:
    yield markup(f"[bold]{safe(r.source)}[/] ({r.source_kind}, {safe(r.dialect)}): family {r.family}, "
                 f"hc_mult {r.hc_mult}, {r.sinkhorn_iters} Sinkhorn iterations, hc_eps {r.hc_eps:g}, "
                 f"norm_eps {r.norm_eps:g}")
    yield markup(f"parameters: {safe(r.params_origin)}")
    yield markup(f"streams: {safe(r.streams)}, {r.streams_dtype}; sub-layer output: {safe(r.sublayer)}")
    yield markup(f"ran: {safe(r.impl)}; projection in {r.precision}")
    drift = any(s.drift for s in r.sites)
    t = Table(show_edge=False, title=f"{plural(len(r.sites), 'site')}, token 0's pre, post and comb; streams' RMS "
              "over all tokens", title_justify="left")
    for name in ("site", "name", "pre", "post", "RMS in", "RMS out", "h RMS") + (
            ("drift pre", "post", "comb", "h") if drift else ()):
        t.add_column(name, justify="left" if name in ("site", "name", "pre", "post") else "right")
    for s in r.sites:
        row = [s.key, safe(s.name), _vec(s.pre) if s.pre else "", _vec(s.post) if s.post else "",
               _rms(s.rms_in), _rms(s.rms_out) if s.rms_out else "", f"{s.collapsed_rms:.3g}"]
        if drift:
            d = s.drift or {}
            row += [f"{d[k]:.2g}" if k in d else "" for k in ("pre", "post", "comb", "h")]
        t.add_row(*row)
    yield Text("")
    yield t
    combs = [s for s in r.sites if s.comb]
    for s in combs[:4]:
        c = Table(show_edge=False, title=f"{s.key} ({safe(s.name)}): token 0's comb", title_justify="left")
        c.add_column("")
        for k in range(len(s.comb)):
            c.add_column(f"to {k + 1}", justify="right")
        for j, row in enumerate(s.comb):
            c.add_row(f"from {j + 1}", *[f"{v:.4f}" for v in row])
        yield Text("")
        yield c
    if combs:
        yield Text("(row j = from stream j, column k = to stream k)")
    if len(combs) > 4:
        yield Text(f"\n... the comb of {plural(len(combs) - 4, 'more site')} in --json")
    for n in r.notes:
        yield markup(f"[yellow]note[/]: {safe(n)}")
    if r.saved:
        yield markup(f"saved golden site vectors to {safe(r.saved)}")


def comparison(c: GoldenComparison) -> Iterator[Any]:
    yield markup(f"golden site vectors: {safe(c.file)} ({c.family}, {plural(c.sites, 'site')}, {plural(c.tokens, 'token')})")
    yield markup(f"re-ran: {safe(c.how)}")
    t = Table(show_edge=False)
    for name in ("step", "sites", "max |diff|", "differing elements", f"beyond atol {c.atol:g}"):
        t.add_column(name, justify="left" if name == "step" else "right")
    for s in c.steps:
        style = "green" if s.beyond_atol == 0 else "red"
        t.add_row(s.step, str(s.sites), f"{s.max_abs_diff:.3g}", f"{s.differing:,}", f"[{style}]{s.beyond_atol:,}[/]")
    yield t
    yield markup("[green]equal within --atol[/]" if c.ok else "[red]differs beyond --atol[/] (exit status 1)")
