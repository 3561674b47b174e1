"""Reading what a file or a server says, bounded: below every other module of hccli.

The helpers every reader shares: one-line text for messages (a name from a file may hold a
newline), small files read whole under a cap without blocking on a FIFO or a device, and the
one bounded JSON reader (an index, a config, JSON mixes, a hub's answer, a cache entry).
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any, Callable

from hccli.base.errors import HcError

# JSON nesting, counted with the top-level value as level 1: serde_json's recursion limit, which
# the safetensors reference applies to headers; no file hc reads needs more than a few levels.
MAX_JSON_DEPTH = 127
# digits of an integer in JSON (total_size is a u64 of 20 digits): converting longer digit
# strings costs quadratic time, and nothing hc reads is that large
MAX_INT_DIGITS = 30


def one_line(text: str, limit: int = 200) -> str:
    """Escape control characters (a tensor or file name may hold a newline) and cap the length,
    so that every message stays one line."""
    out = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return out if len(out) <= limit else out[: limit - 3] + "..."


class SourceError(HcError):
    """A file could not be opened, or could not give the bytes asked for.

    code: "not_found", "not_a_file", "unreadable", "bad_range", "short_read", "too_large",
    and for remote sources "http_status", "network", "timeout".
    """

    def __init__(self, message: str, code: str):
        super().__init__(message, exit_code=2)
        self.code = code


# O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever; an fstat
# after the open then refuses it (and any other non-regular file) by name.
OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, words in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISDIR, "a directory")):
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def regular_file_size(path: str | os.PathLike[str], expected: str) -> int:
    """The size of a regular file, checked by stat before anything opens it (a FIFO would
    block the open); a SourceError naming the path and what it is otherwise."""
    name = one_line(str(path))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise SourceError(f"{name}: no such file; expected {expected}", "not_found") from None
    except OSError as exc:
        raise SourceError(f"{name}: cannot read ({one_line(exc.strerror or str(exc))}); expected {expected}",
                          "unreadable") from None
    if not stat.S_ISREG(st.st_mode):
        raise SourceError(f"{name}: is {file_kind(st.st_mode)}, not a regular file; expected {expected}",
                          "not_a_file")
    return st.st_size


def read_small_file(path: str | os.PathLike[str], cap: int, expected: str) -> bytes | None:
    """A small file read whole (an index, a config), or None when there is none.

    Refuses a non-regular file by name without blocking on it, and a file over `cap`
    bytes before reading any of it (a padded or endless file must not cost memory)."""
    name = one_line(str(path))
    try:
        fd = os.open(path, OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SourceError(f"{name}: cannot open ({one_line(exc.strerror or str(exc))}); expected {expected}",
                          "unreadable") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SourceError(f"{name}: is {file_kind(st.st_mode)}, not a regular file; expected {expected}",
                              "not_a_file")
        if st.st_size > cap:
            raise SourceError(f"{name}: {st.st_size:,} bytes; expected {expected} of at most {cap:,} bytes",
                              "too_large")
        chunks, got = [], 0
        want = st.st_size + 1  # the whole file in one read, and one byte to see its end
        while True:  # to the end, but never past the cap (a file growing while read)
            chunk = os.read(fd, min(max(want - got, 1 << 16), cap + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            if got > cap:
                raise SourceError(f"{name}: grew past {cap:,} bytes while being read; expected {expected}",
                                  "too_large")
        return b"".join(chunks)
    except OSError as exc:
        raise SourceError(f"{name}: cannot read ({one_line(exc.strerror or str(exc))})", "unreadable") from None
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- JSON

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[{]}")
# What real JSON nests to, tried on up to a million brackets by removing the innermost pairs a
# round at a time; deeper or longer texts take the linear count below.
_QUICK_ROUNDS, _QUICK_BRACKETS = 8, 1 << 20


def nests_deeper_than(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether brackets outside strings nest deeper than `limit`, in linear time. A text with no
    more brackets than `limit` cannot (two C-level counts); one whose innermost pairs all go in a
    few rounds of removal does not; anything else is counted by numpy's running sum over chunks
    (imported only for such a text)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    steps = _STRING.sub("", text).encode("utf-8", "surrogatepass").translate(_BRACKET_STEPS, _NOT_BRACKETS)
    if len(steps) <= _QUICK_BRACKETS:
        rest = steps.replace(b"\x01", b"(").replace(b"\xff", b")")
        for _ in range(min(_QUICK_ROUNDS, limit)):
            rest = rest.replace(b"()", b"")
            if not rest:
                return False
    import numpy as np

    depth, chunk = 0, 1 << 20
    values = np.frombuffer(steps, np.int8)  # +1 opens, -1 closes
    for start in range(0, len(values), chunk):
        running = np.cumsum(values[start : start + chunk], dtype=np.int32)
        running += depth
        if running.max() > limit:
            return True
        depth = int(running[-1])
    return False


def bounded_int(text: str) -> int:
    """json's parse_int within MAX_INT_DIGITS digits (a ValueError past them)."""
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {digits:,} digits; expected at most {MAX_INT_DIGITS}")
    return int(text)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def read_json(raw: bytes | str, where: str, expected: str, *, parse_int: Callable[[str], Any] = bounded_int,
              parse_float: Callable[[str], Any] | None = None,
              parse_constant: Callable[[str], Any] = _no_constant) -> Any:
    """The JSON value of `raw`, read under the bounds: UTF-8, nested at most MAX_JSON_DEPTH deep,
    integers through `parse_int` (at most MAX_INT_DIGITS digits unless the caller keeps them
    otherwise), no NaN or Infinity unless `parse_constant` takes them. Anything else is one
    HcError naming `where` and `expected`."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise HcError(f"{where}: not UTF-8 text (byte {exc.start}); expected {expected}") from None
    if nests_deeper_than(text):
        raise HcError(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels; expected {expected}")
    try:
        return json.loads(text, parse_int=parse_int, parse_float=parse_float, parse_constant=parse_constant)
    except RecursionError:  # a stack smaller than MAX_JSON_DEPTH levels of the decoder
        raise HcError(f"{where}: JSON nested too deeply; expected {expected}") from None
    except ValueError as exc:  # JSONDecodeError, or a hook's refusal
        raise HcError(f"{where}: not valid JSON ({one_line(str(exc), 80)}); expected {expected}") from None
