"""The one vocabulary: how the model's tensors are named, the mix width, the
index file's name and the op's defaults. Every other module imports these from
here rather than spelling them again.

Canonical names are the release's (DeepSeek's own checkpoints):

    layers.L.hc_{attn,ffn}_{fn,base,scale}     backbone layer L
    mtp.S.hc_{attn,ffn}_{fn,base,scale}        DSpark / MTP stage S
    hc_head_{fn,base,scale}                    the V4 family's root head mix

Layers are numbered as everywhere in `hc`: backbone layer L is L, stage S is
n_layers + S, and the root head mix comes last (n_layers + n_stages).
Other dialects (transformers, GGUF, ...) map their spellings onto these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from operator import itemgetter
from typing import Iterable

INDEX_NAME = "model.safetensors.index.json"

HC_SITES = ("attn", "ffn", "head")
HC_PARTS = ("fn", "base", "scale")
SITE_ORDER = {site: i for i, site in enumerate(HC_SITES)}

# The op's parameters where a config does not say (the reference inference code's).
DEFAULT_HC_MULT = 4
DEFAULT_SINKHORN_ITERS = 20
DEFAULT_HC_EPS = 1e-6
DEFAULT_NORM_EPS = 1e-6

BACKBONE = "layers"
STAGE = "mtp"

# A layer or stage number as canonical names write it: ASCII digits, no leading zero. `\d` with
# int() would also take "01" and a fullwidth "１" as 1, so that a second spelling of one
# tensor in a file would stand in for it; every name pattern with a number uses this one.
NUMBER = r"(?:0|[1-9][0-9]{0,5})"
_HC_NAME = re.compile(
    rf"^(?:(?P<owner>(?P<kind>layers|mtp)\.(?P<num>{NUMBER}))\.)?hc_(?P<site>attn|ffn|head)_(?P<part>fn|base|scale)$"
)
_OWNER = re.compile(rf"^(?P<kind>layers|mtp)\.(?P<num>{NUMBER})\.")


def mix_width(hc_mult: int) -> int:
    """Length of a site's mix vector and base: hc pre + hc post + hc*hc comb = (2 + hc) * hc."""
    return (2 + hc_mult) * hc_mult


def hc_from_mix_width(n: int) -> int | None:
    """The hc whose (2 + hc) * hc is n (a site's base length), or None when none is."""
    if n < 3:
        return None
    hc = int(round((n + 1) ** 0.5)) - 1
    return hc if hc >= 1 and mix_width(hc) == n else None


@dataclass(frozen=True, slots=True)
class HcName:
    """One HC tensor in canonical terms. kind is "layers", "mtp" or "" (the root head mix)."""

    kind: str
    num: int | None
    site: str
    part: str

    @property
    def owner(self) -> str:
        """"layers.3", "mtp.0", or "" for the root head mix."""
        return f"{self.kind}.{self.num}" if self.kind else ""

    @property
    def is_stage(self) -> bool:
        return self.kind == STAGE

    def canonical(self) -> str:
        return hc_tensor_name(self.owner, self.site, self.part)

    def layer(self, n_layers: int, n_stages: int) -> int:
        """The layer number `hc` uses: L, n_layers + S, or n_layers + n_stages for the head."""
        if self.kind == BACKBONE:
            return self.num  # type: ignore[return-value]
        if self.kind == STAGE:
            return n_layers + self.num  # type: ignore[operator]
        return n_layers + n_stages


def parse_hc_name(name: str) -> HcName | None:
    """A canonical (release) HC tensor name -> HcName; None for any other name."""
    if "hc_" not in name:  # cheap test first: 86 of 96,085 names in V4.1-Flash
        return None
    m = _HC_NAME.match(name)
    if m is None:
        return None
    return HcName(m["kind"] or "", int(m["num"]) if m["num"] is not None else None, m["site"], m["part"])


def hc_tensor_name(owner: str, site: str, part: str) -> str:
    """("layers.3", "attn", "fn") -> "layers.3.hc_attn_fn"; owner "" for the root head mix."""
    return f"{owner + '.' if owner else ''}hc_{site}_{part}"


def owner_of(name: str) -> tuple[str, int] | None:
    """("layers", 3) for "layers.3.anything", ("mtp", 0) for "mtp.0....", None otherwise."""
    m = _OWNER.match(name)
    return (m["kind"], int(m["num"])) if m else None


def owners(names: Iterable[str]) -> set[tuple[str, int]]:
    """Every owner_of the names, by C-level passes (a checkpoint: ~100k names, ~50 owners)."""
    return {owner_of(p) for p in set(map(itemgetter(0), filter(None, map(_OWNER.match, names))))}


# A sane-model bound on the number of residual streams: published configs use 4. A header
# or config past it is refused before any (2 + hc) * hc or hc x hc value is built.
MAX_HC_MULT = 64
# Sinkhorn iterations: the models use 20; each is two passes over the comb matrices.
MAX_SINKHORN_ITERS = 1000
