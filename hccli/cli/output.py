"""The only place that prints: rich renderables for people, JSON for scripts.

Numbers are never cut: piped output is not wrapped at all (a line there is data),
and on a terminal a table column too narrow for its cells folds them onto a
second line instead of ending them in "...".
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator

from hccli.jsonable import to_jsonable  # noqa: F401 - the output layer's one converter, re-exported

if TYPE_CHECKING:  # rich loads with the first console: `--json` output never needs one
    from rich.console import Console
    from rich.text import Text

_stdout: Console | None = None
_stderr: Console | None = None


# Wide enough that no real line wraps; rich pads nothing to it (tables are not expanded).
_PIPE_WIDTH = 100_000


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
        if not _stdout.is_terminal:
            _stdout = cls(highlight=False, soft_wrap=False, emoji=False, width=_PIPE_WIDTH)
    return _stdout


def err_console() -> Console:
    global _stderr
    if _stderr is None:
        from rich.console import Console

        _stderr = Console(stderr=True, highlight=False, emoji=False)
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


def emit_json(obj: Any) -> None:
    """Write one JSON document to stdout (no rich markup, no wrapping)."""
    text = json.dumps(to_jsonable(obj), indent=2, allow_nan=False) + "\n"
    with _writing_stdout():
        sys.stdout.write(text)
        sys.stdout.flush()


def unclipped(r: Any) -> Any:
    # A column's default overflow ends a long cell in "..."; a number cut that way is a
    # wrong number, so every table here folds instead.
    from rich.table import Table  # here, not at import: count-params starts without it

    if isinstance(r, Table):
        for col in r.columns:
            if col.overflow in ("ellipsis", "crop"):
                col.overflow = "fold"
            col.no_wrap = False
    return r


def show(*renderables: Any) -> None:
    with _writing_stdout():
        for r in renderables:
            console().print(unclipped(r))


def note(text: str, *, wrap: bool = True) -> None:
    """A side remark for people, on stderr so that stdout stays clean. wrap=False for a
    line that is data (a file name and its size): a script reads it whole."""
    err_console().print(text, soft_wrap=not wrap)


def config_warning(unusable: Any) -> None:
    """The one line every command shows for a checkpoint's config.json it set aside
    (a config.ConfigUnusable; None: nothing to say), whole on one line."""
    if unusable is not None:
        note(f"[yellow]warning:[/] {safe(unusable.line)}", wrap=False)


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
