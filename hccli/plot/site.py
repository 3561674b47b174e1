"""The site figure (`hc run-site --plot`): along the sites of the run, each stream's RMS into
and out of the site, and token 0's pre and post weights per stream."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hccli.base.errors import HcError
from hccli.plot import Drawn, clean_text, new_figure, plot_format, plot_style, save_figure
from hccli.plot.values import MAX_STREAMS


@dataclass(frozen=True)
class SiteFigureData:
    title: str
    keys: tuple[str, ...]  # "3.attn" per site
    rms_in: np.ndarray  # [sites, hc]
    rms_out: np.ndarray  # [sites, hc], NaN at a head
    pre: np.ndarray  # [sites, hc], token 0's; NaN where a site has none
    post: np.ndarray  # [sites, hc], NaN at a head

    def __post_init__(self) -> None:
        s = len(self.keys)
        hc = self.rms_in.shape[1] if self.rms_in.ndim == 2 else 0
        if not (1 <= s and 1 <= hc <= MAX_STREAMS and all(
                a.shape == (s, hc) for a in (self.rms_in, self.rms_out, self.pre, self.post))):
            raise HcError(f"site plot: expected [sites, hc] arrays for {s} sites, got "
                          f"{[a.shape for a in (self.rms_in, self.rms_out, self.pre, self.post)]}")

    @classmethod
    def from_report(cls, r: Any) -> "SiteFigureData":
        """From a hccli.runsite.run.SiteRunReport."""
        hc = r.hc_mult
        nan = [float("nan")] * hc

        def col(name: str) -> np.ndarray:
            return np.array([getattr(s, name) or nan for s in r.sites], dtype=np.float64).reshape(-1, hc)
        title = f"{r.source}: {r.family}, {r.tokens} tokens, sub-layer {r.sublayer}"
        return cls(title, tuple(s.key for s in r.sites), col("rms_in"), col("rms_out"), col("pre"), col("post"))


def draw_site(data: SiteFigureData) -> Drawn:
    """The figure, unsaved. Call inside plot_style() (plot_site does)."""
    s, hc = data.rms_in.shape
    width, height = 11, 7
    fig = new_figure(width, height)
    fig.suptitle(clean_text(data.title), x=0.03, ha="left", fontsize=10, parse_math=False)
    x = np.arange(s)
    step = max(1, -(-s // 40))
    arrays: dict[str, np.ndarray] = {}
    panels = (("rms", "streams' RMS over tokens and dim: into the site (solid), out of it (dotted)", 0.56),
              ("weights", "token 0's pre (solid) and post (dotted) weight per stream", 0.08))
    for name, title, bottom in panels:
        ax = fig.add_axes([0.07, bottom, 0.9, 0.36])
        for j in range(hc):
            a, b = (data.rms_in, data.rms_out) if name == "rms" else (data.pre, data.post)
            ax.plot(x, a[:, j], color=f"C{j % 10}", linewidth=1, marker="o", markersize=2, label=f"stream {j + 1}")
            ax.plot(x, b[:, j], color=f"C{j % 10}", linewidth=1, linestyle=":")
        arrays[f"{name}/in" if name == "rms" else "pre"] = (data.rms_in if name == "rms" else data.pre).copy()
        arrays[f"{name}/out" if name == "rms" else "post"] = (data.rms_out if name == "rms" else data.post).copy()
        if name == "rms" and np.nanmin(np.concatenate([data.rms_in.ravel(), data.rms_out.ravel()])) > 0:
            ax.set_yscale("log")
        ax.set_title(title, fontsize=8)
        ax.set_xticks(x[::step], [clean_text(k, 16) for k in data.keys[::step]], fontsize=6, rotation=90)
        ax.grid(True, linewidth=0.3, alpha=0.5)
        if hc <= 10:
            ax.legend(fontsize=6, ncol=hc, loc="upper left", framealpha=0.6)
    return Drawn(fig, arrays)


def plot_site(data: SiteFigureData, path: str | Path, *, forbidden_dir: str | Path | None = None) -> Drawn:
    """Draw the site figure and write it to path (.png or .svg)."""
    plot_format(path)
    with plot_style():
        drawn = draw_site(data)
        save_figure(drawn.figure, path, forbidden_dir=forbidden_dir)
    return drawn
