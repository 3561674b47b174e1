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

from hccli.base.bounded import MAX_INT_DIGITS, SourceError, read_json, read_small_file
from hccli.base.errors import HcError

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # 1000x the largest published config


class ConfigError(HcError):
    """A config file that cannot be used, as one line and in parts: the file, the key as the file
    spells it ("" where the file as a whole is the problem), what was expected and what it holds.
    The parts let a checkpoint's config.json be set aside with a note that says the same everywhere."""

    def __init__(self, file: str, detail: str, *, key: str = "", expected: str = "", got: str = ""):
        super().__init__(f"{file}: {detail}")
        self.file, self.detail, self.key, self.expected, self.got = file, detail, key, expected, got

    @classmethod
    def at(cls, file: str, key: str, expected: str, got: str = "") -> ConfigError:
        """The usual form: key 'K': expected E, got G."""
        return cls(file, f"key '{key}': expected {expected}" + (f", got {got}" if got else ""),
                   key=key, expected=expected, got=got)


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
    try:
        raw = read_small_file(path, MAX_CONFIG_BYTES, "a model config.json")
    except SourceError as exc:
        raise as_config_error(exc, str(path)) from None
    if raw is None:
        raise ConfigError(str(path), "no such file; expected a model config.json", expected="a model config.json")
    return raw


def as_config_error(exc: HcError, file: str) -> ConfigError:
    """A store's refusal of the file (not a regular file, too large, unreadable) in a config's parts;
    its message is kept as the store said it."""
    if isinstance(exc, ConfigError):
        return exc
    detail = exc.message[len(file) + 2:] if exc.message.startswith(file + ": ") else exc.message
    return ConfigError(file, detail, expected=f"a readable regular file of at most {MAX_CONFIG_BYTES:,} bytes")


# what each of the JSON reader's refusals expected, by the words its message starts with
_JSON_EXPECTED = (("not UTF-8", "UTF-8 JSON text"), ("JSON nested", "JSON a few levels deep"))


def _json_error(exc: HcError, source: str) -> ConfigError:
    """The bounded JSON reader's refusal of a config, in a config's parts."""
    detail = exc.message[len(source) + 2:] if exc.message.startswith(source + ": ") else exc.message
    expected = next((e for start, e in _JSON_EXPECTED if detail.startswith(start)), "valid JSON")
    return ConfigError(source, detail, expected=expected, got=detail.split(";")[0])


def _int(text: str) -> Any:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        return Unusable(f"an integer of {len(text.lstrip('-')):,} digits", -1 if text.startswith("-") else 1)
    return int(text)


def _float(text: str) -> Any:
    x = float(text)
    return x if math.isfinite(x) else Unusable(f"a number beyond float range ({text[:20]})", 1 if x > 0 else -1)


def decode_json(raw: bytes | str, source: str) -> dict[str, Any]:
    """The top-level object of a JSON config; malformed or hostile JSON is a ConfigError."""
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(source, f"{len(raw):,} bytes; a config.json is at most {MAX_CONFIG_BYTES:,} bytes here",
                          expected=f"at most {MAX_CONFIG_BYTES:,} bytes", got=f"{len(raw):,} bytes")
    try:
        data = read_json(raw, source, "a model config.json", parse_int=_int, parse_float=_float)
    except HcError as exc:
        raise _json_error(exc, source) from None
    if not isinstance(data, dict):
        raise ConfigError(source, f"top level is a JSON {type(data).__name__}; expected an object",
                          expected="a JSON object", got=f"a JSON {type(data).__name__}")
    return data
