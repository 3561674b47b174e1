"""Work that runs beside the rest of `hc inspect`, on another core: a forked child computes it
while the parent goes on, and hands back a small JSON result through a pipe (Beside; the
fork, write and reap steps are shared with header_share.Helper, which streams frames).

Only where that is safe and worth it: a platform with fork (Linux; macOS forbids much after a
fork), no other thread in the process (a fork copies only the calling one, and locks another
held would stay held), enough work to pay for the fork, and HC_NO_FORK unset (=1: no child).
Anything else, and any failure of the child (an exception, a signal, a result that does not
parse, no result within the timeout), runs the same function in process instead, so the
result never depends on whether a child ran.
The child writes nothing but its result and leaves through os._exit (no atexit handlers, no
flush of the parent's buffered output).
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

# Below this much reading, the fork costs more than it saves (a test sets it to 0).
MIN_BYTES = 32 << 20
MAX_RESULT = 1 << 20  # the result is a few numbers per HC tensor; past this the child is not believed


class Beside:
    """fn() computed in a forked child where possible; result() gives it (or computes it here)."""

    def __init__(self, fn: Callable[[], Any], *, nbytes: int = 0, timeout_s: float, worth: bool | None = None):
        """worth: whether the work pays for a fork (default: nbytes >= MIN_BYTES of reading)."""
        self._fn = fn
        self._pid: int | None = None
        self._fd: int | None = None
        self._deadline = time.monotonic() + timeout_s
        self._got: Any = _NONE
        self._forked = False
        if (nbytes >= MIN_BYTES if worth is None else worth) and _can_fork():
            self._start()

    @property
    def forked(self) -> bool:
        """Whether a child was started for the work (whatever became of it)."""
        return self._forked

    def _start(self) -> None:
        child = fork_writer(lambda w: write_all(w, json.dumps(self._fn()).encode()))
        if child is not None:
            self._pid, self._fd = child
            self._forked = True

    def result(self) -> Any:
        """The child's answer, or fn() computed here; the same object on every call."""
        if self._got is _NONE:
            got = self._collect() if self._pid is not None else _NONE
            self._got = self._fn() if got is _NONE else got
        return self._got

    def _collect(self) -> Any:
        chunks: list[bytes] = []
        size = 0
        ok = False
        poll = select.poll()  # (select() refuses descriptors past 1024)
        poll.register(self._fd, select.POLLIN)
        try:
            while size <= MAX_RESULT:
                left = self._deadline - time.monotonic()
                if left <= 0 or not poll.poll(left * 1000):
                    break  # no result in time
                chunk = os.read(self._fd, 1 << 16)
                if not chunk:
                    ok = True
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            status = self._reap(kill=not ok)
        if not ok or status != 0:
            return _NONE
        try:
            return json.loads(b"".join(chunks))
        except ValueError:
            return _NONE

    def _reap(self, *, kill: bool) -> int | None:
        pid, fd = self._pid, self._fd
        self._pid = self._fd = None
        return reap(pid, fd, kill=kill)

    def close(self) -> None:
        """Stop a child whose result is no longer wanted (an error elsewhere)."""
        self._reap(kill=True)


class _None:
    pass


_NONE = _None()


def fork_writer(work: Callable[[int], None], *, pipe_bytes: int = 0) -> tuple[int, int] | None:
    """(pid, the read end of a pipe) of a forked child that runs work(the write end) and leaves by
    os._exit: 0 when work returns, 1 on anything it raises (no atexit functions, no flush of this
    process's buffered output). None when the fork fails. pipe_bytes: room asked for in the pipe
    (Linux; the default pipe where refused)."""
    r, w = os.pipe()
    if pipe_bytes:
        try:
            import fcntl

            fcntl.fcntl(w, getattr(fcntl, "F_SETPIPE_SZ", 1031), pipe_bytes)
        except (ImportError, OSError):
            pass
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return None
    if pid == 0:
        code = 1
        try:
            os.close(r)
            work(w)
            code = 0
        except BaseException:  # noqa: BLE001 - whatever happened, the parent does the work itself
            pass
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def reap(pid: int | None, fd: int | None, *, kill: bool) -> int | None:
    """Close our end, kill the child if asked, wait for it; its exit code (None if there was none)."""
    if fd is not None:
        os.close(fd)
    if pid is None:
        return None
    if kill:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        _, status = os.waitpid(pid, 0)  # it has closed its end (or was killed): no long wait
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status)


def _can_fork() -> bool:
    # HC_NO_FORK=1: everything in this process (a sandbox without fork, a profiler, a comparison)
    return (sys.platform.startswith("linux") and hasattr(os, "fork") and threading.active_count() == 1
            and os.environ.get("HC_NO_FORK") != "1")
