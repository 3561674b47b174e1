"""The only place that prints: rich renderables for people, JSON for scripts."""

from __future__ import annotations

import json
import sys
from typing import Any

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


def emit_json(obj: Any) -> None:
    """Write one JSON document to stdout (no rich markup, no wrapping)."""
    sys.stdout.write(json.dumps(obj, indent=2, allow_nan=False) + "\n")
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
