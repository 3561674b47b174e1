"""Tables under the width rule (cli/output.py's docstring says it): the widths a table's
columns give way to, and a table too wide for its numbers split into tables that fit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich loads with the first console
    from rich.console import Console

# The most COLUMNS is taken at, and the most a piped table row runs to.
PIPE_WIDTH = 100_000
# A name column (or prose below its widest word) gives way down to this many characters.
_NAME_FLOOR = 12


def _measure(con: Console, cell: Any) -> tuple[int, int]:
    from rich.measure import Measurement

    m = Measurement.get(con, con.options.update_width(PIPE_WIDTH), cell)  # unclamped by the width
    return m.minimum, m.maximum


def _give_way(widths: list[int], floors: list[int], excess: int) -> int:
    """Narrow the widest column above its floor, one character at a time, until `excess` is gone
    (or no column can give more); returns the excess left."""
    while excess > 0:
        room = [(w, i) for i, (w, f) in enumerate(zip(widths, floors)) if w > f]
        if not room:
            break
        widths[max(room)[1]] -= 1
        excess -= 1
    return excess


def _plan(con: Console, r: Any) -> tuple[list[int], list[list[int]], int]:
    """A table's columns: their natural widths (the widest cell, whole), the floors they give way
    to, stage by stage (see the module's docstring), and the padding and separators around them."""
    cols = r.columns
    sizes = [[_measure(con, cell) for cell in (col.header, *col._cells) if cell is not None] or [(0, 0)]
             for col in cols]
    words = [max(lo for lo, _ in s) for s in sizes]  # a column's widest word
    natural = [max(hi for _, hi in s) for s in sizes]
    header = [_measure(con, col.header)[0] if col.header else 0 for col in cols]
    number = [col.justify == "right" for col in cols]
    prose = [not (n or col.no_wrap) for n, col in zip(number, cols)]
    name = [min(n, max(h, _NAME_FLOOR)) for n, h in zip(natural, header)]
    # a number stays whole; its header may wrap at its spaces ("max |diff| vs torch")
    figure = [max([h] + [_measure(con, cell)[1] for cell in col._cells]) for h, col in zip(header, cols)]
    # 1. prose wraps at spaces; 2. names fold; numbers, words of prose and a column the renderer
    # gave a min_width (a JSON key) never give way: such a table is split instead (split())
    stages = [[w if p else (f if num else n) for w, p, n, num, f in zip(words, prose, natural, number, figure)],
              [f if num else w if p else min(w, nm) for f, num, p, w, nm in zip(figure, number, prose, words, name)]]
    stages = [[max(f, min(col.min_width or 0, n)) for f, col, n in zip(floors, cols, natural)] for floors in stages]
    return natural, stages, _measure(con, r)[1] - sum(natural)


def fitted(con: Console, r: Any, width: int) -> Any:
    """A table under the width rule, its columns' widths set so that it fits `width` where its
    numbers allow. Other renderables pass as they are."""
    from rich.table import Table  # here, not at import: count-params starts without it

    if not isinstance(r, Table) or not r.columns:
        return r
    natural, stages, overhead = _plan(con, r)
    widths = list(natural)
    excess = sum(widths) + overhead - width
    for floors in stages:
        excess = _give_way(widths, [min(f, w) for f, w in zip(floors, widths)], excess)
    for col, w, n in zip(r.columns, widths, natural):
        col.width = w
        col.overflow = "fold"  # a name narrower than itself folds whole onto the next line
        col.no_wrap = w >= n and col.no_wrap
    return r


def _least(con: Console, r: Any) -> int:
    _, stages, overhead = _plan(con, r)
    return sum(stages[-1]) + overhead


def split(con: Console, r: Any, width: int) -> list[Any]:
    """A table whose numbers alone need more than `width`, as tables of fewer columns that fit,
    each led by the first column (the row's name): a wide table's figures are never cut."""
    from rich.table import Table

    if not isinstance(r, Table) or len(r.columns) < 3 or _least(con, r) <= width:
        return [r]

    def part(indices: list[int]) -> Any:
        t = Table(show_edge=r.show_edge, box=r.box, show_header=r.show_header, header_style=r.header_style)
        for i in indices:
            c = r.columns[i]
            t.add_column(c.header, justify=c.justify, no_wrap=c.no_wrap, style=c.style, header_style=c.header_style,
                         min_width=c.min_width)
        for row in range(r.row_count):
            t.add_row(*(r.columns[i]._cells[row] for i in indices), style=r.rows[row].style,
                      end_section=r.rows[row].end_section)
        return t

    parts, chunk = [], [0]
    for i in range(1, len(r.columns)):
        if len(chunk) > 1 and _least(con, part([*chunk, i])) > width:
            parts.append(part(chunk))
            chunk = [0]
        chunk.append(i)
    return [*parts, part(chunk)]
