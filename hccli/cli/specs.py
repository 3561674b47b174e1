"""The values of selection options, parsed from what a user typed (no typer here,
so that callbacks and tests share it). Errors name the flag and the text.

Layer specs: '3-7', '2,8,14', '20-39,40'. Layers are numbered as everywhere in
`hc`: backbone layers 0..n-1, then the DSpark/MTP stages, then the root head
mix. The numbers are bounded by what any config `hc` accepts can hold, so that
'0-999999999' is refused instead of built; whether a layer exists in THIS
model is for the core to say, against the config.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hccli.model.config.bounds import MAX_LAYERS, MAX_STAGES
from hccli.base.errors import HcError

# the largest layer number any accepted config has: its stages' last, and the head mix after it
MAX_LAYER_NUMBER = MAX_LAYERS + MAX_STAGES

_ITEM = re.compile(r"(\d{1,9})(?:\s*-\s*(\d{1,9}))?")

COMPONENT_ALIASES = {
    "pre": "pre", "read": "pre", "reading": "pre", "reading-weights": "pre",
    "post": "post", "write": "post", "writing": "post", "writing-weights": "post",
    "comb": "comb", "combination": "comb", "stream-combination": "comb", "sinkhorn": "comb",
    "fn": "fn", "proj": "fn", "projection": "fn", "mix": "fn", "mix-projection": "fn",
}
SITE_ALIASES = {"attn": "attn", "attention": "attn", "ffn": "ffn", "mlp": "ffn", "moe": "ffn", "head": "head"}
ROLE_ALIASES = {
    "window": "window", "source": "source", "reuse": "reuse", "reindex": "reindex", "compressed": "compressed",
    "engram": "engram", "hash": "hash", "stage": "stage",
    "reusing": "reuse", "re-index": "reindex", "full": "source", "kv-source": "source",
    "dspark": "stage", "mtp": "stage",
}


def _quoted(text: str) -> str:
    """What the user typed, as a short repr (control characters escaped)."""
    return repr(text) if len(text) <= 40 else repr(text[:37]) + "..."


def parse_ranges(text: str, flag: str) -> tuple[tuple[int, int], ...]:
    """'3-7,8' -> ((3, 7), (8, 8)), in the order given; every item must be a number or a range."""
    out = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            raise HcError(f"{flag} {_quoted(text)}: an empty item between commas; expected layer numbers or "
                          "ranges like 3-7, separated by single commas")
        m = _ITEM.fullmatch(item)
        if not m:
            raise HcError(f"{flag} {_quoted(text)}: {_quoted(item)} is not a layer number or range like 3-7")
        a = int(m[1])
        b = int(m[2]) if m[2] is not None else a
        if a > b:
            raise HcError(f"{flag} {_quoted(text)}: range {item} runs backwards")
        if b > MAX_LAYER_NUMBER:
            raise HcError(f"{flag} {_quoted(text)}: layer {b} is past any model hc reads "
                          f"(at most {MAX_LAYERS:,} layers + {MAX_STAGES} stages)")
        out.append((a, b))
    return tuple(out)


def parse_layers(text: str, flag: str) -> frozenset[int]:
    """'3-7,8' -> {3, 4, 5, 6, 7, 8}."""
    return frozenset(i for a, b in parse_ranges(text, flag) for i in range(a, b + 1))


def parse_one_layer(text: str, flag: str) -> int:
    """'3' -> 3, in the grammar of every layer option, for a command that runs one site."""
    layers = parse_layers(text, flag)
    if len(layers) != 1:
        raise HcError(f"{flag} {text!r}: expected one layer number (run-kernel runs one site)")
    return next(iter(layers))


def parse_choices(values: Iterable[str], flag: str, aliases: dict[str, str], expected: str) -> frozenset[str]:
    """Repeated and comma-separated names, each through its aliases to one canonical name."""
    out = set()
    for value in values:
        for raw in value.split(","):
            key = raw.strip().lower().replace("_", "-")
            if key not in aliases:
                raise HcError(f"{flag} {_quoted(raw.strip())}: expected one of {expected}")
            out.add(aliases[key])
    return frozenset(out)
