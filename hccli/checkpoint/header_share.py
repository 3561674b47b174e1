"""Headers read from both ends: the child that parses the index (shardset._index_beside) goes on,
once the index is done, to read shards from the last one back, while this process reads them from
the first one on; they meet where the other core's spare time runs out.

A header the child read comes back as its columns in a compact frame (names joined, dtypes as
codes, each distinct shape once, offsets as 64-bit arrays): ~0.3 ms to rebuild here against ~2 ms
to read and parse, for V4.1-Flash's ~2,000-entry shards. Only a header the fast path took whole
(a ColumnHeader) travels; for any other shard, a header that did not parse, a frame that does not
check out, or a child that is slow, gone or killed, this process reads the shard itself as before,
so the checkpoint never depends on the child (tests/test_beside_open.py compares both).

The child's frames, each a kind byte and a length, then the payload:
  I  the index summary, JSON (the first frame)
  H  one shard's header: its position k, then the frame of `encode_header`
  S  shard k passed without a header to send (this process reads it)
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from array import array
from typing import Any, Callable

from hccli.checkpoint import beside
from hccli.checkpoint.header import DTYPES, ColumnHeader, Columns

_DTYPE_LIST = list(DTYPES)  # DTYPES' own strings: a rebuilt column shares them, as the parser's does
_CODE = {d: i for i, d in enumerate(_DTYPE_LIST)}
_FRAME = struct.Struct("<cQ")  # kind, payload length
_PARTS = struct.Struct("<QIIQ")  # k, the JSON head's length, entries, the joined names' bytes
_MAX_FRAME = 1 << 30  # a shard's frame is ~110 KB for V4.1-Flash; past this the child is not believed
_PIPE_BYTES = 1 << 20  # room for ~9 frames ahead of this process (Linux's default pipe-max-size)


def encode_header(k: int, header: ColumnHeader) -> bytes | None:
    """Shard k's header as a frame payload; None where it cannot travel this way (a name holding
    NUL, the joiner)."""
    c = header.columns
    joined = "\0".join(c.names)
    n = len(c.names)
    if n and joined.count("\0") != n - 1:
        return None
    table = {s: i for i, s in enumerate(dict.fromkeys(c.shapes))}
    head = json.dumps([header.name, header.header_len, header.data_start, header.file_size, header.metadata,
                       [list(s) for s in table]]).encode()
    blob = joined.encode("utf-8", "surrogatepass")
    return b"".join((_PARTS.pack(k, len(head), n, len(blob)), head, bytes(map(_CODE.__getitem__, c.dtypes)),
                     array("I", map(table.__getitem__, c.shapes)).tobytes(), array("Q", c.begins).tobytes(),
                     array("Q", c.ends).tobytes(), blob))


def decode_header(payload: bytes) -> tuple[int, ColumnHeader] | None:
    """(k, the header) from an `encode_header` payload, or None for anything that does not check
    out (then the shard is read here)."""
    try:
        k, head_len, n, blob_len = _PARTS.unpack_from(payload)
        at = _PARTS.size
        if len(payload) != at + head_len + 21 * n + blob_len:
            return None  # cut short or run on
        name, header_len, data_start, file_size, metadata, table = json.loads(payload[at:at + head_len])
        at += head_len
        codes = payload[at:at + n]
        shape_ix = array("I", payload[at + n:at + 5 * n])
        begins = array("Q", payload[at + 5 * n:at + 13 * n]).tolist()
        ends = array("Q", payload[at + 13 * n:at + 21 * n]).tolist()
        names = payload[at + 21 * n:].decode("utf-8", "surrogatepass").split("\0") if n else []
    except (ValueError, TypeError, struct.error, UnicodeDecodeError, RecursionError):
        return None
    if not (type(name) is str and all(type(v) is int for v in (header_len, data_start, file_size))
            and (metadata is None or type(metadata) is dict and all(type(v) is str for v in metadata.values()))
            and type(table) is list and all(type(s) is list and all(type(d) is int and d >= 0 for d in s)
                                            for s in table)
            and len(codes) == n and len(shape_ix) == n and len(begins) == n and len(ends) == n and len(names) == n
            and (not n or max(codes) < len(_DTYPE_LIST) and max(shape_ix) < len(table))):
        return None
    shapes = [tuple(s) for s in table]
    columns = Columns(names, list(map(_DTYPE_LIST.__getitem__, codes)), list(map(shapes.__getitem__, shape_ix)),
                      begins, ends)
    return k, ColumnHeader.of_columns(name, header_len, data_start, file_size, metadata, columns)


class Helper:
    """fn(send) in a forked child, where beside.py allows one (Linux, one thread, HC_NO_FORK
    unset); send(kind, payload) writes one frame. This process takes the frames as they come:
    poll() without waiting, between its own shards; summary() waiting (within the timeout) for the
    first frame. A frame that does not decode is dropped (its shard is then read here)."""

    def __init__(self, fn: Callable[[Callable[[bytes, bytes], None]], None], *, timeout_s: float):
        self._deadline = time.monotonic() + timeout_s
        self._pid: int | None = None
        self._fd: int | None = None
        self._buf = bytearray()
        self._summary: Any = None
        self._ended = False
        self.headers: dict[int, ColumnHeader] = {}
        self.low: float = float("inf")  # the child has passed every shard from this position on
        self._done = 0  # this process has read the shards before this position: frames for them are not decoded
        if beside._can_fork():  # (looked up at each call: tests set it)
            self._start(fn)

    @property
    def forked(self) -> bool:
        return self._pid is not None

    def _start(self, fn: Callable) -> None:
        def work(w: int) -> None:
            fn(lambda kind, payload: beside.write_all(w, _FRAME.pack(kind, len(payload)) + payload))

        # a large pipe: the child runs ~9 frames ahead of this process instead of waiting for it
        child = beside.fork_writer(work, pipe_bytes=_PIPE_BYTES)
        if child is not None:
            self._pid, self._fd = child
            os.set_blocking(self._fd, False)

    def poll(self, done: int = 0) -> None:
        """Take whatever frames have arrived, without waiting; done: this process has read the
        shards before this position itself (a frame for one of them is passed over unread)."""
        self._done = max(self._done, done)
        while self._fd is not None and not self._ended:
            try:
                chunk = os.read(self._fd, 1 << 20)
            except BlockingIOError:
                break
            except OSError:
                self._ended = True
                break
            if not chunk:
                self._ended = True
                break
            self._buf += chunk
        self._frames()

    def _frames(self) -> None:
        buf = self._buf
        at = 0
        while len(buf) - at >= _FRAME.size:
            kind, size = _FRAME.unpack_from(buf, at)
            if size > _MAX_FRAME:
                self._ended = True  # not our child's frame: believe nothing more
                break
            end = at + _FRAME.size + size
            if end > len(buf):
                break
            start, at = at + _FRAME.size, end
            if kind == b"I":
                try:
                    self._summary = json.loads(bytes(buf[start:end]))
                except ValueError:
                    self._ended = True
                    break
            elif kind in (b"H", b"S") and size >= 8:
                k = int.from_bytes(buf[start:start + 8], "little")  # (an H frame's payload opens with k too)
                if kind == b"H" and k >= self._done:
                    got = decode_header(bytes(buf[start:end]))
                    if got is None:
                        continue  # the shard is read here (the next frame moves low past it)
                    self.headers[k] = got[1]
                self.low = min(self.low, k)
        del buf[:at]

    def summary(self) -> Any:
        """The first frame's JSON, waited for until the deadline; None if it never came."""
        while self._summary is None and self._fd is not None and not self._ended:
            left = self._deadline - time.monotonic()
            poll = select.poll()
            poll.register(self._fd, select.POLLIN)
            if left <= 0 or not poll.poll(left * 1000):
                break
            self.poll()
        return self._summary

    def close(self) -> None:
        """Stop the child (whatever it is doing) and reap it."""
        pid, fd = self._pid, self._fd
        self._pid = self._fd = None
        beside.reap(pid, fd, kill=True)
