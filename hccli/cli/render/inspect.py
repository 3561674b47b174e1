"""Rich renderables for `hc inspect` (built here, printed by output.show)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from hccli.base.words import plural, short, size
from hccli.cli.output import markup, plain, safe
from hccli.inspecting.hc import HcSplitEntry
from hccli.inspecting.report import InspectReport

# findings of one code shown to people; --json has them all
FINDINGS_SHOWN_PER_CODE = 20


def _n(x: int) -> str:
    return f"{x:,}"


def _f(x: float) -> str:
    return f"{x:.4g}"


def _vec(xs: list[float]) -> str:
    return "[" + ", ".join(_f(x) for x in xs) + "]"


@dataclass(frozen=True, slots=True)
class View:
    """What the command was asked to show (its flags, as the renderer needs them)."""

    tree: bool = False  # --tree
    quiet: bool = False  # --verify -q: the verdict and the findings only
    detail: bool = False  # --hc: the sites in full
    limit: int = 50  # rows of the tensor list
    filters: str = ""  # the tensor selection, in words


def _label(r: InspectReport) -> Any:
    c = r.ckpt
    cfg = f"config {safe(c.config.source)}" if c.config else "config.json not used" if c.config_note else \
        "no config.json"
    return markup(f"[bold]{safe(c.label)}[/] ({c.kind}, {cfg})")


def _totals(r: InspectReport) -> Text:
    return Text(f"{plural(len(r.ckpt.shards), 'shard')}, {plural(r.n_tensors, 'tensor')}, "
                f"{plural(r.stored_bytes, 'stored byte')} ({size(r.stored_bytes)}), "
                f"{plural(r.logical_params, 'logical parameter')} "
                f"({short(r.logical_params)}; fp4 bytes count 2, F8_E8M0 scales 0)")


def _summary(r: InspectReport) -> Iterator[Any]:
    c = r.ckpt
    yield _label(r)
    d = r.dialect_info()
    yield Text(plain(f"dialect: {d.name} ({d.description})" + (f"; {d.note}" if d.note else "")))
    g = r.gguf_info()
    if g is not None:
        shown = ", ".join(f"{k} {f'{v:.6g}' if isinstance(v, float) else v}" for k, v in sorted(g.settings.items())
                          if not isinstance(v, (dict, list)) or len(v) <= 8)
        # Text parses no markup: names and values print as written (safe() would leave its backslashes)
        yield Text(plain(f"GGUF architecture {g.architecture}: {shown or 'no model settings in the metadata'}"))
    if c.remote is not None:
        rm, tr = c.remote, c.remote.transfer
        yield markup(safe(f"{rm.endpoint}, revision {rm.ref.revision or 'main'} = commit {rm.sha}"
                                    f"{' (offline, from the cache)' if rm.offline else ''}: {tr.bytes:,} bytes "
                                    f"transferred in {tr.requests} range requests, {tr.cached_files} files from "
                                    "the cache"))
    yield _totals(r)
    t = Table(show_edge=False, title="Bytes per dtype", title_justify="left")
    for col in ("dtype", "tensors", "bytes"):
        t.add_column(col, justify="left" if col == "dtype" else "right", no_wrap=True)
    for k, v in sorted(r.dtypes.items(), key=lambda kv: -kv[1].bytes):
        t.add_row(Text(k), Text(_n(v.tensors)), Text(f"{_n(v.bytes)} ({size(v.bytes)})"))
    yield t
    if r.components is not None:
        yield from _components(r.components)


def _components(table: Any) -> Iterator[Any]:
    t = Table(show_edge=False, title="Tensors per component (packed weights unpacked)", title_justify="left")
    for col in ("component", "tensors", "bytes", "logical parameters"):
        t.add_column(col, justify="left" if col == "component" else "right", no_wrap=True)
    for row in table.rows:
        t.add_row(Text(row.component), Text(_n(row.tensors)), Text(_n(row.stored_bytes)), Text(_n(row.logical_params)))
    yield t
    if table.unmapped:
        yield Text(safe(f"not filed under a component: {len(table.unmapped)}+ tensors (first: {table.unmapped[0]})"))


def _tree(r: InspectReport) -> Iterator[Any]:
    # labels as Text: no markup to parse or escape (a name stays as written)
    t = Tree(Text.assemble(("tensors", "bold"), " (repeated numbered blocks collapsed)"))
    for node in r.tree():
        branch = t.add(Text.assemble(plain(node.label) + "  ", (plain(node.detail), "dim")))
        for child in node.children:
            branch.add(Text.assemble(plain(child.label) + "  ", (plain(child.detail), "dim")))
    yield Text("")
    yield t


def _rows(r: InspectReport, limit: int, filters: str) -> Iterator[Any]:
    rows = r.rows or []
    t = Table(title=f"Tensors ({safe(filters) or 'all'}): {len(rows):,}", title_justify="left", show_edge=False)
    for col in ("name", "dtype", "shape", "bytes", "shard"):  # names and numbers: each cell on one line, whole
        t.add_column(col, justify="right" if col == "bytes" else "left", no_wrap=True)
    for row in rows[:limit]:
        t.add_row(safe(row.name), row.dtype, str(list(row.shape)), _n(row.bytes), safe(row.shard))
    yield Text("")
    yield t
    if len(rows) > limit:
        yield Text(f"... {len(rows) - limit:,} more (--limit N, or --json for all)")


def _hc_table(r: InspectReport) -> Iterator[Any]:
    t = Table(title="Hyper-connections (--hc for the full split; --json for every value)",
              title_justify="left", show_edge=False)
    for col in ("layer", "site", "scale", "comb diagonal, base alone"):
        t.add_column(col, no_wrap=col in ("layer", "site"))
    for e in r.hc:
        diag = (" ".join(f"{e.comb_from_base[j][j]:.3f}" for j in range(e.hc))
                if isinstance(e, HcSplitEntry) else "-")
        label = str(e.layer) if e.name == f"layers.{e.layer}" else f"{e.layer} {plain(e.name)}"
        # Text: no markup or emoji codes to parse (a name stays as written)
        t.add_row(Text(label), Text(e.site), Text(" ".join(f"{x:.3g}" for x in e.scale)), Text(diag))
    yield Text("")
    yield t


def _matrix(title: str, rows: list[list[float]], fmt: str, sums: bool) -> Table:
    t = Table(title=title, title_justify="left", show_edge=False)
    t.add_column("")
    n = len(rows)
    for k in range(n):
        t.add_column(f"to {k + 1}", justify="right")
    if sums:
        t.add_column("row sum", justify="right")
    for j, row in enumerate(rows):
        cells = [_shade(x) if sums else format(x, fmt) for x in row]
        t.add_row(f"from {j + 1}", *cells, *([f"{sum(row):.6f}"] if sums else []))
    if sums:
        t.add_row("col sum", *[f"{sum(rows[j][k] for j in range(n)):.6f}" for k in range(n)], "")
    return t


def _hc_detail(r: InspectReport) -> Iterator[Any]:
    for e in r.hc:
        yield markup(f"\n[bold]{safe(e.name)} (layer {e.layer}), {e.site} site[/]: "
                               f"scale {_vec(e.scale)}")
        p = e.base_parts
        yield Text(f"  pre offsets  {_vec(p.pre)}\n  pre weights (base alone)  {_vec(e.pre_from_base)}")
        if not isinstance(e, HcSplitEntry):
            continue
        yield Text(f"  post offsets {_vec(p.post)}\n  post weights (base alone) {_vec(e.post_from_base)}")
        yield _matrix("  comb offsets (streams count from 1)", p.comb, "+.4f", sums=False)
        yield _matrix("  comb matrix from the base alone (mixes = 0)", e.comb_from_base, ".4f", sums=True)


def _shade(x: float) -> str:
    style = "bold" if x > 0.5 else ("dim" if x < 0.1 else "")
    return f"[{style}]{x:.4f}[/]" if style else f"{x:.4f}"


_count = plural


def _findings(r: InspectReport) -> Iterator[Any]:
    fs = r.findings or []
    if not fs:
        yield markup("\n[green]verify: clean[/] (index, headers, HC tensors"
                               + (", config inventory)" if r.ckpt.config else "; no config to check against)"))
        return
    v = r.verdict()
    title = f"verify: {_count(v.errors, 'error')}, {_count(v.warnings, 'warning')}" + (f", {v.info:,} info" if v.info
                                                                                          else "")
    if v.follow_ons:
        title += (f"; {v.follow_ons:,} findings follow from {_count(v.root_causes, 'root cause')} (counted under "
                  "each; --json lists them with their cause)")
    t = Table(title=title, title_justify="left", show_edge=False)
    for col in ("severity", "code", "message"):
        t.add_column(col, overflow="fold")
    groups = r.follow_ons()
    shown: dict[str, int] = {}
    listed: dict[str, int] = {}  # what --json lists: all, or the first of a code past verify's cap
    for f in fs:
        if f.cause is not None:  # said under its root
            continue
        shown[f.code] = shown.get(f.code, 0) + (f.more or 1)
        if f.more:
            continue
        listed[f.code] = listed.get(f.code, 0) + 1
        if listed[f.code] <= FINDINGS_SHOWN_PER_CODE:
            color = "red" if f.severity == "error" else "yellow"
            t.add_row(f"[{color}]{f.severity}[/]", f.code, safe(f.message))
            if f.id in groups:
                t.add_row("", "[dim](follow-ons)[/]", safe(_follow_line(groups[f.id])))
    for code, n in shown.items():
        if n > FINDINGS_SHOWN_PER_CODE:
            more = n - FINDINGS_SHOWN_PER_CODE
            lists = f"all {n:,}" if listed[code] == n else f"the first {listed[code]:,}"
            t.add_row("", code, f"... and {more:,} more {code} findings (--json lists {lists})")
    yield Text("")
    yield t


def _follow_line(g: Any) -> str:
    parts = []
    for code, n, names in g.codes:
        first = f" (first: {', '.join(repr(x) for x in names)})" if names else ""
        parts.append(f"{n:,} {code}{first}")
    return f"{g.count:,} findings follow from it: " + "; ".join(parts)


def renderables(r: InspectReport, view: View = View()) -> Iterator[Any]:
    """The plain inspect: the summary and the HC table. A selection (tensors, --hc sites,
    --metadata, --stats): the summary line and what it selects only. --tree adds the tree; -q
    (with --verify) leaves the verdict and the findings alone."""
    if view.quiet:
        if r.findings is not None:
            yield from _findings(r)
        return
    selected = r.rows is not None or view.detail or r.metadata is not None or r.stats is not None
    if selected:
        yield _label(r)
        yield _totals(r)
    else:
        yield from _summary(r)
    if view.tree:
        yield from _tree(r)
    if r.rows is not None:
        yield from _rows(r, view.limit, view.filters)
    if view.detail:
        yield from (_hc_detail(r) if r.hc else _hc_section(r))
    elif not selected:
        yield from _hc_section(r)
    if r.metadata is not None:
        yield from _metadata(r.metadata)
    if r.stats is not None:
        yield from _stats(r.stats, r.stats_bytes_read or 0)
    if r.findings is not None:
        yield from _findings(r)


def _hc_section(r: InspectReport) -> Iterator[Any]:
    if r.hc:
        yield from _hc_table(r)
    elif r.hc_sites:
        yield Text(f"\n{r.hc_sites} HC sites whose tensors yield no values (incomplete, not F32, or shapes "
                   "past the bounds; --verify says which)")
    else:
        yield Text("\nno hc_* tensors in this checkpoint")


def _meta_value(e: Any) -> str:
    if e.value is None:  # not read: only its length is known
        return f"({e.length:,} {'characters' if e.type == 'string' else 'items'}, not read)"
    if isinstance(e.value, list):
        items = ", ".join(f"{x:.6g}" if isinstance(x, float) else str(x) for x in e.value)
        more = f", ... {e.length - len(e.value):,} more" if e.length and e.length > len(e.value) else ""
        return f"[{items}{more}] ({e.length:,} items)"
    if isinstance(e.value, float):
        return f"{e.value:.6g}"
    if isinstance(e.value, str) and e.length:
        return f"{e.value} ... ({e.length:,} characters)"
    return str(e.value)


def _metadata(groups: list) -> Iterator[Any]:
    for g in groups:
        files = ", ".join(g.files[:3]) + (f" and {len(g.files) - 3:,} more" if len(g.files) > 3 else "")
        what = "__metadata__" if g.format == "safetensors" else "GGUF key/values"
        title = f"{what} of {len(g.files):,} file{'s' if len(g.files) > 1 else ''}: {files}"
        yield Text("")
        if not g.entries:
            yield Text(plain(f"{title}: none"))
            continue
        t = Table(title=Text(plain(title)), title_justify="left", show_edge=False)
        t.add_column("key", no_wrap=True)
        t.add_column("type", no_wrap=True)
        t.add_column("value")
        for e in g.entries:
            # Text parses no markup; plain() escapes newlines and control characters from the file
            t.add_row(Text(plain(e.key)), Text(e.type), Text(plain(_meta_value(e))))
        yield t
        if g.more_keys:
            yield Text(f"... {g.more_keys:,} more keys (not listed)")


def _stat(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def _stats(stats: list, read: int) -> Iterator[Any]:
    t = Table(title="HC tensor values (min, max, mean, std of the finite values)", title_justify="left",
              show_edge=False)
    for col in ("tensor", "dtype", "elements", "min", "max", "mean", "std", "non-finite"):
        t.add_column(col, justify="left" if col in ("tensor", "dtype") else "right", no_wrap=True)
    for x in stats:
        bad = Text(_n(x.nonfinite), style="bold red" if x.nonfinite else "")
        t.add_row(Text(plain(x.name)), Text(x.dtype), Text(_n(x.elements)), Text(_stat(x.min)), Text(_stat(x.max)),
                  Text(_stat(x.mean)), Text(_stat(x.std)), bad)
    yield Text("")
    yield t if stats else Text("no HC tensor values to count")
    if stats:
        yield Text(f"read {plural(read, 'byte')} ({size(read)}) of HC values")
