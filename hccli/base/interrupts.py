"""Stop signals (Ctrl-C's SIGINT, and SIGTERM, SIGHUP) around clean-up that must run to its end.

The first Ctrl-C raises KeyboardInterrupt where the program is, so that every
`except`/`finally` on the way out runs; a second one a few milliseconds later
would otherwise land inside that clean-up (a temporary directory half removed,
a traceback instead of the one-line report). SIGTERM (`kill`, a service
manager, a CI timeout) and SIGHUP (the terminal closed) kill a process at once by
default, leaving its half-written temporaries; the `hc` console script makes
them one more way in to the same path: `Stopped`, a KeyboardInterrupt that
remembers its signal. Two tools, one rule:

- `deferred_sigint()` wraps clean-up: a SIGINT inside the block (and a SIGTERM or
  SIGHUP, where `stop_once` handles them) is held and handed to the handler that
  was in place once the block is over.
- `stop_once` is the handler of a process that stops at the first stop signal (the
  `hc` console script, `install`): it raises KeyboardInterrupt (Stopped for SIGTERM
  and SIGHUP) once and from then on the process ignores all of them, so clean-up,
  the report and the interpreter's own teardown (where Python puts back the
  default, fatal, action) all finish. Once it has fired, the console script ends
  the process itself (`hccli.cli.app.main`): a KeyboardInterrupt that passed
  through an exec() of a string is taken by CPython for an unhandled one, and
  `python -m` would then die by SIGINT.

Python runs signal handlers in the main thread only, so outside it neither tool
changes anything (and nothing there can be interrupted by a KeyboardInterrupt).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator

# SIGHUP does not exist on Windows
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
_fired: list[int] = []


class Stopped(KeyboardInterrupt):
    """A stop asked for by SIGTERM or SIGHUP: every clean-up a Ctrl-C runs runs for it too."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stop_once(signum: int, frame: Any) -> None:
    """A stop-signal handler: the first signal raises KeyboardInterrupt (Stopped but for SIGINT),
    every later one of STOP_SIGNALS that this handler took is ignored."""
    for s in STOP_SIGNALS:
        if signal.getsignal(s) is stop_once:
            signal.signal(s, signal.SIG_IGN)
    _fired.append(signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Stopped(signum)


def install() -> tuple[int, ...]:
    """Make stop_once the handler of each stop signal still at Python's default (one the parent
    made us ignore, as nohup does with SIGHUP or a shell with a background job's SIGINT, stays
    ignored); the signals it took."""
    taken = []
    for s in STOP_SIGNALS:
        if signal.getsignal(s) in (signal.default_int_handler, signal.SIG_DFL):
            signal.signal(s, stop_once)
            taken.append(s)
    return tuple(taken)


def fired() -> int | None:
    """The signal stop_once first fired for in this process, else None."""
    return _fired[0] if _fired else None


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def deferred_sigint() -> Iterator[None]:
    """Run the block to its end whatever SIGINTs arrive (SIGTERMs and SIGHUPs too, where stop_once
    handles them); one that did arrive is then handed to the previous handler (KeyboardInterrupt for
    Python's default, nothing once `stop_once` has fired). Nested blocks defer to the outermost one."""
    if not _in_main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    held_signals = [s for s, h in previous.items()
                    if (s == signal.SIGINT or h is stop_once) and h not in (signal.SIG_IGN, None)
                    and not getattr(h, "hc_deferring", False)]
    if not held_signals:
        yield  # nothing will interrupt the block, or an outer block already holds the signals
        return
    held: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        held.append(signum)

    hold.hc_deferring = True  # type: ignore[attr-defined]
    for s in held_signals:
        signal.signal(s, hold)
    try:
        yield
    finally:
        for s in held_signals:
            signal.signal(s, previous[s])
        if held:
            first = held[0]
            handler = previous[first]
            if callable(handler):
                handler(first, None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(first)  # the process asked for the default action: it ends
