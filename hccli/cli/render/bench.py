"""Rich renderables for `hc bench` (built here, printed by output.show)."""

from __future__ import annotations

import math
from typing import Any, Iterator

from rich.table import Table
from rich.text import Text

from hccli.cli.output import markup, safe
from hccli.bench.op import BenchResult, BenchRow, Machine



def tokens_label(n: int) -> str:
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n:,}"


def rate_label(x: float) -> str:
    if x >= 1e9:
        return f"{x / 1e9:.2f} G"
    if x >= 1e6:
        return f"{x / 1e6:.1f} M"
    return f"{x / 1e3:.1f} K"


def rows_by_tokens(t: Table, rows) -> Iterator[tuple[Any, str]]:
    """(row, its time as text) for each row, with a section line in `t` wherever the token count changes."""
    last = None
    for r in rows:
        if last is not None and r.tokens != last:
            t.add_section()
        last = r.tokens
        yield r, f"{r.ms * 1e3:.1f} us" if r.ms < 1 else f"{r.ms:.3f} ms"


def _diff(r: BenchRow, ref_impl: str) -> str:
    if r.impl == ref_impl or not r.max_diff:
        return "-"
    worst = max(r.max_diff.values())
    if math.isnan(worst):
        return "[red]NaN[/]"
    if r.differing == 0:
        return "[green]0 (identical)[/]"
    return f"{worst:.2g} ({r.differing:,} differ)"


def machine_line(m: Machine) -> Any:
    """The device, driver and versions a benchmark ran with: the first line of both bench tables."""
    v = m.versions
    driver = f", driver {safe(m.driver)}" if m.driver else ""
    return markup(f"[bold]{safe(m.device_name)}[/] ({safe(m.device)}{driver}); torch {safe(str(v.get('torch')))}, "
                  f"CUDA {safe(str(v.get('cuda')))}, tilelang {safe(str(v.get('tilelang')))}")


def renderables(result: BenchResult) -> Iterator[Any]:
    yield machine_line(result.machine)
    yield Text(f"hc_mult {result.hc_mult}, {result.sinkhorn_iters} Sinkhorn iterations, eps {result.eps:g}; "
               f"{result.bytes_per_token} bytes a token; copy bandwidth {result.copy_gbps:,.0f} GB/s "
               "(measured now, read + write)")
    ref_impl = next((r.impl for r in result.rows if r.speedup == 1.0), "")
    t = Table(show_edge=False, title_justify="left")
    for name, justify in (("tokens", "right"), ("impl", "left"), ("time", "right"), ("tokens/s", "right"),
                          ("GB/s", "right"), ("% copy", "right"), (f"x {ref_impl or 'ref'}", "right"),
                          (f"max |diff| vs {ref_impl or 'ref'}", "right")):
        t.add_column(name, justify=justify)
    for r, time in rows_by_tokens(t, result.rows):
        t.add_row(tokens_label(r.tokens), r.impl, time, rate_label(r.tokens_per_s),
                  f"{r.gbps:,.0f}" if r.gbps >= 10 else f"{r.gbps:.2g}", f"{r.pct_copy:.1f}", f"{r.speedup:.1f}" if r.speedup else "-", _diff(r, ref_impl))
    yield t
    if result.host:
        yield host_table(result)
    for name, why in result.skipped.items():
        yield Text(f"{name}: not timed ({why})")
    yield Text(f"{result.statistic}; differences against {result.reference}.", style="dim")


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} us"


def host_table(result: BenchResult) -> Table:
    t = Table(show_edge=False, title="host time per call (eager; GPU time beside it)", title_justify="left")
    for name in ("tokens", "impl", "GPU time", "raw launch", "call (out=)", "call (allocating)", "call / raw"):
        t.add_column(name, justify="left" if name == "impl" else "right")
    last = None
    for r in result.host:
        if last is not None and r.tokens != last:
            t.add_section()
        last = r.tokens
        gpu = "-" if r.gpu_ms is None else _us(r.gpu_ms * 1e3)
        t.add_row(tokens_label(r.tokens), r.impl, gpu, _us(r.raw_us), _us(r.call_us), _us(r.alloc_us),
                  "-" if r.call_vs_raw is None else f"{r.call_vs_raw:.2f}")
    return t
