"""Rich renderables for `hc diff` (built here, printed by output.show)."""

from __future__ import annotations

from typing import Any, Iterator

from rich.table import Table
from rich.text import Text

from hccli.base.words import plural
from hccli.cli.output import markup, plain, safe
from hccli.diffing.diff import DIFFERS, EQUAL, MISSING_A, MISSING_B, NOT_IN_DIALECT, SHAPE, TRANSPOSED, WITHIN, DiffReport

_STATUS = {
    EQUAL: "[green]identical[/]",
    WITHIN: "[green]within tol[/]",
    DIFFERS: "[red]differs[/]",
    MISSING_A: "[red]missing in A[/]",
    MISSING_B: "[red]missing in B[/]",
    TRANSPOSED: "[red]transposed[/]",
    SHAPE: "[red]other shape[/]",
    NOT_IN_DIALECT: "[dim]not in {side}'s dialect[/]",
}


def _g(x: float | None) -> str:
    return "" if x is None else f"{x:.3g}"


def _shape(s) -> str:
    return "-" if s is None else "[" + ", ".join(map(str, s)) + "]"


def _status(r) -> str:
    text = _STATUS[r.status].format(side="B" if r.stored_b is None else "A")
    return text + (f" {_shape(r.shape_a)} -> {_shape(r.shape_b)}" if r.status in (TRANSPOSED, SHAPE) else "")


def _effect(r) -> str:
    e = r.effect
    if e is None:
        return ""
    worst = [x for x in (e.pre, e.post, e.comb) if x is not None]
    return _g(float("nan") if any(x != x for x in worst) else max(worst)) + (" b" if e.via.startswith("base") else
                                                                              " s")


def _pair(a: int, b: int, big: bool = False) -> str:
    def f(x: int) -> str:
        for unit, k in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
            if big and x >= k:
                return f"{x / k:.1f}{unit}"
        return f"{x:,}"
    return f(a) if a == b else f"{f(a)}/{f(b)}"


def _header(r: DiffReport) -> Iterator[Any]:
    m = r.model
    yield markup(f"A [bold]{safe(r.label_a)}[/] ({r.dialect_a}), B [bold]{safe(r.label_b)}[/] "
                           f"({r.dialect_b})")
    yield Text(f"same model: hc_mult {m['hc_mult']}, {m['n_layers']} layers, dim {m['dim']} "
               f"(A from {m['source_a']}, B from {m['source_b']})")
    tol = "bit-identical" if r.atol == 0 and r.rtol == 0 else f"|b - a| <= {r.atol:g} + {r.rtol:g}|a|"
    yield Text(f"tolerance: {tol}; effect: the largest difference in the pre/post weights and comb matrix, "
               f"from the base alone (b) or from {r.sample_tokens} sample tokens, seed {r.seed}, through each "
               "side's whole site (s)")
    for n in r.notes:
        yield markup(f"[yellow]note:[/] {safe(n)}")
    if not r.selection.everything:
        others = "" if r.values is None else f", the values of {len(r.values):,} of {r.shared_others:,} other shared tensors"
        yield Text(f"selected {r.selection.describe()}: {r.hc_compared:,} of {r.hc_tensors:,} HC tensors{others}; "
                   "the inventory is of the whole checkpoints")


def _types(x) -> str:
    a, b = safe(x.dtype_a or "-"), safe(x.dtype_b or "-")
    return a if a == b else f"{a}/{b}"


def _sites(r: DiffReport, limit: int) -> Iterator[Any]:
    compared = [x for x in r.sites if x.status != NOT_IN_DIALECT]
    same = [x for x in compared if x.status == EQUAL]
    shown = [x for x in compared if x.status != EQUAL][:limit]
    if shown:
        t = Table(show_edge=False, title="Hyper-connections, worst first (A / B where they differ)",
                  title_justify="left")
        for col in ("tensor", "status", "max abs", "max rel", "type A/B", "effect"):
            t.add_column(col, justify="right" if col in ("max abs", "max rel", "effect") else "left")
        for x in shown:
            t.add_row(safe(x.name), _status(x), _g(x.max_abs), _g(x.max_rel), _types(x), _effect(x))
        yield t
    rest = len(compared) - len(same) - len(shown)
    if rest > 0:
        yield Text(f"... {plural(rest, 'more HC tensor')} not bit-identical (--limit N, or --json for all)")
    if same:
        yield Text(f"{plural(len(same), 'HC tensor')} bit-identical" + ("" if shown else " (all of them)"))
    absent = [x for x in r.sites if x.status == NOT_IN_DIALECT]
    if absent:
        side = "B" if absent[0].stored_b is None else "A"
        layers = sorted({x.layer for x in absent})
        yield Text(f"{plural(len(absent), 'HC tensor')} of layers {layers[0]}-{layers[-1]} are not in {side}, whose "
                   "dialect cannot hold them (the DSpark/MTP stages): not compared, not counted as differences")
    counts = r.hc_counts
    yield markup(f"HC: {plural(counts.compared, 'tensor')} compared{_where(counts.by_component)}, " + (
        f"[red]{counts.not_kept:,} not kept[/] (exit 1)" if counts.not_kept else "[green]every value kept[/]"))


def _where(by_component: dict[str, int]) -> str:
    """Where the inventory table below counts the HC tensors, when that is not one row: a stage's
    HC tensors sit in its dspark row, with the rest of the stage."""
    if len(by_component) < 2:
        return ""
    rows = [f"{n:,} in its {c} row" if i else f"{n:,} in the inventory's {c} row"
            for i, (c, n) in enumerate(by_component.items())]
    return " (" + ", ".join(rows) + ")"


def _components(r: DiffReport) -> Iterator[Any]:
    t = Table(show_edge=False, title="Inventory by component (canonical names)", title_justify="left")
    for col in ("component", "tensors A/B", "only A/B", "changed", "bytes A/B", "params A/B"):
        t.add_column(col, justify="left" if col == "component" else "right")
    for c in r.components:
        t.add_row(c.component, _pair(c.tensors_a, c.tensors_b), f"{c.only_in_a:,}/{c.only_in_b:,}",
                  f"{c.changed:,}", _pair(c.bytes_a, c.bytes_b, True), _pair(c.params_a, c.params_b, True))
    yield t
    compared = "of every tensor (--values all)" if r.values is not None else "of HC tensors; --values all: all"
    yield Text(f"changed: tensors in both with another dtype, shape or values beyond tolerance (values {compared})")
    for side, names in (("A", r.only_in_a), ("B", r.only_in_b)):
        if names:
            shown = ", ".join(plain(n) for n in names[:3])  # Text: no markup to escape, names as written
            yield Text(f"only in {side}: {plural(len(names), 'tensor')}, e.g. {shown}")


def _values(r: DiffReport, limit: int) -> Iterator[Any]:
    if r.values is None:
        return
    bad = [v for v in r.values if v.status not in (EQUAL, WITHIN)]
    unread = sum(v.status not in (EQUAL, WITHIN, DIFFERS) for v in r.values)
    title = (f"Values of {r.hc_compared + len(r.values):,} tensors ({r.hc_compared:,} HC, above, and "
             f"{len(r.values):,} others): {r.not_kept:,} not kept{' (exit 1)' if r.not_kept else ''}"
             f"{f', {unread:,} others not compared' if unread else ''}")
    yield Text(title)  # not the table's title: that wraps at the table's width
    if not bad:
        return
    t = Table(show_edge=False)
    for col in ("tensor", "component", "status", "max abs", "max rel"):
        t.add_column(col)
    for v in bad[:limit]:
        t.add_row(safe(v.name), v.component, safe(v.status), _g(v.max_abs), _g(v.max_rel))
    yield t
    if len(bad) > limit:
        yield Text(f"... {len(bad) - limit:,} more not equal (--limit N, or --json for all)")


def renderables(r: DiffReport, limit: int = 20) -> list[Any]:
    out: list[Any] = [*_header(r), *_sites(r, limit), *_components(r), *_values(r, limit)]
    out.append(Text(f"read {r.bytes_read_a:,} bytes of values from A and {r.bytes_read_b:,} from B"))
    return out
