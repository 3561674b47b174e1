"""The values of selection options, parsed from what a user typed (no typer here,
so that callbacks and tests share it). Errors name the flag and the text.

Layer specs, one grammar for every command's --layers: numbers '3', ranges '3-7', lists
'2,8,14', the stages by name 'mtp.0' (a range of them 'mtp.0-mtp.2' or 'mtp.0-2') and the root
head mix 'head'. Layers are numbered as everywhere in `hc` (docs/CLI.md): backbone layers
0..n-1, then stage k as n + k (the number and `mtp.k` name one layer), then the head mix. The
numbers are bounded by what any config `hc` accepts can hold, so that '0-999999999' is refused
instead of built; whether a layer exists in THIS model is for the core to say, against the
config (model/layers.py's check_layer_range: the one out-of-range line).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hccli.model.config.bounds import MAX_LAYERS, MAX_STAGES
from hccli.base.errors import HcError

# the largest layer number any accepted config has: its stages' last, and the head mix after it
MAX_LAYER_NUMBER = MAX_LAYERS + MAX_STAGES

_ITEM = re.compile(r"(\d{1,9})(?:\s*-\s*(\d{1,9}))?")
_STAGES = re.compile(r"mtp\.(\d{1,9})(?:\s*-\s*(?:mtp\.)?(\d{1,9}))?")
LAYER_GRAMMAR = "layer numbers or ranges like 3-7, mtp.N for a stage, head for the head mix"

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
        out.append(_bounded(int(m[1]), int(m[2] if m[2] is not None else m[1]), item, text, flag,
                            MAX_LAYER_NUMBER, "layer"))
    return tuple(out)


def _bounded(a: int, b: int, item: str, text: str, flag: str, most: int, what: str) -> tuple[int, int]:
    if a > b:
        raise HcError(f"{flag} {_quoted(text)}: range {item} runs backwards")
    if b > most:
        raise HcError(f"{flag} {_quoted(text)}: {what} {b} is past any model hc reads "
                      f"(at most {MAX_LAYERS:,} layers + {MAX_STAGES} stages)")
    return a, b


def parse_layers(text: str, flag: str):
    """'3-7,8,mtp.0,head' -> a LayerSpec (model/layers.py), numbered by the model it is used on."""
    from hccli.model.layers import LayerSpec  # at parse time, for a selection only: start-up stays light

    numbers: set[int] = set()
    stages: set[int] = set()
    head = False
    for raw in text.split(","):
        item = raw.strip().lower()
        if not item:
            raise HcError(f"{flag} {_quoted(text)}: an empty item between commas; expected {LAYER_GRAMMAR}, "
                          "separated by single commas")
        if item == "head":
            head = True
        elif m := _STAGES.fullmatch(item):
            a, b = _bounded(int(m[1]), int(m[2] if m[2] is not None else m[1]), item, text, flag,
                            MAX_STAGES - 1, "stage")
            stages.update(range(a, b + 1))
        elif m := _ITEM.fullmatch(item):
            a, b = _bounded(int(m[1]), int(m[2] if m[2] is not None else m[1]), item, text, flag,
                            MAX_LAYER_NUMBER, "layer")
            numbers.update(range(a, b + 1))
        else:
            raise HcError(f"{flag} {_quoted(text)}: {_quoted(raw.strip())} is not a layer; expected {LAYER_GRAMMAR}")
    shown = text.strip() if len(text.strip()) <= 40 else text.strip()[:37] + "..."  # quoted by the core's line
    return LayerSpec(frozenset(numbers), frozenset(stages), head, shown, flag)


def parse_one_layer(text: str, flag: str):
    """'3' or 'mtp.0' -> a LayerSpec of one layer, in the grammar of every layer option, for
    run-kernel (it runs the split-Sinkhorn op of one attn or ffn site: the head mix has none)."""
    spec = parse_layers(text, flag)
    if len(spec) != 1:
        raise HcError(f"{flag} {_quoted(text)}: expected one layer (run-kernel runs one site), e.g. 3 or mtp.0")
    if spec.head:
        raise HcError(f"{flag} head: the head mix has no Sinkhorn; expected a backbone layer or a stage (mtp.N)")
    return spec


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
