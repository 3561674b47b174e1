"""Rich renderables for `hc bench --op site-chain` (built here, printed by output.show)."""

from __future__ import annotations

import math
from typing import Any, Iterator

from rich.table import Table
from rich.text import Text

from hccli.cli.render.bench import machine_line, rate_label, rows_by_tokens, tokens_label
from hccli.bench.site_chain import ChainBenchResult, ChainBenchRow


def _errors(r: ChainBenchRow) -> str:
    return ", ".join(f"{k} {'[red]NaN[/]' if math.isnan(e) else (f'{e:.2g}' if e else '0')}"
                     for k, e in r.max_err.items())


def renderables(result: ChainBenchResult) -> Iterator[Any]:
    yield machine_line(result.machine)
    yield Text(f"{result.op}: site k's write-back, then site k+1's pre on the new streams; hc {result.hc_mult}, "
               f"dim {result.dim}, {result.stream} streams, {result.sinkhorn_iters} Sinkhorn iterations, eps "
               f"{result.eps:g}, norm_eps {result.norm_eps:g}; {result.bytes_per_token:,} bytes a token (the fused "
               f"chain's fewest); copy bandwidth {result.copy_gbps:,.0f} GB/s (measured now, read + write)")
    t = Table(show_edge=False, title_justify="left")
    for name, justify in (("tokens", "right"), ("impl", "left"), ("collapse", "left"), ("time", "right"),
                          ("tokens/s", "right"), ("% copy", "right"), ("x ours", "right"),
                          ("max |error| vs float64", "left")):
        t.add_column(name, justify=justify)
    for r, time in rows_by_tokens(t, result.rows):
        t.add_row(tokens_label(r.tokens), r.impl, r.collapse, time, rate_label(r.tokens_per_s), f"{r.pct_copy:.1f}",
                  f"{r.x_ours:.2f}" if r.x_ours else "-", _errors(r))
    yield t
    for name, why in result.skipped.items():
        yield Text(f"{name}: not timed ({why})")
    yield Text(f"{result.statistic}. x ours: our pair's time (site_write then site_pre) over this one's; above 1 "
               "is faster than our pair. The oracle's next pre reads the new streams as the model stores them "
               "(rounded once to the streams' dtype).", style="dim")
