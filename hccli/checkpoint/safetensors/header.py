"""A hardened safetensors header parser that works on bytes.

The rules are those of the reference implementation (huggingface/safetensors,
safetensors/src/tensor.rs: `SafeTensors::read_metadata` and `Metadata::validate`),
made stricter where that protects users: duplicate JSON keys, NaN/Infinity
literals and lone surrogate escapes are rejected instead of silently accepted.
Files that are not safetensors at all (LFS pointers, HTML error pages, torch
zips, pickles, GGUF ...) are named for what they are (see sniff.py).

Layout: 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the
data buffer, which the tensors' data_offsets (relative to the buffer) must tile
from 0 to the end of the file without gap or overlap.

Two paths give one verdict. The fast accept (header_fast.py) takes the ordinary header
(entries of exactly dtype, shape, data_offsets) at the speed of msgspec's C decoding and
declines anything else; the careful path (header_careful.py) applies every rule one by one,
and alone words the errors.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

from hccli.checkpoint.safetensors.header_fast import parse_fast
from hccli.checkpoint.safetensors.header_types import MAX_HEADER_SIZE, N_LEN, Header, HeaderError
from hccli.checkpoint.sniff import PICKLE, PICKLE_FRAME_STARTS, SNIFF_LEN, sniff
from hccli.checkpoint.source import ByteSource


# --------------------------------------------------------------------------- length


def header_length(head: bytes, file_size: int, name: str) -> int:
    """Validate the 8-byte length field at the start of `head` against the cap and the file size.

    `head` holds the file's first bytes: at least 8 of them, or the whole file when it is
    shorter. More bytes (up to SNIFF_LEN) give better messages for non-safetensors files.
    """
    if file_size == 0:
        raise HeaderError(name, "empty_file", "file is empty (0 bytes), expected a safetensors file")
    if file_size < N_LEN:
        what = sniff(head)
        looks = f"; it {what[1]}" if what else ""
        raise HeaderError(name, "too_short", f"file has {file_size} bytes, expected at least 8 (the header length)"
                          + looks)
    if len(head) < N_LEN:
        raise ValueError(f"header_length needs the first 8 bytes, got {len(head)}")
    n = int.from_bytes(head[:N_LEN], "little")
    if head[:3] in PICKLE_FRAME_STARTS:
        # Protocol 4/5 pickles with a tiny first frame read as a length under the cap.
        raise HeaderError(name, "pickle", f"not a safetensors file: it {PICKLE}")
    if n > MAX_HEADER_SIZE:
        # Only here is sniffing safe: a real header length fits in 4 bytes, so magic numbers
        # of other formats (which fill bytes 4-7) cannot be confused with a truncated shard.
        what = sniff(head)
        if what is not None:
            raise HeaderError(name, what[0], f"not a safetensors file: it {what[1]}")
        raise HeaderError(name, "header_too_large", f"header length field says {n:,} bytes, expected at most"
                          f" {MAX_HEADER_SIZE:,} (not a safetensors file?)")
    if N_LEN + n > file_size:
        raise HeaderError(name, "header_truncated", f"header length field says {n:,} bytes, file has only"
                          f" {file_size - N_LEN:,} after it (truncated download?)")
    if n == 0:
        zeros = " (the file starts with zero bytes: an unfinished download?)" if not any(head) else ""
        raise HeaderError(name, "empty_header", f"header length is 0, expected a JSON object{zeros}")
    return n


# --------------------------------------------------------------------------- parse


def parse_header(prefix: bytes, file_size: int, name: str) -> Header:
    """Parse and validate a header from the file's first bytes.

    `prefix` must hold at least 8 + header length bytes (the whole file is fine), or the
    whole file when it is shorter. Raises HeaderError for anything a user's file can do wrong.
    """
    n = header_length(prefix, file_size, name)
    if len(prefix) < N_LEN + n:
        raise ValueError(f"parse_header needs {N_LEN + n} bytes of prefix, got {len(prefix)}")
    return _parse_body(prefix[N_LEN : N_LEN + n], file_size, name)


def read_header(source: ByteSource) -> Header:
    """Read exactly the 8-byte length and then the header from `source`, and validate it."""
    name = source.name
    size = source.size()
    head = source.read(0, min(size, N_LEN))
    if size > N_LEN and not 0 < int.from_bytes(head, "little") <= MAX_HEADER_SIZE:
        # Not a usable length: read a little more, to say what the file is instead.
        head = source.read(0, min(size, SNIFF_LEN))
    n = header_length(head, size, name)
    return _parse_body(source.read(N_LEN, n), size, name)


def _parse_body(body: bytes, file_size: int, name: str) -> Header:
    with gc_paused():
        header = parse_fast(body, len(body), file_size, name)
        if header is not None:
            return header
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HeaderError(name, "bad_utf8", f"header is not valid UTF-8 (byte 0x{body[exc.start]:02x} at file"
                              f" offset {N_LEN + exc.start}), expected UTF-8 JSON") from None
        # Anything unusual, valid or not, is judged and worded by the careful path.
        from hccli.checkpoint.safetensors.header_careful import parse_careful

        return parse_careful(text, len(body), file_size, name)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold off the cyclic GC while building many long-lived, acyclic objects.

    Parsing a header allocates a container per JSON object and array and a tuple per tensor,
    all alive until it ends (the tensors for good) and none in a cycle. Left on, the GC walks
    them again every few hundred allocations, a cost that grows with the header and frees nothing.
    The switch is process-wide: threads pausing at once may end one another's pause early (a
    cost, never a leak); a GC the caller had turned off stays off.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
