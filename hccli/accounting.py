"""Views over the inventory: HC components per site and layer, selections, and
whole-model totals under each counting convention.

A site's hc tensors split into the components the model explorer names:
- pre  (reading weights):    hc offsets of hc_<site>_base + 1 scale
- post (writing weights):    hc offsets + 1 scale
- comb (stream combination): hc*hc offsets + 1 scale
- fn   (mix projection):     hc_<site>_fn, (2+hc)*hc x hc*dim
The head mix of the V4 family has a pre part only (hc offsets + 1 scale) and fn.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from hccli.config import ModelConfig
from hccli.errors import HcError
from hccli.inventory import COMPONENTS, Inventory, TensorSpec, build_hc_inventory
from hccli.layers import LayerPlan, format_ranges

HC_COMPONENTS = ("pre", "post", "comb", "fn")
HC_TITLES = {
    "pre": "Reading weights",
    "post": "Writing weights",
    "comb": "Stream combination",
    "fn": "Mix projection",
}
COMPONENT_ALIASES = {
    "pre": "pre", "read": "pre", "reading": "pre", "reading-weights": "pre",
    "post": "post", "write": "post", "writing": "post", "writing-weights": "post",
    "comb": "comb", "combination": "comb", "stream-combination": "comb", "sinkhorn": "comb",
    "fn": "fn", "proj": "fn", "projection": "fn", "mix": "fn", "mix-projection": "fn",
}
SITES = ("attn", "ffn", "head")
ROLES = ("window", "source", "reuse", "reindex", "compressed", "engram", "hash", "stage")

_HC_NAME = re.compile(r"^(?:(?P<prefix>(?:layers|mtp)\.\d+)\.)?hc_(?P<site>attn|ffn|head)_(?P<part>fn|base|scale)$")


@dataclass(frozen=True)
class HcSite:
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
    where = f"{owner + '.' if owner else ''}hc_{site}"
    if site == "head":
        expect_base, expect_scale, comps = hc, 1, (("pre", hc),)
    else:
        expect_base, expect_scale, comps = cfg.mix_hc, 3, (("pre", hc), ("post", hc), ("comb", hc * hc))
    if base.elements != expect_base or scale.elements != expect_scale:
        raise HcError(f"{where}_base/_scale hold {base.elements}/{scale.elements} values; "
                      f"expected {expect_base}/{expect_scale} for hc_mult {hc}")
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
        m = _HC_NAME.match(t.name)
        if not m:
            continue
        key = (m["prefix"] or "", m["site"])
        grouped[key][m["part"]] = t
        layer_of[key] = t.layer
    sites = []
    for (owner, site), parts in grouped.items():
        params, detail = _split(cfg, site, owner, parts)
        sites.append(HcSite(layer_of[(owner, site)] if owner else None, owner, site,
                            owner.startswith("mtp."), params, detail))
    return sites


# ---- selections --------------------------------------------------------------------------------

def parse_layers(spec: str, n_total: int, source: str = "--layers") -> set[int]:
    """'3-7', '2,8,14', '20-39', '0-3,8' -> layer indices; out of range is an error."""
    out: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not m:
            raise HcError(f"{source} {spec!r}: {part!r} is not a layer number or range like 3-7")
        a = int(m[1])
        b = int(m[2]) if m[2] is not None else a
        if a > b:
            raise HcError(f"{source} {spec!r}: range {part} runs backwards")
        if b >= n_total:
            raise HcError(f"{source} {spec!r}: layer {b} out of range; expected 0..{n_total - 1}")
        out.update(range(a, b + 1))
    if not out:
        raise HcError(f"{source} {spec!r}: selects no layer")
    return out


def parse_components(values: list[str]) -> set[str]:
    out = set()
    for v in values:
        for part in v.split(","):
            key = part.strip().lower().replace("_", "-")
            if key not in COMPONENT_ALIASES:
                raise HcError(f"--component {part!r}: expected one of pre, post, comb, fn "
                              "(or read, write, combination, projection)")
            out.add(COMPONENT_ALIASES[key])
    return out


def parse_sites(values: list[str]) -> set[str]:
    out = set()
    for v in values:
        for part in v.split(","):
            key = part.strip().lower()
            key = {"attention": "attn", "mlp": "ffn", "moe": "ffn"}.get(key, key)
            if key not in SITES:
                raise HcError(f"--site {part!r}: expected one of attn, ffn, head")
            out.add(key)
    return out


def parse_roles(values: list[str]) -> set[str]:
    out = set()
    for v in values:
        for part in v.split(","):
            key = part.strip().lower()
            key = {"reusing": "reuse", "re-index": "reindex", "full": "source", "kv-source": "source",
                   "dspark": "stage", "mtp": "stage"}.get(key, key)
            if key not in ROLES:
                raise HcError(f"--role {part!r}: expected one of {', '.join(ROLES)}")
            out.add(key)
    return out


@dataclass(frozen=True)
class SelectionLine:
    component: str
    site: str
    per_instance: int | None
    instances: int
    total: int

    @property
    def text(self) -> str:
        if self.site == "head":
            unit = "head mix" if self.instances == 1 else "head mixes"
        else:
            unit = "layer" if self.instances == 1 else "layers"
        head = f"{HC_TITLES[self.component]} ({self.site})"
        if self.per_instance is not None:
            return f"{head}: {self.per_instance:,} x {self.instances} {unit} = {self.total:,}"
        return f"{head}: {self.instances} {unit}, {self.total:,} in all"


@dataclass(frozen=True)
class Selection:
    sites: tuple[HcSite, ...]
    components: tuple[str, ...]
    lines: tuple[SelectionLine, ...]
    filtered: bool
    description: str
    per_instance: int | None = None
    instances: int = 0
    total: int = 0
    layers: tuple[int, ...] = field(default=())


def _uniform(values: list[int]) -> int | None:
    return values[0] if values and all(v == values[0] for v in values) else None


def select(
    cfg: ModelConfig,
    sites: list[HcSite],
    plan: LayerPlan,
    *,
    layers: set[int] | None = None,
    groups: set[int] | None = None,
    roles: set[str] | None = None,
    site_filter: set[str] | None = None,
    components: set[str] | None = None,
    include_stages: bool = False,
) -> Selection:
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
            if roles is not None and not roles.intersection(info.tags):
                continue
        chosen.append(s)
    comps = tuple(c for c in HC_COMPONENTS if components is None or c in components)
    lines = []
    for site in SITES:
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
        parts.append("site " + "/".join(s for s in SITES if s in site_filter))
    if components is not None:
        parts.append("component " + "/".join(comps))
    if include_stages and layers is None:
        parts.append("with stages")
    return Selection(
        sites=tuple(chosen),
        components=comps,
        lines=tuple(lines),
        filtered=bool(parts),
        description=", ".join(parts) if parts else "all HC of the text path",
        per_instance=_uniform(per_site),
        instances=len(chosen),
        total=sum(per_site),
        layers=tuple(sorted({s.layer for s in chosen if s.layer is not None})),
    )


@dataclass(frozen=True)
class ComponentTotals:
    component: str
    tensors: int
    stored_elements: int
    stored_bytes: int
    logical_params: int
    dtypes: dict[str, dict[str, int]]  # dtype -> {"tensors", "elements", "bytes"}


@dataclass(frozen=True)
class ModelTotals:
    tensors: int
    stored_bytes: int
    stored_elements: int
    scale_elements: int  # F8_E8M0 quantisation scales
    logical_params: int  # fp4 bytes count twice, scales not at all
    text_path_params: int  # logical, no vision, no stages
    backbone_params: int  # text path without Engram
    engram_params: int
    hc_params: int  # text path hyper-connections
    vision_params: int
    stage_params: int
    exact: bool
    components: tuple[ComponentTotals, ...]
    dtypes: dict[str, dict[str, int]]


def model_totals(inv: Inventory) -> ModelTotals:
    comp: dict[str, dict] = {c: {"tensors": 0, "el": 0, "bytes": 0, "logical": 0, "dtypes": {}} for c in COMPONENTS}
    dtypes: dict[str, dict[str, int]] = {}
    text = engram = hc = vision = stage = scales = 0
    for t in inv.tensors:
        el, nb, lp = t.elements, t.nbytes, t.logical_params
        c = comp[t.component]
        c["tensors"] += 1
        c["el"] += el
        c["bytes"] += nb
        c["logical"] += lp
        for bucket in (c["dtypes"], dtypes):
            d = bucket.setdefault(t.dtype, {"tensors": 0, "elements": 0, "bytes": 0})
            d["tensors"] += 1
            d["elements"] += el
            d["bytes"] += nb
        if t.is_scale:
            scales += el
        if t.scope == "text":
            text += lp
            if t.component == "engram":
                engram += lp
            if t.component == "hyper_connections":
                hc += lp
        elif t.scope == "vision":
            vision += lp
        else:
            stage += lp
    comps = tuple(
        ComponentTotals(name, v["tensors"], v["el"], v["bytes"], v["logical"], v["dtypes"])
        for name, v in comp.items() if v["tensors"]
    )
    return ModelTotals(
        tensors=len(inv.tensors),
        stored_bytes=sum(c.stored_bytes for c in comps),
        stored_elements=sum(c.stored_elements for c in comps),
        scale_elements=scales,
        logical_params=sum(c.logical_params for c in comps),
        text_path_params=text,
        backbone_params=text - engram,
        engram_params=engram,
        hc_params=hc,
        vision_params=vision,
        stage_params=stage,
        exact=inv.exact,
        components=comps,
        dtypes=dtypes,
    )
