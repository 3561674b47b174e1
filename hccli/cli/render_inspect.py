"""Rich renderables for `hc inspect` (built here, printed by output.show)."""

from __future__ import annotations

from typing import Any, Iterator

from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from hccli.cli.output import markup, plain, safe, unclipped
from hccli.inspect_report import HcSplitEntry, InspectReport

# findings of one code shown to people; --json has them all
FINDINGS_SHOWN_PER_CODE = 20


def _n(x: int) -> str:
    return f"{x:,}"


def _f(x: float) -> str:
    return f"{x:.4g}"


def _vec(xs: list[float]) -> str:
    return "[" + ", ".join(_f(x) for x in xs) + "]"


def _summary(r: InspectReport) -> Iterator[Any]:
    c = r.ckpt
    cfg = f"config {safe(c.config.source)}" if c.config else "config.json not used" if c.config_note else \
        "no config.json"
    yield markup(f"[bold]{safe(c.label)}[/] ({c.kind}, {cfg})")
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
    yield Text(f"{len(c.shards)} shards, {_n(r.n_tensors)} tensors, {_n(r.stored_bytes)} stored bytes "
               f"({r.stored_bytes / 1e9:,.2f} GB), {_n(r.logical_params)} logical parameters "
               f"({r.logical_params / 1e9:,.2f} G; fp4 bytes count 2, F8_E8M0 scales 0)")
    t = Table(show_edge=False, title="Bytes per dtype", title_justify="left")
    for col in ("dtype", "tensors", "bytes"):
        t.add_column(col, justify="left" if col == "dtype" else "right")
    for k, v in sorted(r.dtypes.items(), key=lambda kv: -kv[1].bytes):
        t.add_row(Text(k), Text(_n(v.tensors)), Text(f"{_n(v.bytes)} ({v.bytes / 1e9:,.2f} GB)"))
    yield t
    if r.components is not None:
        yield from _components(r.components)


def _components(table: Any) -> Iterator[Any]:
    t = Table(show_edge=False, title="Tensors per component (packed weights unpacked)", title_justify="left")
    for col in ("component", "tensors", "bytes", "logical parameters"):
        t.add_column(col, justify="left" if col == "component" else "right")
    for row in table.rows:
        t.add_row(Text(row.component), Text(_n(row.tensors)), Text(_n(row.stored_bytes)), Text(_n(row.logical_params)))
    yield t
    if table.unmapped:
        yield Text(safe(f"not filed under a component: {len(table.unmapped)}+ tensors (first: {table.unmapped[0]})"))


class _Tree:
    """A root and two levels drawn exactly as rich's Tree draws them, line by line, when
    every line fits the width (always on a pipe). rich's own pass lays out every node as a
    wrappable block (~25 ms for the ~400 nodes of a full checkpoint); anything else that
    changes the drawing (a line to wrap, ASCII guides, a styled theme) goes to rich."""

    def __init__(self, root: str, nodes: list[tuple[str, list[str]]]) -> None:
        self.root, self.nodes = root, nodes

    def tree(self) -> Tree:
        t = Tree(self.root)
        for label, children in self.nodes:
            branch = t.add(label)
            for child in children:
                branch.add(child)
        return t

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        plain = not (options.ascii_only or options.legacy_windows or console.get_style("tree")
                     or console.get_style("tree.line"))
        if plain:
            lines = []
            render = console.render_str
            root = render(self.root, highlight=False)
            last_node = len(self.nodes) - 1
            for i, (label, children) in enumerate(self.nodes):
                lines.append((("└── " if i == last_node else "├── ",), render(label, highlight=False)))
                stem = "    " if i == last_node else "│   "
                last_child = len(children) - 1
                lines.extend(((stem, "└── " if j == last_child else "├── "), render(child, highlight=False))
                             for j, child in enumerate(children))
            # each guide is 4 cells; a label wider than the rest of the line would wrap, and one of
            # two lines (safe() leaves none) would need a guide on its second
            plain = not any(4 * len(guides) + text.cell_len > options.max_width or "\n" in text.plain
                            for guides, text in [((), root), *lines])
        if not plain:
            yield self.tree()
            return
        new_line = Segment.line()
        # rich's Tree ends each guide with this style (no bold, no double underline) too
        guide = Style(bold=False, underline2=False)
        yield from root.render(console, end="")
        yield new_line
        for guides, text in lines:
            for g in guides:  # one segment per level, as rich yields them
                yield Segment(g, guide)
            yield from text.render(console, end="")
            yield new_line


def _tree(r: InspectReport) -> Iterator[Any]:
    nodes = [(f"{safe(node.label)}  [dim]{safe(node.detail)}[/]",
              [f"{safe(child.label)}  [dim]{safe(child.detail)}[/]" for child in node.children])
             for node in r.tree()]
    yield Text("")
    yield _Tree("[bold]tensors[/] (repeated layers collapsed)", nodes)


def _rows(r: InspectReport, limit: int, filters: str) -> Iterator[Any]:
    rows = r.rows or []
    t = Table(title=f"Tensors ({safe(filters) or 'all'}): {len(rows):,}", title_justify="left", show_edge=False)
    for col in ("name", "dtype", "shape", "bytes", "shard"):
        t.add_column(col, justify="right" if col == "bytes" else "left", overflow="fold")
    for row in rows[:limit]:
        t.add_row(safe(row.name), row.dtype, str(list(row.shape)), _n(row.bytes), safe(row.shard))
    yield Text("")
    yield t
    if len(rows) > limit:
        yield Text(f"... {len(rows) - limit:,} more (--limit N, or --json for all)")


class _Grid:
    """A table of one-line plain cells, left-justified, drawn exactly as rich's Table draws it with
    show_edge=False (its title above, the heavy head box), line by line, when it fits the width.
    rich's own pass measures, wraps and aligns every cell (~20 ms for the ~90 rows of a full
    checkpoint's HC table); anything else (a row to wrap, ASCII boxes, a cell that is not plain
    ASCII) goes to rich."""

    def __init__(self, title: str, headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
        self.title, self.headers, self.rows = title, headers, rows

    def table(self) -> Table:
        t = Table(title=self.title, title_justify="left", show_edge=False)
        for col in self.headers:
            t.add_column(col)
        for row in self.rows:
            t.add_row(*map(Text, row))  # Text: no markup or emoji codes to parse (a name stays as written)
        return unclipped(t)

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        cells = [self.headers, *self.rows]
        widths = [max(map(len, column)) + 2 for column in zip(*cells)]  # 1 of padding a side
        table_width = sum(widths) + len(widths) - 1
        if (options.ascii_only or options.legacy_windows or table_width > options.max_width
                or not all(c.isascii() and c.isprintable() for row in cells for c in row)):
            yield self.table()
            return
        # as Table.__rich_console__ and Table._render lay out this case
        render_options = options.update(width=table_width, highlight=False, height=None)
        title = console.render_str(self.title, style=Style.pick_first(None, "table.title"), highlight=False)
        yield from console.render(title, options=render_options.update(justify="left"))
        head_style = console.get_style("table.header")
        border = console.get_style("")
        body_style = console.get_style("") + console.get_style(Style.null())
        new_line = Segment.line()
        for first, row in ((True, self.headers), *((False, row) for row in self.rows)):
            style = head_style if first else body_style
            pad = Segment(" ", style)
            bar = Segment("┃" if first else "│", border)
            for i, (cell, width) in enumerate(zip(row, widths)):
                if i:
                    yield bar
                yield pad
                yield Segment(cell.ljust(width - 2), head_style if first else None)
                yield pad
            yield new_line
            if first:
                yield Segment("╇".join("━" * w for w in widths), border)
                yield new_line


def _hc_table(r: InspectReport) -> Iterator[Any]:
    rows = []
    for e in r.hc:
        diag = (" ".join(f"{e.comb_from_base[j][j]:.3f}" for j in range(e.hc))
                if isinstance(e, HcSplitEntry) else "-")
        label = str(e.layer) if e.name == f"layers.{e.layer}" else f"{e.layer} {plain(e.name)}"
        rows.append((label, e.site, " ".join(f"{x:.3g}" for x in e.scale), diag))
    yield Text("")
    yield _Grid("Hyper-connections (--hc-layer L for the full split; --json for every value)",
                ("layer", "site", "scale", "comb diagonal, base alone"), rows)


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


def _findings(r: InspectReport) -> Iterator[Any]:
    fs = r.findings or []
    errors = sum(f.more or 1 for f in fs if f.severity == "error")  # a finding that counts others stands for them
    warnings = sum(f.more or 1 for f in fs) - errors
    if not fs:
        yield markup("\n[green]verify: clean[/] (index, headers, HC tensors"
                               + (", config inventory)" if r.ckpt.config else "; no config to check against)"))
        return
    t = Table(title=f"verify: {errors:,} errors, {warnings:,} warnings", title_justify="left", show_edge=False)
    for col in ("severity", "code", "message"):
        t.add_column(col, overflow="fold")
    shown: dict[str, int] = {}
    listed: dict[str, int] = {}  # what --json lists: all, or the first of a code past verify's cap
    for f in fs:
        shown[f.code] = shown.get(f.code, 0) + (f.more or 1)
        if f.more:
            continue
        listed[f.code] = listed.get(f.code, 0) + 1
        if listed[f.code] <= FINDINGS_SHOWN_PER_CODE:
            color = "red" if f.severity == "error" else "yellow"
            t.add_row(f"[{color}]{f.severity}[/]", f.code, safe(f.message))
    for code, n in shown.items():
        if n > FINDINGS_SHOWN_PER_CODE:
            more = n - FINDINGS_SHOWN_PER_CODE
            lists = f"all {n:,}" if listed[code] == n else f"the first {listed[code]:,}"
            t.add_row("", code, f"... and {more:,} more {code} findings (--json lists {lists})")
    yield Text("")
    yield t


def renderables(r: InspectReport, *, limit: int = 50, detail: bool = False, filters: str = "") -> Iterator[Any]:
    yield from _summary(r)
    yield from _tree(r)
    if r.rows is not None:
        yield from _rows(r, limit, filters)
    if r.hc:
        yield from (_hc_detail(r) if detail else _hc_table(r))
    elif r.hc_sites:
        yield Text(f"\n{r.hc_sites} HC sites whose tensors yield no values (incomplete, not F32, or shapes "
                   "past the bounds; --verify says which)")
    else:
        yield Text("\nno hc_* tensors in this checkpoint")
    if r.findings is not None:
        yield from _findings(r)
