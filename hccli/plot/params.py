"""The params figure (`hc count-params --plot`): parameters per model component under
one counting convention, the HC parameters per component and site, and per layer
group; hyper-connections highlighted. Sizes span 1e2..1e12, so the axes are log."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hccli.base.errors import HcError
from hccli.plot import Drawn, clean_text, new_figure, plot_format, plot_style, save_figure
from hccli.plot.values import as_float

# The per-component keys of count-params' JSON (`model.components[c][key]`) and what they count.
CONVENTIONS = {
    "logical_params": "logical parameters (an fp4 byte holds two; scales are not parameters)",
    "stored_elements": "stored elements (as in the shard headers)",
    "stored_bytes": "stored bytes (what the shards hold)",
}
HC_COMPONENT = "hyper_connections"  # count-params' name for the HC component of the model
HIGHLIGHT, PLAIN, STAGE = "#d62728", "#9e9e9e", "#2ca02c"
_MAX_BARS = 200  # more is no picture; it also bounds what a hostile document makes us draw


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    highlight: bool = False


@dataclass(frozen=True)
class ParamsFigureData:
    title: str  # the config
    convention: str  # a CONVENTIONS key: what the component bars count
    components: tuple[Bar, ...]  # the whole model's components; empty unless counted (--model)
    hc_parts: tuple[Bar, ...]  # HC parameters per component and site
    groups: tuple[Bar, ...]  # HC parameters per layer group (stages highlighted as such)

    def __post_init__(self) -> None:
        if self.convention not in CONVENTIONS:
            raise HcError(f"params plot: unknown convention {clean_text(self.convention, 40)!r}; expected one of "
                          + ", ".join(CONVENTIONS))
        if not (self.components or self.hc_parts or self.groups):
            raise HcError(f"{clean_text(self.title)}: nothing to plot (no components, HC parts or groups)")
        if max(len(self.components), len(self.hc_parts), len(self.groups)) > _MAX_BARS:
            raise HcError(f"params plot: more than {_MAX_BARS} bars in one panel")


def params_data_from_json(doc: Any, convention: str = "logical_params", where: str = "count-params JSON") \
        -> ParamsFigureData:
    """From `hc count-params --json` (with `model` when run with --model), validated."""
    if not isinstance(doc, dict):
        raise HcError(f"{where}: expected an object")
    if convention not in CONVENTIONS:
        raise HcError(f"{where}: unknown convention {clean_text(convention, 40)!r}; expected one of "
                      + ", ".join(CONVENTIONS))
    title = clean_text(str((doc.get("config") or {}).get("path", "?")))
    comps: list[Bar] = []
    model = doc.get("model")
    if isinstance(model, dict):
        for name, c in (model.get("components") or {}).items():
            if not isinstance(c, dict):
                raise HcError(f"{where}: key 'model.components.{clean_text(str(name), 40)}': expected an object")
            comps.append(Bar(clean_text(str(name), 40),
                             as_float(c.get(convention), f"{where}: key 'model.components.{name}.{convention}'"),
                             name == HC_COMPONENT))
    parts = [Bar(f"{clean_text(str(ln.get('component')), 12)} ({clean_text(str(ln.get('site')), 8)})",
                 as_float(ln.get("total"), f"{where}: key 'selection.lines[{i}].total'"), True)
             for i, ln in enumerate(_list(doc.get("selection", {}).get("lines"), f"{where}: key 'selection.lines'"))]
    groups = [Bar(f"{clean_text(str(g.get('label')), 16)}: {clean_text(str(g.get('description')), 96)}",
                  as_float(g.get("hc_params"), f"{where}: key 'groups[{i}].hc_params'"), g.get("kind") == "stages")
              for i, g in enumerate(_list(doc.get("groups"), f"{where}: key 'groups'"))]
    return ParamsFigureData(title, convention, tuple(comps), tuple(parts), tuple(groups))


def _list(x: Any, where: str) -> list:
    if not isinstance(x, list) or not all(isinstance(e, dict) for e in x):
        raise HcError(f"{where}: expected a list of objects")
    return x


def _panel(ax: Any, bars: tuple[Bar, ...], colour_on: str, title: str, xlabel: str) -> np.ndarray:
    y = np.arange(len(bars))
    values = np.array([b.value for b in bars], dtype=np.float64)
    drawn = ax.barh(y, np.where(values > 0, values, np.nan), color=[colour_on if b.highlight else PLAIN
                                                                     for b in bars])
    ax.set_yticks(y, [b.label for b in bars], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_title(title, fontsize=9, loc="left")
    ax.set_xlabel(xlabel, fontsize=7)
    ax.grid(True, axis="x", which="major", linewidth=0.3, alpha=0.5)
    for yy, v in zip(y, values):
        ax.text(v if v > 0 else 1, yy, f" {v:,.0f}", va="center", fontsize=6)
    for label in ax.get_yticklabels():
        label.set_parse_math(False)  # labels come from the config's file
    positive = values[values > 0]
    if positive.size:
        ax.set_xlim(10 ** math.floor(math.log10(positive.min())), 10 ** (math.ceil(math.log10(positive.max())) + 1))
    # what the bars hold, read back (a zero or negative value has no bar on a log axis: NaN)
    return np.array([b.get_width() for b in drawn], dtype=np.float64)


BARS_WIDTH = 6.2  # inches of the bars' axes, whatever the labels beside them take


def draw_params(data: ParamsFigureData) -> Drawn:
    """The figure, unsaved. Call inside plot_style() (plot_params does)."""
    panels = [p for p in (
        ("components", data.components, HIGHLIGHT,
         f"the model by component; convention: {data.convention}", CONVENTIONS[data.convention]),
        ("hc_parts", data.hc_parts, HIGHLIGHT, "HC parameters by component and site", "parameters (F32)"),
        ("groups", data.groups, STAGE, "HC parameters by layer group (stages green)", "parameters (F32)"),
    ) if p[1]]
    heights = [0.9 + 0.2 * len(p[1]) for p in panels]
    height = math.ceil(0.8 + sum(heights))
    fig = new_figure(11, height)
    fig.suptitle(clean_text(data.title), x=0.02, ha="left", fontsize=10, parse_math=False)
    arrays: dict[str, np.ndarray] = {}
    axes = []
    y = 0.8
    for (key, bars, colour, title, xlabel), h in zip(panels, heights):
        ax = fig.add_axes([0.3, 1 - (y + h - 0.55) / height, 0.6, (h - 0.9) / height])
        arrays[key] = _panel(ax, bars, colour, title, xlabel)
        axes.append(ax)
        y += h
    # room on the left for the longest bar label as drawn (a group's description is long), never less
    # than 3.6 inches; the bars keep their width, the figure grows
    renderer = fig.canvas.get_renderer()
    labels = max(t.get_window_extent(renderer).width for ax in axes for t in ax.get_yticklabels()) / fig.dpi
    left = max(3.6, labels + 0.4)
    width = math.ceil(left + BARS_WIDTH + 1.2)
    fig.set_size_inches(width, height)
    for ax in axes:
        box = ax.get_position()
        ax.set_position([left / width, box.y0, BARS_WIDTH / width, box.height])
    return Drawn(fig, arrays)


def plot_params(data: ParamsFigureData, path: str | Path, *, forbidden_dir: str | Path | None = None) -> Drawn:
    """Draw the params figure and write it to path (.png or .svg)."""
    plot_format(path)
    with plot_style():
        drawn = draw_params(data)
        save_figure(drawn.figure, path, forbidden_dir=forbidden_dir)
    return drawn
