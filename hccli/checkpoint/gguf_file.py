"""The bounded pre-scan of a GGUF header (llama.cpp's deepseek4 / deepseek41): the
limits every count, length and the header's total size are checked against, and
the reader that takes header bytes on demand without reading past them.

checkpoint/gguf_store.py walks a GGUF's header with it (over byte ranges, so a hub
GGUF costs its header), keeping what it reads: the project's one GGUF reader. A
GGUF is hostile input like any file: a forged count cannot make the walk loop or
allocate past the file. Nothing here imports the `gguf` package.
"""

from __future__ import annotations

import re
import struct
from typing import Any

from hccli.errors import HcError

GGUF_MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_TENSORS = 1 << 20  # a whole V4.1-Flash is ~96k tensors before llama.cpp merges the experts
MAX_KV = 1 << 16
MAX_STRING = 1 << 26
MAX_HEADER_BYTES = 1 << 28  # metadata + tensor infos; a tokenizer is a few MB
MAX_SPLITS = 1024
SPLIT_NAME = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
# metadata kept whole; longer arrays are summarised by their length
SMALL_ARRAY = 4096


class HeaderScan:
    """The header bytes, read on demand (a shard is GBs; its header a few MB)."""

    def __init__(self, path: Any, f: Any, size: int):
        self.path, self.f, self.size, self.pos = path, f, size, 0
        self.limit = min(size, MAX_HEADER_BYTES)
        self.buf = f.read(min(self.limit, 1 << 20))

    def fail(self, what: str) -> HcError:
        return HcError(f"{self.path}: not a readable GGUF ({what} at byte {self.pos})")

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.buf) and end <= self.limit:
            self.buf += self.f.read(min(self.limit, max(end, 2 * len(self.buf))) - len(self.buf))
        if end > len(self.buf):
            # the limit is the reader's own (a subclass may set another), not this module's constant
            raise self.fail("header runs past the end of the file" if end > self.size
                            else f"header larger than {self.limit:,} bytes")
        b = self.buf[self.pos:end]
        self.pos += n
        return b

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def string(self, limit: int = MAX_STRING) -> bytes:
        n = self.u64()
        if n > limit:
            raise self.fail(f"string of {n:,} bytes; expected at most {limit:,}")
        return self.take(n)
