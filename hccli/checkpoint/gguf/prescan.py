"""The bounded pre-scan of a GGUF header (llama.cpp's deepseek4 / deepseek41): the
limits every count, length and the header's total size are checked against, and
the reader that takes header bytes on demand without reading past them.

checkpoint/gguf/store.py walks a GGUF's header with it (over byte ranges, so a hub
GGUF costs its header), keeping what it reads: the project's one GGUF reader. A
GGUF is hostile input like any file: a forged count cannot make the walk loop or
allocate past the file, and what the walk passes over (a tokenizer's arrays, up to
MAX_HEADER_BYTES of them) is never held whole. Nothing here imports the `gguf` package.
"""

from __future__ import annotations

import re
import struct
from typing import Any

from hccli.base.errors import HcError

GGUF_MAGIC = b"GGUF"
VERSIONS = (2, 3)
# tensors in one GGUF, and in a whole split set: a V4.1-Flash is ~96k tensors before llama.cpp's
# converter stacks the experts per layer, a few thousand after (each costs a few us and ~200 bytes)
MAX_TENSORS = 1 << 18
MAX_KV = 1 << 16
MAX_STRING = 1 << 26
MAX_HEADER_BYTES = 1 << 28  # metadata + tensor infos; a tokenizer is a few MB
MAX_SPLITS = 1024
SPLIT_NAME = re.compile(r"^(?P<stem>.+)-(?P<no>[0-9]{5})-of-(?P<count>[0-9]{5})\.gguf$")
# metadata kept whole; longer arrays are summarised by their type and length
SMALL_ARRAY = 4096
# bytes of metadata strings and arrays kept in all (general.architecture, the {arch}.* lists);
# past them a value is summarised by its length and its bytes passed over
KEPT_METADATA_BYTES = 1 << 20

_U64 = struct.Struct("<Q")


class HeaderScan:
    """The header bytes, read on demand through a window: what the walk has passed is
    dropped, what it skips is never read whole, so memory is one read ahead of the walk
    however large the header (a shard is GBs; its header a few MB, at most MAX_HEADER_BYTES).
    Reads start at FIRST bytes and double up to MAX_READ (over HTTP a tiny GGUF's header is
    a few KB, a real one a few MB)."""

    FIRST = 64 * 1024
    MAX_READ = 1 << 24

    def __init__(self, name: str, src: Any, size: int, max_bytes: int = MAX_HEADER_BYTES):
        self.path, self.src, self.size = name, src, size
        self.limit = min(size, max_bytes)
        self.start, self.pos = 0, 0  # the file offsets of buf[0] and of the walk
        self.chunk = self.FIRST
        self.buf = b""
        self.need(min(self.limit, self.FIRST))

    def fail(self, what: str) -> HcError:
        return HcError(f"{self.path}: not a readable GGUF ({what} at byte {self.pos})")

    def need(self, n: int) -> None:
        """Make the n bytes from pos buffered, or fail naming why they cannot be."""
        end = self.pos + n
        have = self.start + len(self.buf)
        if end <= have:
            return
        if end > self.limit:
            # the limit is the reader's own (a test may set another), not this module's constant
            raise self.fail("header runs past the end of the file" if end > self.size
                            else f"header larger than {self.limit:,} bytes")
        kept = self.buf[self.pos - self.start:] if self.pos < have else b""
        self.buf = b""  # (what was passed is let go before the next read comes in)
        at = max(self.pos, have)
        want = min(self.limit, max(end, at + self.chunk)) - at
        self.chunk = min(2 * self.chunk, self.MAX_READ)
        data = self.src.read(at, want)
        self.buf, self.start = kept + data if kept else data, self.pos

    def ahead(self, n: int) -> tuple[bytes, int]:
        """(buffer, index of pos in it) with at least n bytes from pos, or all that are left
        under the limit: for loops that parse records in place and check their own ends."""
        self.need(min(n, self.limit - self.pos))
        return self.buf, self.pos - self.start

    def take(self, n: int) -> bytes:
        self.need(n)
        i = self.pos - self.start
        self.pos += n
        return self.buf[i:i + n]

    def skip(self, n: int) -> None:
        """Pass over n bytes without reading them (those already buffered are dropped later)."""
        if self.pos + n > self.limit:
            self.need(n)  # fails, naming why
        self.pos += n

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return _U64.unpack(self.take(8))[0]

    def string(self, limit: int = MAX_STRING) -> bytes:
        n = self.u64()
        if n > limit:
            raise self.fail(f"string of {n:,} bytes; expected at most {limit:,}")
        return self.take(n)

    def string_length(self, limit: int = MAX_STRING) -> int:
        n = self.u64()
        if n > limit:
            raise self.fail(f"string of {n:,} bytes; expected at most {limit:,}")
        return n

    def skip_strings(self, count: int, limit: int = MAX_STRING) -> None:
        """Pass over an array's `count` strings by their lengths, a window at a time (a
        tokenizer's 16 M of them in a few seconds). A string past `limit` is longer than any
        window, so only the one that runs past a window's end needs the check."""
        unpack = _U64.unpack_from
        n = 0
        while count:
            buf, i = self.ahead(1 << 20)
            end, at = len(buf) - 8, i
            for left in range(count, 0, -1):  # (a for over a range: no counter updated in Python)
                if at > end:
                    break
                n = unpack(buf, at)[0]
                at += 8 + n
            else:
                left = 0
            count = left  # the strings not yet passed when the window ended
            if at > len(buf):  # the last string runs past the window
                if n > limit:
                    self.pos += at - 8 - n - i
                    raise self.fail(f"string of {n:,} bytes; expected at most {limit:,}")
                self.pos += len(buf) - i
                self.skip(at - len(buf))
            else:
                self.pos += at - i
                if count:
                    self.need(8)  # a length split over the window's end (or the header's)
