"""The only place that prints: rich renderables for people, JSON for scripts.

The one sink: a command hands its one result object (a frozen dataclass from its core room) to
`emit`, which writes it as JSON through the one encoder (base/jsonable.py: its fields, non-finite
numbers as "nan", "inf", "-inf") inside the one envelope (json_document: schema version, command,
exit code, verdict, warnings, findings, then the fields), or prints what the command's cli/render/
module draws from it. Every `warning:` line goes through `warn`, which keeps it for the envelope.

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
from hccli.cli.tables import PIPE_WIDTH as _PIPE_WIDTH, fitted, split

if TYPE_CHECKING:  # rich loads with the first console: `--json` output never needs one
    from rich.console import Console
    from rich.text import Text

_stdout: Console | None = None
_stderr: Console | None = None


# Piped, prose wraps here: a line that long still reads in a pager or a log, and no summary
# of ours is a record a script would need whole (--json is that).
PIPED_PROSE = 120


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


# The envelope's version: its keys and each command's body keys are added to, never renamed or
# removed, within one version (docs/json.md; docs/schemas/).
SCHEMA_VERSION = 1
ENVELOPE_KEYS = ("schema_version", "command", "exit_code", "verdict", "warnings", "findings")

# what this invocation said on stderr as `warning:` lines, for its JSON document's `warnings`
# (begun afresh by the error boundary for each invocation: CliRunner runs many in one process)
_warnings: list[str] = []


def begin_invocation() -> None:
    _warnings.clear()


def warn(text: str) -> None:
    """The one `warning:` line on stderr (text from a file or server: escaped here), whole on one
    line (it names a file), and kept for the JSON document's `warnings`."""
    _warnings.append(plain(text))
    note(f"[yellow]warning:[/] {safe(text)}", wrap=False)


def json_document(result: Any, command: str) -> dict[str, Any]:
    """A command's result object as the document `--json` writes: the envelope (ENVELOPE_KEYS, in
    that order), then the result's own fields. The result object says its exit code and verdict
    (properties `exit_code`, 0 where it has none, and `verdict`, a word of its class's VERDICTS or
    None: left out) and its findings (a `findings` field or property, Finding objects); the
    warnings are this invocation's. Only a result object: a dict assembled on the way would be a
    second builder."""
    if not dataclasses.is_dataclass(result) or isinstance(result, type):
        raise TypeError(f"--json writes a command's result object (a dataclass), not a {type(result).__name__}")
    body = to_jsonable(result)
    findings = body.pop("findings") if "findings" in body else to_jsonable(list(getattr(result, "findings", ())))
    clash = [k for k in ENVELOPE_KEYS if k in body]
    if clash:  # a field of the body would be overwritten, or would say the envelope's word another way
        raise TypeError(f"{type(result).__name__} has fields the envelope owns: {', '.join(clash)}")
    verdict = getattr(result, "verdict", None)
    allowed = getattr(result, "VERDICTS", ())
    if verdict is not None and verdict not in allowed:
        raise TypeError(f"{type(result).__name__}.verdict {verdict!r}: not one of its VERDICTS {allowed}")
    head: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "command": command,
                            "exit_code": int(getattr(result, "exit_code", 0))}
    if verdict is not None:
        head["verdict"] = verdict
    head["warnings"] = list(_warnings)
    head["findings"] = findings
    return {**head, **body}


def emit_json(result: Any, command: str) -> None:
    """Write a result object as one JSON document to stdout (no rich markup, no wrapping); strict
    JSON: a non-finite number left by the encoder would be an error here, never NaN in the text."""
    text = json.dumps(json_document(result, command), indent=2, allow_nan=False) + "\n"
    with _writing_stdout():
        sys.stdout.write(text)
        sys.stdout.flush()


def emit(result: Any, json_out: bool, render: Callable[[], Iterable[Any]], *, command: str) -> None:
    """The one sink of a command's result: its JSON document (`command`: its name in the
    envelope, "cache list" for a sub-command), or for people what render() draws from it (called
    only then: `--json` never loads the renderers, nor rich)."""
    if json_out:
        emit_json(result, command)
    else:
        show(*render())


def _print(con: Console, r: Any) -> None:
    """One renderable under the width rule: a table, a tree piped (whole rows) or one that needs
    more than the width (a word longer than it, numbers wider than it) is drawn at the width it
    needs, past the edge, whole."""
    from rich.measure import Measurement

    width = con.width
    if _whole_rows(con) and type(r).__name__ in ("Table", "Tree"):
        # A table (expand off) or a tree takes no more than its widest row: given the measuring
        # width it is drawn at exactly the width it needs, with no measuring pass of its own first
        need = _PIPE_WIDTH
    else:
        need = Measurement.get(con, con.options.update_width(_PIPE_WIDTH), r).minimum
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
                for i, piece in enumerate(split(con, part, con.width)):
                    if i:
                        con.print()  # a blank line between the parts of a split table
                    _print(con, fitted(con, piece, con.width))


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
        warn(unusable.line)


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
        warn(f.message)
    if len(shown) > DAMAGE_SHOWN:
        warn(f"... and {len(shown) - DAMAGE_SHOWN} more (--json lists all)")


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
    are bytes, shown as such with the rate and the time left (work of very unequal items, where a
    count of them would say little)."""
    if not enabled or not err_console().is_terminal:
        yield _NoProgress()
        return
    from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn, TransferSpeedColumn)
    from rich.table import Column

    # one line at any width: the description (a tensor's name, say) gives way, cut with an ellipsis
    what = TextColumn("{task.description}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis"))
    columns = [what, BarColumn(bar_width=20), DownloadColumn() if in_bytes else MofNCompleteColumn(),
               *([TransferSpeedColumn()] if in_bytes else []), TimeElapsedColumn(),
               *([TimeRemainingColumn()] if in_bytes else [])]
    with Progress(*columns, console=err_console(), transient=True, expand=True) as prog:
        task = prog.add_task(description, total=None)

        def tick(done: int, total: int, what: str = "") -> None:
            prog.update(task, completed=done, total=total,
                        description=f"{description} {what}".rstrip())

        yield tick
