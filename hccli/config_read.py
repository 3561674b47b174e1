"""Reading a config file as hostile input: bounded, never blocking, one-line errors.

A config.json is a few kilobytes (the published ones are under 4 KB). Whatever a
path names, `hc` reads at most MAX_CONFIG_BYTES of it, and only when it is a
regular file: a FIFO would block `open` forever and /dev/zero would never end.
JSON that is nested past Python's recursion limit, or holds integers of absurd
length or floats beyond float range, turns into a value a validator can name
(the key it sits under) instead of a traceback.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from hccli.errors import HcError

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # 1000x the largest published config
MAX_INT_DIGITS = 30  # any bound a config key has fits in far fewer digits

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class Unusable:
    """A JSON number no config key can take: kept so that the key it sits under is named."""

    def __init__(self, what: str, sign: int):
        self.what = what
        self.sign = sign  # +1 / -1: above / below every bound a key has

    def __repr__(self) -> str:
        return self.what


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_config_bytes(path: Path) -> bytes:
    """The bytes of a regular file of at most MAX_CONFIG_BYTES; anything else is an HcError."""
    try:
        # O_NONBLOCK: opening a FIFO for reading must not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise HcError(f"{path}: no such file; expected a model config.json") from None
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket or a FIFO-like thing without a reader end
            raise HcError(f"{path}: not a regular file; expected a model config.json") from None
        raise HcError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise HcError(f"{path}: is {_kind(st.st_mode)}; expected a regular config.json file")
        if st.st_size > MAX_CONFIG_BYTES:
            raise HcError(f"{path}: {st.st_size:,} bytes; a config.json is at most {MAX_CONFIG_BYTES:,} bytes "
                          "here (published ones are under 4 KB)")
        chunks, got = [], 0
        while True:  # the size can lie (/proc, a file still growing): stop at the cap regardless
            chunk = os.read(fd, min(1 << 20, MAX_CONFIG_BYTES + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            if got > MAX_CONFIG_BYTES:
                raise HcError(f"{path}: more than {MAX_CONFIG_BYTES:,} bytes; a config.json is at most "
                              f"{MAX_CONFIG_BYTES:,} bytes here (published ones are under 4 KB)")
        return b"".join(chunks)
    except OSError as exc:
        raise HcError(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _int(text: str) -> Any:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        return Unusable(f"an integer of {len(text.lstrip('-')):,} digits", -1 if text.startswith("-") else 1)
    return int(text)


def _float(text: str) -> Any:
    x = float(text)
    return x if math.isfinite(x) else Unusable(f"a number beyond float range ({text[:20]})", 1 if x > 0 else -1)


def decode_json(raw: bytes | str, source: str) -> dict[str, Any]:
    """The top-level object of a JSON config; malformed or hostile JSON is an HcError."""
    if len(raw) > MAX_CONFIG_BYTES:
        raise HcError(f"{source}: {len(raw):,} bytes; a config.json is at most {MAX_CONFIG_BYTES:,} bytes here")
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        data = json.loads(text, parse_constant=_reject_constant, parse_int=_int, parse_float=_float)
    except UnicodeDecodeError as exc:
        raise HcError(f"{source}: not UTF-8 text (byte {exc.start}); expected a JSON config") from None
    except RecursionError:
        raise HcError(f"{source}: JSON nested too deeply; expected a model config.json (a few levels deep)") from None
    except (json.JSONDecodeError, ValueError) as exc:
        raise HcError(f"{source}: not valid JSON ({exc}); expected a model config.json") from None
    if not isinstance(data, dict):
        raise HcError(f"{source}: top level is a JSON {type(data).__name__}; expected an object")
    return data
