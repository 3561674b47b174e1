"""The count-params report: plain data assembled from config, plan, inventory and
accounting, ready for the output layer (tables) or for JSON."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hccli import accounting as acc
from hccli.config import ModelConfig, load_config
from hccli.errors import HcError
from hccli.layers import LayerPlan, plan_layers


@dataclass(frozen=True)
class CountReport:
    config: ModelConfig
    plan: LayerPlan
    sites: tuple[acc.HcSite, ...]
    selection: acc.Selection
    by_layer: bool
    totals: acc.ModelTotals | None

    # --- derived views (cheap, computed on demand) ---
    def per_site(self) -> dict[str, dict[str, Any]]:
        """One instance of each site kind: its components and their arithmetic."""
        out: dict[str, dict[str, Any]] = {}
        for s in self.sites:
            if s.site in out:
                continue
            out[s.site] = {"params": dict(s.params), "detail": dict(s.detail), "total": s.total}
        return out

    def layer_rows(self) -> list[dict[str, Any]]:
        rows = []
        by_layer: dict[int, dict[str, int]] = {}
        for s in self.sites:
            if s.layer is not None:
                by_layer.setdefault(s.layer, {})[s.site] = s.total
        for info in self.plan.layers:
            per = by_layer.get(info.index, {})
            rows.append({
                "layer": info.index,
                "name": info.name,
                "roles": list(info.tags),
                "compress_ratio": info.compress_ratio,
                "group": self.plan.groups[info.group].label,
                **{site: per.get(site, 0) for site in ("attn", "ffn", "head")},
                "total": sum(per.values()),
            })
        return rows

    def group_rows(self) -> list[dict[str, Any]]:
        totals = {g.index: 0 for g in self.plan.groups}
        for s in self.sites:
            if s.layer is not None:
                totals[self.plan.layers[s.layer].group] += s.total
        return [
            {"label": g.label, "first": g.first, "last": g.last, "layers": g.size, "kind": g.kind,
             "description": g.description, "hc_params": totals[g.index]}
            for g in self.plan.groups
        ]

    def text_path(self) -> dict[str, int]:
        sites = [s for s in self.sites if not s.is_stage]
        return {"sites": len(sites), "hc_params": sum(s.total for s in sites),
                "head_mix_params": sum(s.total for s in sites if s.site == "head")}

    def stages(self) -> dict[str, Any]:
        sites = [s for s in self.sites if s.is_stage]
        return {"kind": self.config.stage_kind, "count": self.config.n_stages, "sites": len(sites),
                "hc_params": sum(s.total for s in sites)}

    def to_json(self) -> dict[str, Any]:
        c = self.config
        sel = self.selection
        doc: dict[str, Any] = {
            "config": {
                "path": c.source, "style": c.style, "family": c.family, "n_layers": c.n_layers,
                "n_stages": c.n_stages, "stage_kind": c.stage_kind, "hc_mult": c.hc_mult, "dim": c.dim,
                "hc_sinkhorn_iters": c.hc_sinkhorn_iters, "hc_eps": c.hc_eps, "head_mix": c.has_head_mix,
                "notes": list(c.notes),
            },
            "per_site": self.per_site(),
            "selection": {
                "description": sel.description,
                "per_instance": sel.per_instance,
                "instances": sel.instances,
                "total": sel.total,
                "components": list(sel.components),
                "layers": list(sel.layers),
                "lines": [
                    {"component": ln.component, "site": ln.site, "per_instance": ln.per_instance,
                     "instances": ln.instances, "total": ln.total, "text": ln.text}
                    for ln in sel.lines
                ],
            },
            "groups": self.group_rows(),
            "text_path": self.text_path(),
            "stages": self.stages(),
        }
        if self.by_layer:
            doc["layers"] = self.layer_rows()
        if self.totals is not None:
            doc["model"] = totals_json(self.totals)
        return doc


def totals_json(t: acc.ModelTotals) -> dict[str, Any]:
    return {
        "tensors": t.tensors,
        "stored_bytes": t.stored_bytes,
        "stored_elements": t.stored_elements,
        "stored_elements_without_scales": t.stored_elements - t.scale_elements,
        "scale_elements": t.scale_elements,
        "logical_params": t.logical_params,
        "text_path_params": t.text_path_params,
        "text_path_backbone_params": t.backbone_params,
        "text_path_engram_params": t.engram_params,
        "text_path_hc_params": t.hc_params,
        "vision_params": t.vision_params,
        "stage_params": t.stage_params,
        "exact": t.exact,
        "dtypes": t.dtypes,
        "components": {
            c.component: {"tensors": c.tensors, "stored_elements": c.stored_elements,
                          "stored_bytes": c.stored_bytes, "logical_params": c.logical_params,
                          "dtypes": c.dtypes}
            for c in t.components
        },
    }


def _groups_for(spec: str, plan: LayerPlan) -> set[int]:
    layers = acc.parse_layers(spec, len(plan.layers), "--group")
    return plan.groups_of(layers)


def build_report(
    config: str | Path | None,
    *,
    layers: str | None = None,
    group: str | None = None,
    role: list[str] | None = None,
    site: list[str] | None = None,
    component: list[str] | None = None,
    stages: bool = False,
    by_layer: bool = False,
    model: bool = False,
) -> CountReport:
    cfg = load_config(config)
    plan = plan_layers(cfg)
    sites = acc.hc_sites(cfg)
    n_total = len(plan.layers)
    sel = acc.select(
        cfg, sites, plan,
        layers=acc.parse_layers(layers, n_total) if layers is not None else None,
        groups=_groups_for(group, plan) if group is not None else None,
        roles=acc.parse_roles(role) if role else None,
        site_filter=acc.parse_sites(site) if site else None,
        components=acc.parse_components(component) if component else None,
        include_stages=stages,
    )
    if sel.instances == 0:
        raise HcError(f"{cfg.source}: the selection ({sel.description}) matches no HC site "
                      f"(layers: 0-{cfg.n_layers - 1}, stages: {cfg.n_layers}-{n_total - 1}, "
                      f"sites: attn, ffn{', head' if cfg.has_head_mix else ''})")
    if not sel.lines:
        raise HcError(f"{cfg.source}: the selected sites have no {'/'.join(sel.components)} component "
                      "(the head mix has pre and fn only)")
    totals = None
    if model:
        from hccli.inventory import build_inventory

        totals = acc.model_totals(build_inventory(cfg, plan))
    return CountReport(cfg, plan, tuple(sites), sel, by_layer, totals)
