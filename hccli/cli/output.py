"""The only place that prints: rich renderables for people, JSON for scripts.

The one sink: a command hands its one result object (a frozen dataclass from its core room) to
`emit`, which writes it as JSON through the one encoder (base/jsonable.py: its fields, non-finite
numbers as "nan", "inf", "-inf"), or prints what the command's cli/render/ module draws from it.

The one width rule, for stdout and stderr alike: `COLUMNS` when it is set (on a terminal or
not), otherwise a terminal's own width; piped, 120 for prose, and a table row (or a tree's line)
stays one long record, whole, for a script to read (table rows are told by their box-drawing
characters). Within a width a table fits: its columns give way by priority, a wrapping column
(prose) down to its widest word first, then names, folded onto further lines; a number (a
right-justified column), a word of prose and a column its renderer gave a min_width (a JSON
key) never give way: a table that still needs more than the width is split into tables of
fewer columns, each led by the first (the row's name), and runs past the width only where one
column of them alone is wider. A table's
title is a line of prose above it, wrapped to the width. A word of prose longer than the width
runs past it whole; nothing ends in "..." (rich's cropping is off). The boundary's `hc: error:`
line and each `warning:` line are one line whatever the width: a record that scripts grep.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from hccli.base.jsonable import to_jsonable  # noqa: F401 - the output layer's one converter, re-exported

if TYPE_CHECKING:  # rich loads with the first console: `--json` output never needs one
    from rich.console import Console
    from rich.text import Text

_stdout: Console | None = None
_stderr: Console | None = None


# The most COLUMNS is taken at, and the most a piped table row runs to.
_PIPE_WIDTH = 100_000
# Piped, prose wraps here: a line that long still reads in a pager or a log, and no summary
# of ours is a record a script would need whole (--json is that).
PIPED_PROSE = 120
# A name column (or prose below its widest word) gives way down to this many characters.
_NAME_FLOOR = 12


def width_for(is_terminal: bool) -> int | None:
    """The one width rule (see the module's docstring): COLUMNS when set, a terminal's own width
    (None: rich asks the terminal), or 120 for prose when piped."""
    return _columns() or (None if is_terminal else PIPED_PROSE)


def _columns() -> int | None:
    import os

    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and columns.isascii() and int(columns) > 0:
        return min(int(columns), _PIPE_WIDTH)
    return None


def _whole_rows(con: Console) -> bool:
    """Piped with no COLUMNS: a table row is a record, drawn whole at the width it needs."""
    return not con.is_terminal and _columns() is None


def _console_class() -> type:
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich would exit 1 here, which reads as "verify found errors"; the error
            # boundary ends a closed pipe (`hc ... | head -1`) with 0 instead.
            self.quiet = True
            raise BrokenPipeError

    return _Console


def console() -> Console:
    global _stdout
    if _stdout is None:
        cls = _console_class()
        _stdout = cls(highlight=False, soft_wrap=False, emoji=False)
        _stdout.width = width_for(_stdout.is_terminal) or _stdout.width
    return _stdout


def err_console() -> Console:
    global _stderr
    if _stderr is None:
        from rich.console import Console

        _stderr = Console(stderr=True, highlight=False, emoji=False)
        _stderr.width = width_for(_stderr.is_terminal) or _stderr.width
    return _stderr


@contextmanager
def _writing_stdout() -> Iterator[None]:
    # An OSError on stdout (ENOSPC on a full disk, EIO) carries no file name; the error
    # boundary's line should still say where. A closed pipe stays a BrokenPipeError.
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), "standard output") from exc


def json_document(result: Any) -> Any:
    """A command's result object as the JSON values `--json` writes (a plot drawn from them draws
    what is printed). Only a result object: a dict assembled on the way would be a second builder."""
    if not dataclasses.is_dataclass(result) or isinstance(result, type):
        raise TypeError(f"--json writes a command's result object (a dataclass), not a {type(result).__name__}")
    return to_jsonable(result)


def emit_json(result: Any) -> None:
    """Write a result object as one JSON document to stdout (no rich markup, no wrapping)."""
    text = json.dumps(json_document(result), indent=2, allow_nan=False) + "\n"
    with _writing_stdout():
        sys.stdout.write(text)
        sys.stdout.flush()


def emit(result: Any, json_out: bool, render: Callable[[], Iterable[Any]]) -> None:
    """The one sink of a command's result: its JSON document, or for people what render() draws
    from it (called only then: `--json` never loads the renderers, nor rich)."""
    if json_out:
        emit_json(result)
    else:
        show(*render())


def _measure(con: Console, cell: Any) -> tuple[int, int]:
    from rich.measure import Measurement

    m = Measurement.get(con, con.options.update_width(_PIPE_WIDTH), cell)  # unclamped by the width
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


def _plan(r: Any) -> tuple[list[int], list[list[int]], int]:
    """A table's columns: their natural widths (the widest cell, whole), the floors they give way
    to, stage by stage (see the module's docstring), and the padding and separators around them."""
    con = console()
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


def fitted(r: Any, width: int) -> Any:
    """A table under the width rule, its columns' widths set so that it fits `width` where its
    numbers allow. Other renderables pass as they are."""
    from rich.table import Table  # here, not at import: count-params starts without it

    if not isinstance(r, Table) or not r.columns:
        return r
    natural, stages, overhead = _plan(r)
    widths = list(natural)
    excess = sum(widths) + overhead - width
    for floors in stages:
        excess = _give_way(widths, [min(f, w) for f, w in zip(floors, widths)], excess)
    for col, w, n in zip(r.columns, widths, natural):
        col.width = w
        col.overflow = "fold"  # a name narrower than itself folds whole onto the next line
        col.no_wrap = w >= n and col.no_wrap
    return r


def _least(r: Any) -> int:
    _, stages, overhead = _plan(r)
    return sum(stages[-1]) + overhead


def split(r: Any, width: int) -> list[Any]:
    """A table whose numbers alone need more than `width`, as tables of fewer columns that fit,
    each led by the first column (the row's name): a wide table's figures are never cut."""
    from rich.table import Table

    if not isinstance(r, Table) or len(r.columns) < 3 or _least(r) <= width:
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
        if len(chunk) > 1 and _least(part([*chunk, i])) > width:
            parts.append(part(chunk))
            chunk = [0]
        chunk.append(i)
    return [*parts, part(chunk)]


def _print(con: Console, r: Any) -> None:
    """One renderable under the width rule: a table, a tree piped (whole rows) or one that needs
    more than the width (a word longer than it, numbers wider than it) is drawn at the width it
    needs, past the edge, whole."""
    from rich.measure import Measurement

    width = con.width
    whole = _whole_rows(con) and type(r).__name__ in ("Table", "Tree")
    m = Measurement.get(con, con.options.update_width(_PIPE_WIDTH), r)
    need = m.maximum if whole else m.minimum
    if need > width:
        con.width = need  # (print itself takes no width past the console's)
        try:
            con.print(r, crop=False)
        finally:
            con.width = width
        return
    con.print(r, crop=False)


def _titled(r: Any) -> list[Any]:
    """A table's title as a line of prose of its own above it: wrapped to the width, not to the
    table's (a piped table's row runs long; a fitted table may be narrow)."""
    from rich.table import Table
    from rich.text import Text

    if not isinstance(r, Table) or not r.title:
        return [r]
    title = r.title if isinstance(r.title, Text) else Text.from_markup(r.title, style="table.title", emoji=False)
    r.title = None
    return [title, r]


def show(*renderables: Any) -> None:
    con = console()
    with _writing_stdout():
        for r in renderables:
            for part in _titled(r):
                if _whole_rows(con):
                    _print(con, part)
                    continue
                for i, piece in enumerate(split(part, con.width)):
                    if i:
                        con.print()  # a blank line between the parts of a split table
                    _print(con, fitted(piece, con.width))


def note(text: str, *, wrap: bool = True) -> None:
    """A side remark for people, on stderr so that stdout stays clean. wrap=False for a
    line that is data (a file name and its size): a script reads it whole."""
    if wrap:
        _print(err_console(), text)
    else:
        err_console().print(text, soft_wrap=True)


def config_warning(unusable: Any) -> None:
    """The one line every command shows for a checkpoint's config.json it set aside
    (a config.ConfigUnusable; None: nothing to say), whole on one line."""
    if unusable is not None:
        note(f"[yellow]warning:[/] {safe(unusable.line)}", wrap=False)


# damage lines shown (the rest counted): --json and --verify list them all
DAMAGE_SHOWN = 5


def damage_warnings(findings: Any, unusable: Any = None) -> None:
    """The lines every command shows for what opening found wrong (checkpoint/verify/damage.py: a
    shard named and not there, a config of another model), one `warning:` line each, after the
    line of a config.json set aside (config_warning). A config of another model that was set
    aside is said by that line: its finding is not said twice."""
    config_warning(unusable)
    shown = [f for f in findings if not (unusable is not None and f.code == "config_mismatch")]
    for f in shown[:DAMAGE_SHOWN]:
        note(f"[yellow]warning:[/] {safe(f.message)}", wrap=False)  # one line each: it names a file
    if len(shown) > DAMAGE_SHOWN:
        note(f"[yellow]warning:[/] ... and {len(shown) - DAMAGE_SHOWN} more (--json lists all)")


def plain(text: str) -> str:
    """Escape control characters in text that came from a file or server (for plain echo)."""
    return "".join(
        ch if (ch.isprintable() or ch == " ") else ch.encode("unicode_escape").decode("ascii") for ch in text
    )


def markup(text: str, style: str = "") -> Text:
    """Our markup ([bold], [yellow]...) made into rich Text, with rich's emoji codes off: a name
    like `x:smile:y` from a file is printed as written (safe() escapes the markup in it; the
    consoles here have emoji codes off for plain strings too). No string of ours holds a code."""
    from rich.text import Text

    return Text.from_markup(text, style=style, emoji=False)


def safe(text: str) -> str:
    """Escape rich markup and control characters in text that came from a file."""
    from rich.markup import escape

    return escape(plain(text))


class _NoProgress:
    def __call__(self, done: int, total: int, what: str = "") -> None:
        pass


@contextmanager
def progress_bar(description: str, enabled: bool = True, *, in_bytes: bool = False
                 ) -> Iterator[Callable[..., None]]:
    """A transient progress bar on stderr; yields tick(done, total, what="").

    Shown only on a terminal, so that pipes and tests see clean output. in_bytes: done and total
    are bytes, shown as such with the time left (work of very unequal items, where a count of
    them would say little)."""
    if not enabled or not err_console().is_terminal:
        yield _NoProgress()
        return
    from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    columns = [TextColumn("{task.description}"), BarColumn(), DownloadColumn() if in_bytes else MofNCompleteColumn(),
               TimeElapsedColumn(), *([TimeRemainingColumn()] if in_bytes else [])]
    with Progress(*columns, console=err_console(), transient=True) as prog:
        task = prog.add_task(description, total=None)

        def tick(done: int, total: int, what: str = "") -> None:
            prog.update(task, completed=done, total=total,
                        description=f"{description} {what}".rstrip())

        yield tick
