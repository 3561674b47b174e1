"""Which tensors `hc diff` compares when some layers or sites are asked for, and how many bytes
that is (its progress bar counts them).

Layers are numbered as everywhere in `hc`: backbone layers, then the DSpark/MTP
stages, then the root head mix (where the family has one). An HC tensor is
selected by its own layer and site. With values asked for, any other tensor is
selected by the layer its name is under and the site it serves: `attn` for
`.attn.*` and `attn_norm`, `ffn` for `.ffn.*` and `ffn_norm`, `head` for
`head.weight` and the final `norm.weight` (numbered as the head mix). A tensor
that serves no site (an embedding, Engram, a stage's own projections) is selected
only while no site is asked for; one under no layer only while no layer is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from hccli.base.errors import HcError
from hccli.checkpoint.view import HcView, OtherTensor
from hccli.model.layers import check_layer_range, format_ranges
from hccli.base.vocab import BACKBONE, SITE_ORDER, STAGE, HcName, owner_of

_HEAD_TENSORS = ("head.weight", "norm.weight")


@dataclass(frozen=True)
class Selection:
    layers: frozenset[int] | None  # None: every layer (a LayerSpec until check_selection numbers it)
    sites: frozenset[str] | None  # None: every site

    @property
    def everything(self) -> bool:
        return self.layers is None and self.sites is None

    def hc(self, name: HcName, n_layers: int, n_stages: int) -> bool:
        return ((self.layers is None or name.layer(n_layers, n_stages) in self.layers)
                and (self.sites is None or name.site in self.sites))

    def other(self, name: str, n_layers: int, n_stages: int) -> bool:
        layer, site = _place(name, n_layers, n_stages)
        return ((self.layers is None or layer in self.layers)
                and (self.sites is None or site in self.sites))

    def describe(self) -> str:
        parts = []
        if self.layers is not None:
            parts.append(f"layer{'s' if len(self.layers) > 1 else ''} {format_ranges(self.layers)}")
        if self.sites is not None:
            sites = sorted(self.sites, key=SITE_ORDER.__getitem__)
            parts.append(f"site{'s' if len(sites) > 1 else ''} {', '.join(sites)}")
        return " and ".join(parts) or "everything"


def _place(name: str, n_layers: int, n_stages: int) -> tuple[int | None, str | None]:
    """(layer, site) of a canonical non-HC tensor name; None where it has none."""
    if name in _HEAD_TENSORS:
        return n_layers + n_stages, "head"
    owner = owner_of(name)
    if owner is None:
        return None, None
    kind, num = owner
    layer = num if kind == BACKBONE else n_layers + num if kind == STAGE else None
    rest = name.split(".", 2)[2] if name.count(".") >= 2 else ""
    for site in ("attn", "ffn"):
        if rest.startswith((f"{site}.", f"{site}_norm.")):
            return layer, site
    return layer, None


def check_selection(selection: Selection, n_layers: int, n_stages: int, head_mix: bool) -> Selection:
    """The selection with its layers as the checkpoints number them (mtp.N, head), or the one
    out-of-range line of every command."""
    if selection.layers is None:
        return selection
    return Selection(check_layer_range(selection.layers, n_layers, n_stages, head_mix, "A and B"), selection.sites)



# --- what is compared, and how much of it ---------------------------------------------------

def numbering(a: HcView, b: HcView) -> tuple[int, int]:
    """(backbone layers, stages) that both sides' layer numbers count."""
    return a.model.n_layers or b.model.n_layers or 0, max(a.n_stages, b.n_stages)


# Progress: n more bytes of values compared (both sides'), and what is being compared.
Advance = Callable[[int, str], None]


def no_advance(n: int, what: str) -> None:
    pass


def site_groups(a: HcView, b: HcView, selection: Selection) -> dict[tuple[str, str], list[HcName]]:
    """(owner, site) -> the selected HC names either side holds there."""
    n_layers, n_stages = numbering(a, b)
    sites: dict[tuple[str, str], list[HcName]] = {}
    for name in dict.fromkeys([*a.hc, *b.hc]):
        t = a.hc.get(name) or b.hc[name]
        if selection.hc(t.hc, n_layers, n_stages):
            sites.setdefault((t.hc.owner, t.hc.site), []).append(t.hc)
    return sites


def hc_bytes(a: HcView, b: HcView, names: list[HcName]) -> int:
    return sum(t.nbytes for v in (a, b) for h in names if (t := v.hc.get(h.canonical())) is not None)


def shared_others(a: HcView, b: HcView, selection: Selection) -> list[tuple[OtherTensor, OtherTensor]]:
    n_layers, n_stages = numbering(a, b)
    oa = a.others
    names = b.others.keys()
    if selection.layers is not None:  # a C-level reject first: ~100k names, a few thousand under the layers
        starts = layer_prefixes(selection.layers, n_layers, n_stages)
        names = [n for n in names if n.startswith(starts)]
    ob = b.others
    return [(oa[n], ob[n]) for n in names if n in oa and selection.other(n, n_layers, n_stages)]


def layer_prefixes(layers: frozenset[int], n_layers: int, n_stages: int) -> tuple[str, ...]:
    """How every name `_place` puts under one of `layers` begins (owner_of's numbers have no
    leading zeros; a backbone number past the backbone counts as it is, as _place counts it)."""
    out = [f"layers.{n}." for n in layers]
    out += [f"mtp.{n - n_layers}." for n in layers if n >= n_layers]
    out += list(_HEAD_TENSORS) if n_layers + n_stages in layers else []
    return tuple(out)


class Meter:
    """Bytes compared against all that will be: progress(done, total, what) for a bar with an ETA."""

    def __init__(self, total: int, progress: Callable[[int, int, str], None]):
        self.done, self.total, self.progress = 0, total, progress

    def __call__(self, n: int, what: str) -> None:
        self.done += n
        self.progress(min(self.done, self.total), self.total, what)


# sample hidden states diff sends through each side's site
SAMPLE_TOKENS = 16
SAMPLE_SEED = 0


@dataclass(frozen=True)
class DiffRequest:
    """What `hc diff` is asked beside the two sides. layers and sites (None: all) limit the HC
    comparison and the values compared; the inventory is always of the whole checkpoints."""

    atol: float = 0.0
    rtol: float = 0.0
    tokens: int = SAMPLE_TOKENS  # sample hidden states sent through each side's site
    seed: int = SAMPLE_SEED
    values_all: bool = False  # every shared tensor's values too, not only the HC ones
    layers: frozenset[int] | None = None
    sites: frozenset[str] | None = None
