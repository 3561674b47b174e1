"""Reading a config file as hostile input: bounded, never blocking, one-line errors.

A config.json is a few kilobytes (the published ones are under 4 KB). Whatever a
path names, `hc` reads at most MAX_CONFIG_BYTES of it, and only when it is a
regular file: a FIFO would block `open` forever and /dev/zero would never end.
JSON nested too deeply is refused by the bounded JSON reader; integers of absurd
length or floats beyond float range turn into a value a validator can name (the
key it sits under) instead of a traceback.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from hccli.bounded import MAX_INT_DIGITS, read_json, read_small_file
from hccli.errors import HcError

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # 1000x the largest published config

class Unusable:
    """A JSON number no config key can take: kept so that the key it sits under is named."""

    def __init__(self, what: str, sign: int):
        self.what = what
        self.sign = sign  # +1 / -1: above / below every bound a key has

    def __repr__(self) -> str:
        return self.what


def read_config_bytes(path: Path) -> bytes:
    """The bytes of a regular file of at most MAX_CONFIG_BYTES; anything else is an HcError
    (the store's capped, non-blocking small-file read: a FIFO is refused, not waited on)."""
    raw = read_small_file(path, MAX_CONFIG_BYTES, "a model config.json")
    if raw is None:
        raise HcError(f"{path}: no such file; expected a model config.json")
    return raw


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
    data = read_json(raw, source, "a model config.json", parse_int=_int, parse_float=_float)
    if not isinstance(data, dict):
        raise HcError(f"{source}: top level is a JSON {type(data).__name__}; expected an object")
    return data
