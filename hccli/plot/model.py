"""The model figure (`hc inspect --plot`): every site's comb matrix at zero mixes as a
small heatmap, laid out by layer group, beside per-layer curves of the scales and
of the pre/post weights at zero mixes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from hccli.base.errors import HcError
from hccli.plot import Drawn, clean_text, new_figure, plot_style, save_figure
from hccli.plot.values import as_matrix, as_vector

MAX_PLOT_LAYERS = 256  # the largest family member has ~64; beyond this a figure would be metres tall
COLS = 10  # layers per grid row: a 20-layer group wraps onto two rows
CELL = 0.62  # inches per heatmap, gap included
ROLE_COLOURS = {"window": "#7f7f7f", "source": "#d62728", "reindex": "#ff7f0e", "reuse": "#1f77b4",
                "compressed": "#9467bd", "stage": "#2ca02c"}
SITE_STYLE = {"attn": ("-", "o"), "ffn": ("--", "s"), "head": ("", "^")}
SCALE_NAMES = ("pre", "post", "comb")


@dataclass(frozen=True)
class SiteValues:
    """One site's HC values as `hc inspect --json` reports them (an `hc` entry)."""

    layer: int
    site: str  # attn | ffn | head
    is_stage: bool
    scale: np.ndarray  # [3]: pre, post, comb scale; [1] for the head mix
    pre: np.ndarray  # [hc]: the pre weights at zero mixes
    post: np.ndarray | None  # [hc]; None for the head mix
    comb: np.ndarray | None  # [hc, hc]: row j = from stream j, column k = to stream k

    @classmethod
    def from_json(cls, doc: Any, where: str = "hc entry") -> "SiteValues":
        """An entry of inspect's JSON `hc` list, validated (it may come from a file)."""
        if not isinstance(doc, dict):
            raise HcError(f"{where}: expected an object with layer, site, scale, pre_from_base")
        layer, site = doc.get("layer"), doc.get("site")
        if not isinstance(layer, int) or isinstance(layer, bool) or not 0 <= layer < 1_000_000:
            raise HcError(f"{where}: key 'layer': expected a layer number, got {clean_text(repr(layer), 40)}")
        if site not in SITE_STYLE:
            raise HcError(f"{where}: key 'site': expected attn, ffn or head, got {clean_text(repr(site), 40)}")
        where = f"{where} (layer {layer} {site})"
        pre = as_vector(doc.get("pre_from_base"), f"{where}: key 'pre_from_base'")
        hc = pre.size
        if site == "head":
            return cls(layer, site, bool(doc.get("stage")), as_vector(doc.get("scale"), f"{where}: key 'scale'", 1),
                       pre, None, None)
        return cls(layer, site, bool(doc.get("stage")), as_vector(doc.get("scale"), f"{where}: key 'scale'", 3), pre,
                   as_vector(doc.get("post_from_base"), f"{where}: key 'post_from_base'", hc),
                   as_matrix(doc.get("comb_from_base"), f"{where}: key 'comb_from_base'", hc))


@dataclass(frozen=True)
class LayerSlot:
    layer: int
    role: str  # window | source | reindex | reuse | compressed | stage


@dataclass(frozen=True)
class GroupRow:
    label: str  # "2-7"
    description: str  # "KV source 2, 5 reusing (ratio 2)"
    layers: tuple[LayerSlot, ...]


@dataclass(frozen=True)
class ModelFigureData:
    label: str  # the checkpoint, as the user named it
    dialect: str | None
    revision: str | None
    sites: tuple[SiteValues, ...]
    groups: tuple[GroupRow, ...] = ()  # the layer plan's; layers in no group are drawn after them
    plan_note: str = ""  # said in the figure when the groups are not the config's plan

    def __post_init__(self) -> None:
        if not self.sites:
            raise HcError(f"{clean_text(self.label)}: no HC values to plot (no readable hc_*_base/hc_*_scale)")
        n = len({s.layer for s in self.sites})
        if n > MAX_PLOT_LAYERS:
            raise HcError(f"{clean_text(self.label)}: HC values of {n} layers; the plot draws at most {MAX_PLOT_LAYERS}")


def groups_from_plan(plan: Any) -> tuple[GroupRow, ...]:
    """GroupRows from a hccli.model.layers.LayerPlan (stages get the role "stage")."""
    return tuple(GroupRow(g.label, g.description,
                          tuple(LayerSlot(i.index, "stage" if i.is_stage else i.role)
                                for i in plan.layers if i.group == g.index))
                 for g in plan.groups)


def sites_from_json(entries: Iterable[Any], where: str = "hc") -> tuple[SiteValues, ...]:
    return tuple(SiteValues.from_json(e, f"{where}[{i}]") for i, e in enumerate(entries))


NO_PLAN_NOTE = ("no usable config: layer roles unknown, so the backbone is one group and the stages another "
                "(--config config.json gives the layer plan)")


def groups_without_plan(sites: Sequence[SiteValues]) -> tuple[GroupRow, ...]:
    """What can be grouped without a config: the backbone layers, then the stages."""
    out = []
    for stage, desc in ((False, "backbone, roles unknown (no config)"), (True, "stages")):
        layers = sorted({s.layer for s in sites if s.is_stage == stage and s.comb is not None})
        if layers:
            label = f"{layers[0]}-{layers[-1]}" if len(layers) > 1 else str(layers[0])
            out.append(GroupRow(label, desc, tuple(LayerSlot(i, "stage" if stage else "") for i in layers)))
    return tuple(out)


def inspect_figure_data(document: Any, config: Any = None) -> ModelFigureData:
    """The figure of `hc inspect --plot`, from the InspectDocument that `--json` prints (its
    `hc` entries through the same JSON conversion, so that what is drawn is what is printed)
    and the checkpoint's ModelConfig, whose layer plan lays out the grid; None without one."""
    from hccli.base.jsonable import to_jsonable

    sites = sites_from_json(to_jsonable(list(document.hc)))
    remote = document.remote
    revision = None
    if remote is not None:  # a local checkpoint has no revision to name
        revision = remote.revision if not remote.sha or remote.sha == remote.revision \
            else f"{remote.revision} ({remote.sha[:12]})"
    if config is not None:
        from hccli.model.layers import plan_layers

        return ModelFigureData(document.path, document.dialect.name, revision, sites,
                               groups_from_plan(plan_layers(config)))
    return ModelFigureData(document.path, document.dialect.name, revision, sites, groups_without_plan(sites),
                           NO_PLAN_NOTE)


def _rows(data: ModelFigureData) -> list[tuple[str, str, list[LayerSlot]]]:
    """Grid rows: (group label, description, up to COLS layers), groups in order, wrapped."""
    with_comb = {s.layer for s in data.sites if s.comb is not None}
    stages = {s.layer for s in data.sites if s.is_stage}
    placed: set[int] = set()
    rows = []
    groups = list(data.groups)
    rest = sorted(with_comb - {slot.layer for g in groups for slot in g.layers})
    if rest:
        groups.append(GroupRow("other", "layers in no group", tuple(
            LayerSlot(i, "stage" if i in stages else "") for i in rest)))
    for g in groups:
        slots = [s for s in g.layers if s.layer in with_comb and s.layer not in placed]
        placed.update(s.layer for s in slots)
        for k in range(0, len(slots), COLS):
            rows.append((g.label if k == 0 else "", g.description if k == 0 else "", slots[k:k + COLS]))
    return rows


def _norm_limits(sites: Sequence[SiteValues]) -> tuple[float, float]:
    vals = [s.comb[np.isfinite(s.comb)] for s in sites if s.comb is not None]
    flat = np.concatenate(vals) if vals else np.zeros(0)
    if flat.size == 0:
        return 0.0, 1.0  # nothing finite to scale by: the unit range doubly-stochastic matrices live in
    lo, hi = min(0.0, float(flat.min())), float(flat.max())
    return lo, (hi if hi > lo else lo + 1.0)


def _title(data: ModelFigureData) -> str:
    bits = [clean_text(data.label)]
    if data.dialect:
        bits.append(f"dialect {clean_text(data.dialect, 40)}")
    if data.revision:
        bits.append(f"revision {clean_text(data.revision, 48)}")
    return ", ".join(bits)


def draw_model(data: ModelFigureData) -> Drawn:
    """The figure, unsaved. Call inside plot_style() (plot_model does)."""
    rows = _rows(data)
    by_key = {(s.layer, s.site): s for s in data.sites}
    label_w, grid_w, gap, curves_w, margin = 1.7, COLS * CELL, 0.9, 5.2, 0.3
    row_h, top, bar_h = 2 * CELL + 0.28, 0.9, 0.75
    grid_h = max(1, len(rows)) * row_h
    width = math.ceil(margin + label_w + grid_w + gap + curves_w + margin)
    height = math.ceil(top + max(grid_h + bar_h, 7.5) + margin)
    fig = new_figure(width, height)
    arrays: dict[str, np.ndarray] = {}

    def rect(x: float, y: float, w: float, h: float) -> list[float]:  # inches from the top left
        return [x / width, 1 - (y + h) / height, w / width, h / height]

    fig.suptitle(_title(data), x=margin / width, y=1 - 0.2 / height, ha="left", va="top", fontsize=11,
                 parse_math=False)
    hcs = sorted({s.pre.size for s in data.sites if s.site != "head"})
    n_stage = len({s.layer for s in data.sites if s.is_stage})
    fig.text(margin / width, 1 - 0.52 / height,
             f"comb matrix each site's base gives at zero mixes (hc {'/'.join(map(str, hcs)) or '?'}; "
             f"{sum(len(r[2]) for r in rows)} layers with a comb, {n_stage} stages framed green); "
             "label and frame colour: the layer's role", fontsize=8, va="top", color="#444444")
    if data.plan_note:
        fig.text(margin / width, 1 - 0.70 / height, clean_text(data.plan_note, 200), fontsize=7.5, va="top",
                 color="#b22222", parse_math=False, gid="plan-note")

    lo, hi = _norm_limits(data.sites)
    from matplotlib.colors import Normalize

    norm = Normalize(lo, hi)
    import matplotlib

    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#ff00ff")  # non-finite values stand out
    arrays["norm"] = np.array([lo, hi])
    x0 = margin + label_w
    # One Axes for the whole grid, in inches (y down), one image per site placed by its
    # extent: an Axes per heatmap would take most of the figure's time.
    grid = fig.add_axes(rect(x0 - 0.4, top, grid_w + 0.4, grid_h))
    grid.set_axis_off()
    from matplotlib.patches import Rectangle

    side = CELL - 0.08
    for r, (glabel, desc, slots) in enumerate(rows):
        y = r * row_h
        if glabel:
            fig.text(margin / width, 1 - (top + y + 0.3) / height, f"{glabel}\n" + _wrap(desc, 28), fontsize=7.5,
                     va="top", ha="left", parse_math=False)
        for c, slot in enumerate(slots):
            colour = ROLE_COLOURS.get(slot.role, "#000000")
            x = 0.4 + c * CELL
            grid.text(x + side / 2, y + 0.25, f"{slot.layer} {clean_text(slot.role, 12)}", fontsize=6.5,
                      color=colour, ha="center", va="bottom", gid=f"label-{slot.layer}")
            for k, site in enumerate(("attn", "ffn")):
                s = by_key.get((slot.layer, site))
                yk = y + 0.28 + k * CELL
                if c == 0:
                    grid.text(x - 0.06, yk + side / 2, site, fontsize=7, rotation=90, ha="right", va="center")
                if s is None or s.comb is None:
                    grid.add_patch(Rectangle((x, yk), side, side, facecolor="#eeeeee", edgecolor="none"))
                    continue
                # extent (left, right, bottom, top) on a y-down axis: row 0 (from stream 1) on top
                im = grid.imshow(s.comb, cmap=cmap, norm=norm, interpolation="nearest", aspect="auto",
                                 extent=(x, x + side, yk + side, yk))
                im.set_gid(f"comb-{slot.layer}-{site}")
                arrays[f"comb/{slot.layer}/{site}"] = np.ma.filled(np.ma.asarray(im.get_array(), dtype=float), np.nan)
                grid.add_patch(Rectangle((x, yk), side, side, fill=False, edgecolor=colour,
                                         linewidth=2.0 if s.is_stage else 0.8))
    grid.set_xlim(0, grid_w + 0.4)
    grid.set_ylim(grid_h, 0)
    cax = fig.add_axes(rect(x0, top + grid_h + 0.25, grid_w - 0.08, 0.14))
    from matplotlib.cm import ScalarMappable

    bar = fig.colorbar(ScalarMappable(norm, cmap), cax=cax, orientation="horizontal")
    bar.set_label("comb at zero mixes (row j = from stream j, column k = to stream k; magenta = not finite)",
                  fontsize=7)
    _curves(fig, data, rect, x0 + grid_w + gap, top, curves_w, max(grid_h + bar_h, 7.5) - 0.2, arrays)
    return Drawn(fig, arrays)


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(clean_text(text), width)[:4])


def _curves(fig: Any, data: ModelFigureData, rect: Any, x: float, y: float, w: float, h: float,
            arrays: dict[str, np.ndarray]) -> None:
    """Three panels by layer: the scales, the pre weights, the post weights (at zero mixes)."""
    panel_h = (h - 0.9) / 3
    axes = [fig.add_axes(rect(x, y + i * (panel_h + 0.45), w, panel_h)) for i in range(3)]
    stages = sorted({s.layer for s in data.sites if s.is_stage})
    starts = sorted({g.layers[0].layer for g in data.groups if g.layers})
    for ax in axes:
        ax.grid(True, linewidth=0.3, alpha=0.5)
        for b in starts[1:]:
            ax.axvline(b - 0.5, color="#bbbbbb", linewidth=0.6, linestyle=":")
        if stages:
            ax.axvspan(stages[0] - 0.5, stages[-1] + 0.5, color=ROLE_COLOURS["stage"], alpha=0.12, linewidth=0)
    sc_ax, pre_ax, post_ax = axes
    if stages:
        sc_ax.text(stages[0] - 0.4, 1.0, "stages", transform=sc_ax.get_xaxis_transform(), fontsize=7, va="bottom",
                   color=ROLE_COLOURS["stage"])
    scale_colours = ("#1f77b4", "#d62728", "#2ca02c")
    for site, (ls, marker) in SITE_STYLE.items():
        ss = sorted((s for s in data.sites if s.site == site), key=lambda s: s.layer)
        if not ss:
            continue
        xs = np.array([s.layer for s in ss], dtype=float)
        arrays[f"layers/{site}"] = xs
        for p, name in enumerate(SCALE_NAMES[: 1 if site == "head" else 3]):
            line, = sc_ax.plot(xs, [s.scale[p] for s in ss], linestyle=ls, marker=marker, markersize=2.5,
                               linewidth=0.9, color=scale_colours[p], label=f"{name} scale ({site})")
            arrays[f"scale/{site}/{name}"] = np.asarray(line.get_ydata(), dtype=float)
        for ax, part in ((pre_ax, "pre"), (post_ax, "post")):
            if part == "post" and site == "head":
                continue
            vals = [getattr(s, part) for s in ss]
            width = max(v.size for v in vals)
            for k in range(width):
                col = [float(v[k]) if k < v.size else np.nan for v in vals]
                line, = ax.plot(xs, col, linestyle=ls, marker=marker, markersize=2.5, linewidth=0.9,
                                color=f"C{k % 10}", label=f"stream {k + 1} ({site})")
                arrays[f"{part}/{site}/{k}"] = np.asarray(line.get_ydata(), dtype=float)
    sc_ax.set_title("scales (pre / post / comb; attn solid, ffn dashed)", fontsize=8)
    pre_ax.set_title("pre weights at zero mixes, per stream", fontsize=8)
    post_ax.set_title("post weights at zero mixes, per stream", fontsize=8)
    post_ax.set_xlabel("layer (stages after the backbone)")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=5.5, ncol=4, loc="upper right", framealpha=0.6)  # a fixed place: "best" is slow

def plot_model(data: ModelFigureData, path: str | Path, *, forbidden_dir: str | Path | None = None) -> Drawn:
    """Draw the model figure and write it to path (.png or .svg)."""
    from hccli.plot import plot_format

    plot_format(path)  # a wrong extension fails before any drawing
    with plot_style():
        drawn = draw_model(data)
        save_figure(drawn.figure, path, forbidden_dir=forbidden_dir)
    return drawn
