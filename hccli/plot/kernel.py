"""The kernel figure (`hc run-kernel --plot`): the comb matrices of the first tokens
and their mean, each with its row and column sums, and pre/post as bars."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hccli.base.errors import HcError
from hccli.plot import Drawn, clean_text, new_figure, plot_format, plot_style, save_figure
from hccli.plot.values import MAX_STREAMS

MAX_TOKENS = 8  # more heatmaps than this in one row stop being readable


@dataclass(frozen=True)
class KernelFigureData:
    title: str  # what ran on what input, e.g. "torch on cpu: the bundled sample"
    pre: np.ndarray  # [n, hc]
    post: np.ndarray  # [n, hc]
    comb: np.ndarray  # [n, hc, hc]: row j = from stream j, column k = to stream k
    limit: int = 4  # tokens to draw (at least 1, at most MAX_TOKENS)
    params: str = ""  # where hc_base / hc_scale came from (a checkpoint's layer and site, say)

    def __post_init__(self) -> None:
        n, hc = np.shape(self.pre) if np.ndim(self.pre) == 2 else (None, None)
        if (n is None or not 1 <= hc <= MAX_STREAMS or np.shape(self.post) != (n, hc)
                or np.shape(self.comb) != (n, hc, hc) or n == 0):
            raise HcError(f"kernel plot: expected pre and post [n, hc] and comb [n, hc, hc] with n >= 1, got "
                          f"{np.shape(self.pre)}, {np.shape(self.post)}, {np.shape(self.comb)}")

    @classmethod
    def from_result(cls, result: Any, limit: int = 4) -> "KernelFigureData":
        """From a hccli.runkernel.run.RunResult."""
        title = f"{result.impl} on {result.device}: {result.input.provenance}"
        return cls(title, result.pre, result.post, result.comb, limit, result.input.params_provenance)

    @property
    def shown(self) -> int:
        return max(1, min(self.limit, MAX_TOKENS, int(self.pre.shape[0])))


def mean_comb(comb: np.ndarray) -> np.ndarray:
    """The mean over the tokens whose matrix is finite (a NaN token would blank it all)."""
    c = np.asarray(comb, dtype=np.float64)
    ok = np.isfinite(c).all(axis=(1, 2))
    return c[ok].mean(axis=0) if ok.any() else np.full(c.shape[1:], np.nan)


def _heatmap(ax: Any, m: np.ndarray, norm: Any, cmap: Any, title: str, gid: str,
             arrays: dict[str, np.ndarray]) -> None:
    hc = m.shape[0]
    im = ax.imshow(m, cmap=cmap, norm=norm, interpolation="nearest")
    im.set_gid(gid)
    arrays[gid.replace("-", "/", 1)] = np.ma.filled(np.ma.asarray(im.get_array(), dtype=float), np.nan)
    ax.set_title(title, fontsize=8, pad=9)
    small = hc <= 6  # values in the cells only where they fit
    for j in range(hc):
        for k in range(hc):
            if small:
                v = m[j, k]
                ax.text(k, j, f"{v:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if np.isfinite(v) and norm(v) < 0.6 else "black")
    rows = m.sum(axis=1, dtype=np.float64)
    cols = m.sum(axis=0, dtype=np.float64)
    arrays[gid.replace("comb-", "rowsum/", 1)] = rows
    arrays[gid.replace("comb-", "colsum/", 1)] = cols
    # the sums sit outside the matrix: right of each row, under each column; red where not 1
    for j, v in enumerate(rows):
        ax.text(hc - 0.3, j, f"{v:.3f}", ha="left", va="center", fontsize=5.5,
                color="black" if abs(v - 1) < 1e-3 else "red")
    for k, v in enumerate(cols):
        ax.text(k, hc - 0.4, f"{v:.3f}", ha="center", va="top", fontsize=5.5,
                color="black" if abs(v - 1) < 1e-3 else "red")
    ax.set_xticks(range(hc), [str(k + 1) for k in range(hc)], fontsize=6)
    ax.set_yticks(range(hc), [str(j + 1) for j in range(hc)], fontsize=6)
    ax.xaxis.tick_top()  # the column sums take the bottom edge
    ax.tick_params(length=0, pad=1)


def draw_kernel(data: KernelFigureData) -> Drawn:
    """The figure, unsaved. Call inside plot_style() (plot_kernel does)."""
    import matplotlib
    from matplotlib.colors import Normalize

    k = data.shown
    comb = np.asarray(data.comb[:k], dtype=np.float64)
    mean = mean_comb(comb)
    hc = comb.shape[1]
    cell = 1.9
    width = max(8, math.ceil(0.6 + (k + 1) * cell + 1.0))
    height = 6
    fig = new_figure(width, height)
    fig.suptitle(clean_text(data.title), x=0.3 / width, ha="left", fontsize=10, parse_math=False)
    if data.params:
        # a path may be long: cut later than a title, so that the layer and site stay in
        fig.text(0.3 / width, 1 - 0.3 / height, clean_text(f"base/scale: {data.params}", 240), fontsize=8,
                 color="#444444", va="top", parse_math=False)
    fig.text(0.3 / width, 1 - 0.5 / height,
             f"comb (row j = from stream j, column k = to stream k) of the first {k} of "
             f"{data.pre.shape[0]:,} tokens and their mean; row sums right, column sums below (red: off 1 by 1e-3+)",
             fontsize=8, color="#444444", va="top")
    finite = np.concatenate([comb[np.isfinite(comb)], mean[np.isfinite(mean)]])
    hi = float(finite.max()) if finite.size else 1.0
    norm = Normalize(min(0.0, float(finite.min())) if finite.size else 0.0, hi if hi > 0 else 1.0)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#ff00ff")
    arrays: dict[str, np.ndarray] = {}
    side = cell - 0.65
    for i in range(k + 1):
        ax = fig.add_axes([(0.5 + i * cell) / width, 1 - (0.95 + side) / height, side / width, side / height])
        if i < k:
            _heatmap(ax, comb[i], norm, cmap, f"token {i}", f"comb-{i}", arrays)
        else:
            _heatmap(ax, mean, norm, cmap, f"mean of {k}", "comb-mean", arrays)
    cax = fig.add_axes([(0.5 + (k + 1) * cell) / width, 1 - (0.95 + side) / height, 0.12 / width, side / height])
    fig.colorbar(matplotlib.cm.ScalarMappable(norm, cmap), cax=cax)
    for p, (name, values) in enumerate((("pre", data.pre[:k]), ("post", data.post[:k]))):
        ax = fig.add_axes([(0.5 + p * (width - 0.5) / 2) / width, 0.45 / height,
                           ((width - 0.5) / 2 - 0.7) / width, 2.1 / height])
        heights = np.zeros((k, hc))
        w = 0.8 / hc
        for s in range(hc):
            bars = ax.bar(np.arange(k) + (s - (hc - 1) / 2) * w, np.asarray(values[:, s], dtype=np.float64), w,
                          color=f"C{s % 10}", label=f"stream {s + 1}")
            heights[:, s] = [b.get_height() for b in bars]
        arrays[name] = heights
        ax.set_xticks(range(k), [f"token {i}" for i in range(k)], fontsize=7)
        ax.set_title(f"{name} weights" + (" (sigmoid + eps, in (0, 1])" if name == "pre" else
                                           " (2 x sigmoid, in (0, 2))"), fontsize=8)
        top = np.nanmax(heights) if np.isfinite(heights).any() else 1.0
        ax.set_ylim(0, max(top, 1.0) * 1.25)  # headroom for the legend
        ax.axhline(1.0, color="#888888", linewidth=0.6, linestyle=":")
        ax.grid(True, axis="y", linewidth=0.3, alpha=0.5)
        if hc <= 10:
            ax.legend(fontsize=6, ncol=hc, loc="upper right", framealpha=0.6)
    return Drawn(fig, arrays)


def plot_kernel(data: KernelFigureData, path: str | Path, *, forbidden_dir: str | Path | None = None) -> Drawn:
    """Draw the kernel figure and write it to path (.png or .svg)."""
    plot_format(path)
    with plot_style():
        drawn = draw_kernel(data)
        save_figure(drawn.figure, path, forbidden_dir=forbidden_dir)
    return drawn
