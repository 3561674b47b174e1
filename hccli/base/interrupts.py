"""Ctrl-C (SIGINT) around clean-up that must run to its end.

The first Ctrl-C raises KeyboardInterrupt where the program is, so that every
`except`/`finally` on the way out runs; a second one a few milliseconds later
would otherwise land inside that clean-up (a temporary directory half removed,
a traceback instead of the one-line report). Two tools, one rule:

- `deferred_sigint()` wraps clean-up: a SIGINT inside the block is held and
  handed to the handler that was in place once the block is over.
- `stop_once` is the handler of a process that stops at the first Ctrl-C (the
  `hc` console script): it raises KeyboardInterrupt once and from then on the
  process ignores SIGINT, so clean-up, the report and the interpreter's own
  teardown (where Python puts back the default, fatal, action) all finish. Once
  it has fired, the console script ends the process itself (`hccli.cli.app.main`):
  a KeyboardInterrupt that passed through an exec() of a string is taken by
  CPython for an unhandled one, and `python -m` would then die by SIGINT.

Python runs signal handlers in the main thread only, so outside it neither tool
changes anything (and nothing there can be interrupted by a KeyboardInterrupt).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator


def stop_once(signum: int, frame: Any) -> None:
    """A SIGINT handler: the first signal raises KeyboardInterrupt, every later one is ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def deferred_sigint() -> Iterator[None]:
    """Run the block to its end whatever SIGINTs arrive; one that did arrive is then handed to the
    previous handler (KeyboardInterrupt for Python's default, nothing once `stop_once` has fired).
    Nested blocks defer to the outermost one."""
    if not _in_main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous in (signal.SIG_IGN, None) or getattr(previous, "hc_deferring", False):
        yield  # nothing will interrupt the block, or an outer block already holds the signal
        return
    held: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        held.append(signum)

    hold.hc_deferring = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            if callable(previous):
                previous(signal.SIGINT, None)
            elif previous == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)  # the process asked for the default action: it ends
