"""The diff figure (`hc diff A B --plot`): each site's largest absolute difference
per part (fn / base / scale) on a log axis by layer, the tolerance as a line.

A log axis has no place for 0, and equal tensors are the common case: they are
drawn hollow in a strip of their own under the axis, "= 0 (equal)", which has no
scale, so that no equal tensor reads as a small difference. NaN/Inf differences
are drawn as x in a strip above it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hccli.base.errors import HcError
from hccli.plot import Drawn, clean_text, new_figure, plot_format, plot_style, save_figure

PART_COLOURS = {"fn": "#1f77b4", "base": "#ff7f0e", "scale": "#2ca02c"}
SITE_MARKERS = {"attn": "o", "ffn": "s", "head": "^"}
MAX_ROWS = 20_000  # 3 parts x 3 sites x a few hundred layers is far below; bounds a hostile document
SITE_OFFSET = {"attn": -0.15, "ffn": 0.15, "head": 0.0}  # attn and ffn of one layer side by side


@dataclass(frozen=True)
class DiffRow:
    layer: int
    site: str  # attn | ffn | head
    part: str  # fn | base | scale
    max_abs: float  # largest |a - b| over the tensor; 0 when equal, NaN/Inf when either is not finite


@dataclass(frozen=True)
class DiffFigureData:
    label_a: str
    label_b: str
    rows: tuple[DiffRow, ...]
    tolerance: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.tolerance) and self.tolerance >= 0):
            raise HcError(f"diff plot: tolerance must be a finite number >= 0, got {self.tolerance!r}")
        if len(self.rows) > MAX_ROWS:
            raise HcError(f"diff plot: {len(self.rows)} site parts; the plot draws at most {MAX_ROWS}")
        for r in self.rows:
            if r.part not in PART_COLOURS or r.site not in SITE_MARKERS:
                raise HcError(f"diff plot: layer {r.layer}: unknown site/part {clean_text(r.site, 20)!r}/"
                              f"{clean_text(r.part, 20)!r}; expected attn|ffn|head and fn|base|scale")


def diff_figure_data(report: Any) -> DiffFigureData:
    """From a hccli.diffing.diff.DiffReport: every HC tensor compared on both sides (a missing or
    reshaped one has no difference to draw; the table names it), the absolute tolerance as
    the line."""
    rows = tuple(DiffRow(r.layer, r.site, r.part, float(r.max_abs)) for r in report.sites if r.max_abs is not None)
    return DiffFigureData(report.label_a, report.label_b, rows, float(report.atol))


def axis_limits(values: np.ndarray, tolerance: float) -> tuple[float, float]:
    """(floor, ceiling): powers of ten two decades below the smallest and above the
    largest positive finite value among the differences and the tolerance."""
    pos = values[np.isfinite(values) & (values > 0)]
    marks = np.concatenate([pos, [tolerance] if tolerance > 0 else []])
    if marks.size == 0:
        return 1e-12, 1.0  # all equal and an exact tolerance: a floor is all there is to show
    return 10.0 ** (math.floor(math.log10(marks.min())) - 2), 10.0 ** (math.ceil(math.log10(marks.max())) + 2)


STRIP_ROW = {"fn": 0.5, "base": 0.0, "scale": -0.5}  # a row per part in a strip: equal parts of a site all show
STRIP = 0.045  # height of the "= 0" and "NaN / Inf" strips, a fraction of the figure


def _strip(fig: Any, box: list[float], ax: Any, words: str) -> Any:
    """A band beside the log axis for what has no place on it: no y scale, so nothing in it
    reads as a value."""
    strip = fig.add_axes(box, sharex=ax)
    strip.set_ylim(-1, 1)
    strip.set_yticks([])
    strip.set_facecolor("#f3f3f3")
    strip.text(1.005, 0, words, transform=strip.get_yaxis_transform(), fontsize=7, va="center", color="#666666")
    return strip


def draw_diff(data: DiffFigureData) -> Drawn:
    """The figure, unsaved. Call inside plot_style() (plot_diff does)."""
    from matplotlib.lines import Line2D

    values = np.array([r.max_abs for r in data.rows], dtype=np.float64)
    low, high = axis_limits(values, data.tolerance)
    layers = sorted({r.layer for r in data.rows})
    width = max(8, min(24, math.ceil(2 + 0.22 * len(layers))))
    fig = new_figure(width, 5)
    left, inner = 0.9 / width, 1 - 1.9 / width  # room for the y label, and for the right-hand notes
    over = int(np.sum(~np.isfinite(values) | (values > data.tolerance)))
    side = int((width - 1.3) * 5)  # characters of each label that fit the title's line at its size
    fig.suptitle(f"{clean_text(data.label_a, side)}  vs  {clean_text(data.label_b, side)}", x=left, ha="left",
                 fontsize=10, parse_math=False)
    fig.text(left, 0.905, f"largest |a - b| per site and part; {over} of {len(data.rows)} over the tolerance "
             f"{data.tolerance:g}", fontsize=8, color="#444444")
    ax = fig.add_axes([left, 0.29, inner, 0.49])
    nonfinite = _strip(fig, [left, 0.79, inner, STRIP], ax, "NaN / Inf")
    equal = _strip(fig, [left, 0.29 - 0.01 - STRIP, inner, STRIP], ax, "= 0 (equal)")
    ax.set_yscale("log")
    ax.set_ylim(low / 3, high * 3)
    arrays: dict[str, np.ndarray] = {"ylim": np.array(ax.get_ylim())}
    handles = []
    for part, colour in PART_COLOURS.items():
        for site, marker in SITE_MARKERS.items():
            rows = sorted((r for r in data.rows if r.part == part and r.site == site), key=lambda r: r.layer)
            if not rows:
                continue
            handles.append(Line2D([], [], linestyle="none", marker=marker, markersize=4, color=colour,
                                  label=f"{part} ({site})"))
            x = np.array([r.layer + SITE_OFFSET[site] for r in rows])
            v = np.array([r.max_abs for r in rows], dtype=np.float64)
            for kind, mask, where, y, style in (
                ("value", np.isfinite(v) & (v > 0), ax, v, {"color": colour}),
                ("zero", v == 0, equal, np.full(v.shape, STRIP_ROW[part]), {"markerfacecolor": "none",
                                                                            "color": colour}),
                ("nonfinite", ~np.isfinite(v), nonfinite, np.full(v.shape, STRIP_ROW[part]), {"color": colour}),
            ):
                if not mask.any():
                    continue
                line, = where.plot(x[mask], y[mask], linestyle="none", marker="x" if kind == "nonfinite" else marker,
                                   markersize=4, **style)
                arrays[f"{part}/{site}/{kind}/layer"] = np.rint(np.asarray(line.get_xdata()) - SITE_OFFSET[site])
                arrays[f"{part}/{site}/{kind}/y"] = np.asarray(line.get_ydata(), dtype=np.float64)
    if data.tolerance > 0:
        ax.axhline(data.tolerance, color="#d62728", linewidth=1.0, linestyle="--")
        ax.text(1.005, data.tolerance, f"tolerance\n{data.tolerance:g}", transform=ax.get_yaxis_transform(),
                fontsize=7, va="center", color="#d62728")
    for a in (nonfinite, ax):
        a.tick_params(labelbottom=False)
    equal.set_xlabel("layer (stages after the backbone; attn left, ffn right of each layer)")
    equal.xaxis.get_major_locator().set_params(integer=True)  # layers are whole numbers
    ax.set_ylabel("max |a - b|")
    ax.grid(True, which="major", linewidth=0.3, alpha=0.5)
    if layers:
        ax.set_xlim(layers[0] - 1, layers[-1] + 1)
    if handles:
        # below the x label: above the axes it met the subtitle, inside it would hide points
        fig.legend(handles=handles, fontsize=6, ncol=min(len(handles), 9), loc="lower center",
                   bbox_to_anchor=(left + inner / 2, 0.01), frameon=False)
    return Drawn(fig, arrays)


def plot_diff(data: DiffFigureData, path: str | Path, *, forbidden_dir: str | Path | None = None) -> Drawn:
    """Draw the diff figure and write it to path (.png or .svg)."""
    plot_format(path)
    with plot_style():
        drawn = draw_diff(data)
        save_figure(drawn.figure, path, forbidden_dir=forbidden_dir)
    return drawn
