"""The only place that prints: rich renderables for people, JSON for scripts."""

from __future__ import annotations

import json
import math
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from rich.console import Console
from rich.markup import escape

_stdout: Console | None = None
_stderr: Console | None = None


def console() -> Console:
    global _stdout
    if _stdout is None:
        _stdout = Console(highlight=False, soft_wrap=False)
    return _stdout


def err_console() -> Console:
    global _stderr
    if _stderr is None:
        _stderr = Console(stderr=True, highlight=False)
    return _stderr


def _finite(obj: Any) -> Any:
    # JSON has no NaN/Infinity: a non-finite float (a damaged HC value, say) becomes
    # the string "nan", "inf" or "-inf", so that the document stays valid JSON.
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if obj != obj else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def emit_json(obj: Any) -> None:
    """Write one JSON document to stdout (no rich markup, no wrapping)."""
    try:
        text = json.dumps(obj, indent=2, allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(obj), indent=2, allow_nan=False)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def show(*renderables: Any) -> None:
    for r in renderables:
        console().print(r)


def note(text: str) -> None:
    """A side remark for people, on stderr so that stdout stays clean."""
    err_console().print(text)


def safe(text: str) -> str:
    """Escape rich markup and control characters in text that came from a file."""
    cleaned = "".join(
        ch if (ch.isprintable() or ch == " ") else ch.encode("unicode_escape").decode("ascii") for ch in text
    )
    return escape(cleaned)


class _NoProgress:
    def __call__(self, done: int, total: int, what: str = "") -> None:
        pass


@contextmanager
def progress_bar(description: str, enabled: bool = True) -> Iterator[Callable[..., None]]:
    """A transient progress bar on stderr; yields tick(done, total, what="").

    Shown only on a terminal, so that pipes and tests see clean output."""
    if not enabled or not err_console().is_terminal:
        yield _NoProgress()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console(), transient=True) as prog:
        task = prog.add_task(description, total=None)

        def tick(done: int, total: int, what: str = "") -> None:
            prog.update(task, completed=done, total=total,
                        description=f"{description} {what}".rstrip())

        yield tick
