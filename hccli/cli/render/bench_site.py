"""Rich renderables for `hc bench --op site-pre|site-write` (built here, printed by output.show)."""

from __future__ import annotations

import math
from typing import Any, Iterator

from rich.table import Table
from rich.text import Text

from hccli.cli.render.bench import host_table, machine_line, rate_label, rows_by_tokens, tokens_label
from hccli.bench.site import SiteBenchResult, SiteBenchRow


def _err(x: float) -> str:
    return "[red]NaN[/]" if math.isnan(x) else (f"{x:.2g}" if x else "0")


def _errors(r: SiteBenchRow) -> str:
    parts = []
    for name, e in r.max_err.items():
        text = f"{name} {_err(e)}"
        if name in r.ulps and not math.isnan(r.ulps[name]):
            text += f" ({r.ulps[name]:.2g} roundings)"
        parts.append(text)
    return ", ".join(parts)


def _identical(r: SiteBenchRow) -> str:
    if not r.identical:
        return "-"
    bad = [k for k, ok in r.identical.items() if not ok]
    return "[green]yes[/]" if not bad else f"[red]no: {', '.join(bad)}[/]"


def renderables(result: SiteBenchResult) -> Iterator[Any]:
    yield machine_line(result.machine)
    what = "pre step (rms, projection, split, collapse)" if result.op == "site-pre" else "write-back"
    yield Text(f"{result.op}: the site's {what}; hc {result.hc_mult}, dim {result.dim}, {result.stream} streams, "
               f"{result.sinkhorn_iters} Sinkhorn iterations, eps {result.eps:g}, norm_eps {result.norm_eps:g}; "
               f"{result.bytes_per_token:,} bytes a token; copy bandwidth {result.copy_gbps:,.0f} GB/s "
               "(measured now, read + write)")
    t = Table(show_edge=False, title_justify="left")
    for name, justify in (("tokens", "right"), ("impl", "left"), ("collapse", "left"), ("time", "right"),
                          ("tokens/s", "right"), ("% copy", "right"), ("x eager", "right"),
                          ("max |error| vs float64", "left"), ("bit-identical", "left")):
        t.add_column(name, justify=justify)
    for r, time in rows_by_tokens(t, result.rows):
        t.add_row(tokens_label(r.tokens), r.impl, r.collapse or "-", time, rate_label(r.tokens_per_s),
                  f"{r.pct_copy:.1f}", f"{r.vs_eager:.1f}" if r.vs_eager else "-", _errors(r), _identical(r))
    yield t
    if result.host:
        yield host_table(result)
    for name, why in result.skipped.items():
        yield Text(f"{name}: not timed ({why})")
    yield Text(f"{result.statistic}. Roundings: one rounding to the streams' dtype at the float64 value plus "
               "float32's rounding of the sum (<= 1: within one rounding). Bit-identical: pre/post/comb against the "
               "exact kernel on our mixes, the streams' output against the eager chain on the same inputs.",
               style="dim")
