"""Views over the inventory: HC components per site and layer, and selections of
them (whole-model totals are in counting/model.py, loaded only for --model).

A site's hc tensors split into the components the model explorer names:
- pre  (reading weights):    hc offsets of hc_<site>_base + 1 scale
- post (writing weights):    hc offsets + 1 scale
- comb (stream combination): hc*hc offsets + 1 scale
- fn   (mix projection):     hc_<site>_fn, (2+hc)*hc x hc*dim
The head mix of the V4 family has a pre part only (hc offsets + 1 scale) and fn.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import ClassVar

from hccli.model.config.model import ModelConfig
from hccli.base.errors import HcError
from hccli.model.inventory import build_hc_inventory
from hccli.model.inventory_types import TensorSpec
from hccli.base.jsonable import NOT_IN_JSON
from hccli.model.layers import LayerPlan, format_ranges
from hccli.base.vocab import HC_SITES, hc_tensor_name, parse_hc_name

HC_COMPONENTS = ("pre", "post", "comb", "fn")
# each component's title, in the tables and in a selection line's sentence, which --json carries too
HC_TITLES = {
    "pre": "Reading weights",
    "post": "Writing weights",
    "comb": "Stream combination",
    "fn": "Mix projection",
}
# what a layer can be selected by: its attention role, and the tags beside it (model/layers.py)
ROLES = ("window", "source", "reuse", "reindex", "compressed", "engram", "hash", "stage")


@dataclass(frozen=True, slots=True)
class HcSite:
    """One HC site: its owner and the parameters of each component."""

    layer: int | None  # None: the root head mix
    owner: str  # "layers.3", "mtp.2", or "" for the root head
    site: str
    is_stage: bool
    params: dict[str, int]  # component -> parameters
    detail: dict[str, str]  # component -> how the number is made, e.g. "16 offsets + 1 scale"

    @property
    def total(self) -> int:
        return sum(self.params.values())

    @property
    def label(self) -> str:
        return self.owner or "head"


def _split(cfg: ModelConfig, site: str, owner: str, parts: dict[str, TensorSpec]) -> tuple[dict, dict]:
    hc = cfg.hc_mult
    fn, base, scale = parts["fn"], parts["base"], parts["scale"]
    if site == "head":
        expect_base, expect_scale, comps = hc, 1, (("pre", hc),)
    else:
        expect_base, expect_scale, comps = cfg.mix_hc, 3, (("pre", hc), ("post", hc), ("comb", hc * hc))
    if base.elements != expect_base or scale.elements != expect_scale:
        raise HcError(f"{hc_tensor_name(owner, site, 'base')} / _scale hold {base.elements}/{scale.elements} "
                      f"values; expected {expect_base}/{expect_scale} for hc_mult {hc}")
    params, detail = {}, {}
    for comp, offsets in comps:
        params[comp] = offsets + 1
        detail[comp] = f"{offsets} offsets + 1 scale"
    params["fn"] = fn.elements
    detail["fn"] = " x ".join(str(d) for d in fn.shape)
    return params, detail


def hc_sites(cfg: ModelConfig, tensors: tuple[TensorSpec, ...] | None = None) -> list[HcSite]:
    """Every HC site of the model, from the inventory's hc tensors."""
    tensors = tensors if tensors is not None else build_hc_inventory(cfg)
    grouped: dict[tuple[str, str], dict[str, TensorSpec]] = defaultdict(dict)
    layer_of: dict[tuple[str, str], int | None] = {}
    for t in tensors:
        name = parse_hc_name(t.name)
        if name is None:
            continue
        key = (name.owner, name.site)
        grouped[key][name.part] = t
        layer_of[key] = t.layer
    sites = []
    for (owner, site), parts in grouped.items():
        params, detail = _split(cfg, site, owner, parts)
        sites.append(HcSite(layer_of[(owner, site)] if owner else None, owner, site,
                            owner.startswith("mtp."), params, detail))
    return sites


# ---- selections --------------------------------------------------------------------------------

def check_layers(cfg: ModelConfig, plan: LayerPlan, layers: frozenset[int]) -> None:
    """Layer numbers against this config: backbone 0..n-1, then the stages."""
    past = max(layers, default=0)
    if past >= len(plan.layers):
        raise HcError(f"{cfg.source}: layer {past} out of range; expected 0..{len(plan.layers) - 1} "
                      f"({cfg.n_layers} layers + {cfg.n_stages} stages)")


def groups_by_bounds(cfg: ModelConfig, plan: LayerPlan, ranges: tuple[tuple[int, int], ...]) -> frozenset[int]:
    """Layer ranges that must each run from one group's first layer to a group's last."""
    out: set[int] = set()
    for first, last in ranges:
        spanned = plan.groups_spanning(first, last)
        if spanned is None:
            asked = f"{first}-{last}" if last != first else f"{first}"
            raise HcError(f"{cfg.source}: no layer group or run of groups spans {asked}; the groups are "
                          f"{', '.join(g.label for g in plan.groups)}")
        out.update(spanned)
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class SelectionLine:
    """One component of one site kind in a selection, and its arithmetic."""

    component: str
    site: str
    per_instance: int | None
    instances: int
    total: int

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("text",)  # the sentence beside its numbers

    @property
    def text(self) -> str:
        """'Stream combination (attn): 17 x 5 layers = 85'."""
        if self.site == "head":
            unit = "head mix" if self.instances == 1 else "head mixes"
        else:
            unit = "layer" if self.instances == 1 else "layers"
        head = f"{HC_TITLES[self.component]} ({self.site})"
        if self.per_instance is not None:
            return f"{head}: {self.per_instance:,} x {self.instances} {unit} = {self.total:,}"
        return f"{head}: {self.instances} {unit}, {self.total:,} in all"


@dataclass(frozen=True, slots=True)
class CountSelection:
    """The selected sites and components, with their total."""

    description: str
    per_instance: int | None  # None when the selected sites differ
    instances: int
    total: int
    components: tuple[str, ...]
    layers: tuple[int, ...]
    lines: tuple[SelectionLine, ...]
    sites: tuple[HcSite, ...] = field(default=(), metadata=NOT_IN_JSON)
    filtered: bool = field(default=False, metadata=NOT_IN_JSON)


def _uniform(values: list[int]) -> int | None:
    return values[0] if values and all(v == values[0] for v in values) else None


def select(
    cfg: ModelConfig,
    sites: list[HcSite],
    plan: LayerPlan,
    *,
    layers: frozenset[int] | None = None,
    groups: frozenset[int] | None = None,
    roles: Collection[str] | None = None,
    site_filter: Collection[str] | None = None,
    components: Collection[str] | None = None,
    include_stages: bool = False,
) -> CountSelection:
    """Pick sites and components. An instance is one site of one layer."""
    chosen = []
    layer_filtered = layers is not None or groups is not None or roles is not None
    for s in sites:
        if site_filter is not None and s.site not in site_filter:
            continue
        if s.layer is None:  # the root head mix belongs to no layer
            if layer_filtered:
                continue
        else:
            info = plan.layers[s.layer]
            if layers is not None:
                if s.layer not in layers:
                    continue
            elif info.is_stage and not include_stages:
                continue
            if groups is not None and info.group not in groups:
                continue
            if roles is not None and not any(tag in roles for tag in info.tags):
                continue
        chosen.append(s)
    comps = tuple(c for c in HC_COMPONENTS if components is None or c in components)
    lines = []
    for site in HC_SITES:
        members = [s for s in chosen if s.site == site]
        for comp in comps:
            vals = [s.params[comp] for s in members if comp in s.params]
            if vals:
                lines.append(SelectionLine(comp, site, _uniform(vals), len(vals), sum(vals)))
    per_site = [sum(s.params.get(c, 0) for c in comps) for s in chosen]
    parts = []
    if layers is not None:
        parts.append(f"layers {format_ranges(sorted(layers))}")
    if groups is not None:
        parts.append("group " + ", ".join(plan.groups[g].label for g in sorted(groups)))
    if roles is not None:
        parts.append("role " + "/".join(sorted(roles)))
    if site_filter is not None:
        parts.append("site " + "/".join(s for s in HC_SITES if s in site_filter))
    if components is not None:
        parts.append("component " + "/".join(comps))
    if include_stages and layers is None:
        parts.append("with stages")
    return CountSelection(
        description=", ".join(parts) if parts else "all HC of the text path",
        per_instance=_uniform(per_site),
        instances=len(chosen),
        total=sum(per_site),
        components=comps,
        layers=tuple(sorted({s.layer for s in chosen if s.layer is not None})),
        lines=tuple(lines),
        sites=tuple(chosen),
        filtered=bool(parts),
    )
