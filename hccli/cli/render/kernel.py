"""Rich renderables for `hc run-kernel` (built here, printed by output.show)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np
from rich.table import Table
from rich.text import Text

from hccli.base.words import plural
from hccli.cli.output import markup, safe
from hccli.runkernel.golden import Comparison
from hccli.runkernel.run import RunResult


def _cell(x: float) -> str:
    # shade by value: the matrix's mass should sit where the streams are carried over
    if not np.isfinite(x):
        return f"[red]{x}[/]"
    style = "bold green" if x >= 0.5 else ("green" if x >= 0.2 else ("" if x >= 0.05 else "dim"))
    return f"[{style}]{x:.4f}[/]" if style else f"{x:.4f}"


def _vec(xs) -> str:
    return "[" + ", ".join(f"{x:.4f}" for x in xs) + "]"


def renderables(r: RunResult, *, limit: int = 4, saved: Path | None = None) -> Iterator[Any]:
    p = r.input.params
    where = "GPU" if r.device.startswith("cuda") else "CPU"
    yield markup(f"[bold]{r.impl}[/] on {r.device} ({where}): {safe(r.reason)}")
    yield markup(f"input: {safe(r.input.provenance)}")
    yield markup(f"base/scale: {safe(r.input.params_provenance)}")
    yield markup(f"hc_mult {p.hc_mult}, {p.iters} Sinkhorn iterations, eps {p.eps:g}: from {safe(p.origin)}")
    hc = p.hc_mult
    for i in range(min(limit, r.tokens)):
        t = Table(title=f"token {i}: comb (row j = from stream j, column k = to stream k)", title_justify="left",
                  show_edge=False)
        t.add_column("")
        for k in range(hc):
            t.add_column(f"to {k + 1}", justify="right")
        t.add_column("row sum", justify="right")
        comb = r.comb[i]
        for j in range(hc):
            t.add_row(f"from {j + 1}", *[_cell(x) for x in comb[j]], f"{comb[j].sum(dtype=np.float64):.6f}")
        t.add_row("col sum", *[f"{comb[:, k].sum(dtype=np.float64):.6f}" for k in range(hc)], "")
        yield Text("")
        yield t
        yield Text(f"pre  {_vec(r.pre[i])}\npost {_vec(r.post[i])}")
    if r.tokens > limit:
        yield Text(f"\n... {plural(r.tokens - limit, 'more token')} (--limit N, --json or --save for all)")
    row, col = r.deviations()
    yield markup(f"\n[bold]{plural(r.tokens, 'token')}[/]: largest |row sum - 1| {row:.3g}, "
                           f"largest |column sum - 1| {col:.3g}")
    bad = r.input.nonfinite_tokens
    if bad:
        shown = ", ".join(str(i) for i in bad[:10]) + (" ..." if len(bad) > 10 else "")
        its = "its" if len(bad) == 1 else "their"
        yield markup(f"[yellow]{plural(len(bad), 'token')} with NaN/Inf in {its} mixes[/]: {shown} "
                     f"(run anyway; {its} outputs are not finite)")
    if saved is not None:
        yield markup(f"saved inputs and outputs to {safe(str(saved))}")


def comparison(c: Comparison) -> Iterator[Any]:
    where = "GPU" if c.device.startswith("cuda") else "CPU"
    yield markup(f"[bold]{c.impl}[/] on {c.device} ({where}): {safe(c.reason)}")
    stored = f", written by {safe(c.stored_impl)}" if c.stored_impl else ""
    yield markup(f"golden vectors: {safe(c.file)} ({plural(c.tokens, 'token')}{stored}); hc_mult {c.hc_mult}, "
               f"{c.sinkhorn_iters} Sinkhorn iterations, eps {c.eps:g}")
    t = Table(show_edge=False)
    for name in ("output", "max |diff|", "differing elements", f"beyond atol {c.atol:g}"):
        t.add_column(name, justify="left" if name == "output" else "right")
    for name, d in c.outputs.items():
        style = "green" if d.beyond_atol == 0 else "red"
        t.add_row(name, f"{d.max_abs_diff:.3g}", f"{d.differing:,}", f"[{style}]{d.beyond_atol:,}[/]")
    yield t
    yield markup("[green]equal within --atol[/]" if c.ok else
                           "[red]differs beyond --atol[/] (exit status 1)")
