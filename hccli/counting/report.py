"""The count-params report: typed rows assembled from config, plan, inventory and
accounting. Its JSON is the rows' fields (hccli.base.jsonable); the tables are drawn
from the same rows in cli/render/count.py."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hccli.counting import sites as acc
from hccli.model.config.model import ModelConfig, load_config
from hccli.base.errors import HcError
from hccli.base.jsonable import OMIT_IF_NONE
from hccli.model.layers import LayerPlan, plan_layers
from hccli.base.vocab import HC_SITES

if TYPE_CHECKING:
    from hccli.counting.model import ModelTotals


@dataclass(frozen=True, slots=True)
class ConfigRow:
    """What the report read from the config: the header line of the tables."""

    path: str
    style: str
    family: str
    n_layers: int
    n_stages: int
    stage_kind: str
    hc_mult: int
    dim: int
    hc_sinkhorn_iters: int
    hc_eps: float
    head_mix: bool
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CountSiteRow:
    """One instance of a site kind: its components and how each number is made."""

    params: dict[str, int]
    detail: dict[str, str]
    total: int


@dataclass(frozen=True, slots=True)
class CountGroupRow:
    """One layer group and the HC parameters of its layers."""

    label: str
    first: int
    last: int
    layers: int
    kind: str
    description: str
    hc_params: int


@dataclass(frozen=True, slots=True)
class TextPathRow:
    """The HC parameters of the text path (backbone sites and head mix)."""

    sites: int
    hc_params: int
    head_mix_params: int  # of hc_params, those of V4's head mix (0 in V4.1, which has none)


@dataclass(frozen=True, slots=True)
class StagesRow:
    """The DSpark/MTP stages, counted beside the text path."""

    kind: str
    count: int
    sites: int
    hc_params: int


@dataclass(frozen=True, slots=True)
class LayerRow:
    """One row of --by-layer."""

    layer: int
    name: str
    roles: tuple[str, ...]
    compress_ratio: int
    group: str
    attn: int
    ffn: int
    head: int
    total: int


@dataclass(frozen=True, slots=True)
class CountReport:
    """Everything `hc count-params` prints, as typed rows."""

    config: ConfigRow
    per_site: dict[str, CountSiteRow]
    selection: acc.CountSelection
    groups: tuple[CountGroupRow, ...]
    text_path: TextPathRow
    stages: StagesRow
    layers: tuple[LayerRow, ...] | None = field(default=None, metadata=OMIT_IF_NONE)  # --by-layer
    model: ModelTotals | None = field(default=None, metadata=OMIT_IF_NONE)  # --model


def _config_row(c: ModelConfig) -> ConfigRow:
    return ConfigRow(c.source, c.style, c.family, c.n_layers, c.n_stages, c.stage_kind, c.hc_mult, c.dim,
                     c.hc_sinkhorn_iters, c.hc_eps, c.has_head_mix, c.notes)


def _per_site(sites: list[acc.HcSite]) -> dict[str, CountSiteRow]:
    out: dict[str, CountSiteRow] = {}
    for s in sites:
        if s.site not in out:
            out[s.site] = CountSiteRow(dict(s.params), dict(s.detail), s.total)
    return out


def _layer_rows(plan: LayerPlan, sites: list[acc.HcSite]) -> tuple[LayerRow, ...]:
    by_layer: dict[int, dict[str, int]] = {}
    for s in sites:
        if s.layer is not None:
            by_layer.setdefault(s.layer, {})[s.site] = s.total
    rows = []
    for info in plan.layers:
        per = by_layer.get(info.index, {})
        rows.append(LayerRow(info.index, info.name, info.tags, info.compress_ratio, plan.groups[info.group].label,
                             *(per.get(site, 0) for site in HC_SITES), sum(per.values())))
    return tuple(rows)


def _group_rows(plan: LayerPlan, sites: list[acc.HcSite]) -> tuple[CountGroupRow, ...]:
    totals = {g.index: 0 for g in plan.groups}
    for s in sites:
        if s.layer is not None:
            totals[plan.layers[s.layer].group] += s.total
    return tuple(CountGroupRow(g.label, g.first, g.last, g.size, g.kind, g.description, totals[g.index])
                 for g in plan.groups)


def build_report(
    config: str | Path | None,
    *,
    layers: frozenset[int] | None = None,
    groups: tuple[tuple[int, int], ...] | None = None,
    roles: Collection[str] | None = None,
    sites: Collection[str] | None = None,
    components: Collection[str] | None = None,
    stages: bool = False,
    by_layer: bool = False,
    model: bool = False,
) -> CountReport:
    """layers: layer numbers; groups: (first, last) bounds of whole groups; the rest canonical names."""
    cfg = load_config(config)
    plan = plan_layers(cfg)
    hc = acc.hc_sites(cfg)
    if layers is not None:
        acc.check_layers(cfg, plan, layers)
    sel = acc.select(
        cfg, hc, plan,
        layers=layers,
        groups=acc.groups_by_bounds(cfg, plan, groups) if groups is not None else None,
        roles=roles, site_filter=sites, components=components, include_stages=stages,
    )
    if sel.instances == 0:
        raise HcError(f"{cfg.source}: the selection ({sel.description}) matches no HC site "
                      f"(layers: 0-{cfg.n_layers - 1}, stages: {cfg.n_layers}-{len(plan.layers) - 1}, "
                      f"sites: attn, ffn{', head' if cfg.has_head_mix else ''})")
    if not sel.lines:
        raise HcError(f"{cfg.source}: the selected sites have no {'/'.join(sel.components)} component "
                      "(the head mix has pre and fn only)")
    totals = None
    if model:
        from hccli.model.inventory import build_inventory
        from hccli.counting.model import model_totals

        totals = model_totals(build_inventory(cfg, plan), cfg.family)
    text = [s for s in hc if not s.is_stage]
    staged = [s for s in hc if s.is_stage]
    return CountReport(
        config=_config_row(cfg),
        per_site=_per_site(hc),
        selection=sel,
        groups=_group_rows(plan, hc),
        text_path=TextPathRow(len(text), sum(s.total for s in text),
                              sum(s.total for s in text if s.site == "head")),
        stages=StagesRow(cfg.stage_kind, cfg.n_stages, len(staged), sum(s.total for s in staged)),
        layers=_layer_rows(plan, hc) if by_layer else None,
        model=totals,
    )
