"""Pictures of the hyper-connections: PNG or SVG files drawn with matplotlib.

matplotlib is an optional extra (`hccli[plot]`) and is imported here only when a
plot is asked for, so `hc` starts without it. Figures are built on a bare
matplotlib Figure (no pyplot): no global backend is chosen and no GUI can be
opened, and the rc settings a user's matplotlibrc may carry are replaced by the
defaults for the duration of one figure, so the same data gives the same bytes.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from hccli.errors import HcError

INSTALL_HINT = "pip install 'hccli[plot]'"
FORMATS = {".png": "png", ".svg": "svg"}
DPI = 100  # with figure sizes in whole inches, a PNG is figsize x 100 pixels exactly
_TEXT_LIMIT = 120  # labels from files are cut here: a title is no place for a 10 kB name


@dataclass(frozen=True)
class Drawn:
    """A figure and what it drew, read back from its artists (images, bars, lines),
    keyed by what they show, so that callers and tests can compare them with the data."""

    figure: Any  # matplotlib.figure.Figure
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def plot_format(path: str | Path) -> str:
    """"png" or "svg" from the file's extension; anything else is the user's to fix."""
    ext = Path(path).suffix.lower()
    fmt = FORMATS.get(ext)
    if fmt is None:
        raise HcError(f"{clean_text(str(path))}: plot file extension {clean_text(ext) or '(none)'!r} not "
                      "supported; expected .png or .svg")
    return fmt


def require_matplotlib() -> Any:
    """The matplotlib module, or an HcError with the install hint when it is missing."""
    try:
        import matplotlib
        import matplotlib.figure  # noqa: F401  (the figure module is what the plots use)
        import matplotlib.style  # noqa: F401
    except ImportError as e:
        raise HcError(f"plotting needs matplotlib, which is not installed: {INSTALL_HINT}") from e
    return matplotlib


@contextmanager
def plot_style() -> Iterator[Any]:
    """matplotlib with its default style and fixed SVG ids, for one figure's lifetime."""
    mpl = require_matplotlib()
    with mpl.rc_context():
        mpl.style.use("default")  # a user's matplotlibrc (usetex, fonts, sizes) must not change the bytes
        mpl.rcParams.update({"svg.hashsalt": "hccli", "svg.fonttype": "path", "font.size": 8})
        yield mpl


def new_figure(width_in: float, height_in: float) -> Any:
    """A Figure of this size in inches, attached to the Agg canvas (headless); call inside plot_style."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def clean_text(text: str, limit: int = _TEXT_LIMIT) -> str:
    """Text from a file or server, made safe for a label: control characters escaped,
    length bounded. (Mathtext is switched off where such text is drawn: parse_math=False.)"""
    cleaned = "".join(ch if (ch.isprintable() or ch == " ") else ch.encode("unicode_escape").decode("ascii")
                      for ch in str(text))
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "\u2026"


def _inside(path: Path, directory: Path) -> bool:
    try:
        path.relative_to(directory)
    except ValueError:
        return False
    return True


def _checkpoint_root(checkpoint: str | Path) -> Path | None:
    # a single-file checkpoint's folder is its directory (as for run-kernel --save); a hub name
    # (hf://org/name) is no local path and guards nothing here
    p = Path(checkpoint)
    if p.is_dir():
        return p.resolve()
    return p.resolve().parent if p.exists() else None


def check_target(path: str | Path, *, forbidden_dir: str | Path | None = None) -> tuple[Path, str]:
    """(resolved path, format) of a plot file that can be written, or the HcError that says why
    not: the extension, matplotlib, the checkpoint directory, the folder. Cheap, so that a
    command calls it before it does any work."""
    path = Path(path)
    fmt = plot_format(path)
    require_matplotlib()
    target = path.resolve()
    forbidden = _checkpoint_root(forbidden_dir) if forbidden_dir is not None else None
    if forbidden is not None and _inside(target, forbidden):
        raise HcError(f"{clean_text(str(path))}: will not write a plot into the checkpoint directory "
                      f"{clean_text(str(forbidden_dir))}; choose a file elsewhere")
    if target.is_dir():
        raise HcError(f"{clean_text(str(path))}: is a directory; expected a .{fmt} file name")
    if not target.parent.is_dir():
        raise HcError(f"{clean_text(str(path))}: directory {clean_text(str(target.parent))} does not exist")
    return target, fmt


def save_figure(fig: Any, path: str | Path, *, forbidden_dir: str | Path | None = None) -> Path:
    """Write the figure as PNG or SVG (by extension) with no dates or software names in
    it, so that the same figure gives the same bytes. Refuses to write inside
    forbidden_dir (a checkpoint directory). The file appears whole or not at all."""
    target, fmt = check_target(path, forbidden_dir=forbidden_dir)
    parent = target.parent
    metadata = {"Software": None} if fmt == "png" else {"Date": None, "Creator": None}
    mpl = require_matplotlib()
    # beside the target, so that the rename is atomic; opened with the user's umask, unlike mkstemp
    tmp = parent / f".{target.name}.{os.getpid()}.hc-plot"
    try:
        with open(tmp, "wb") as fh, mpl.rc_context({"svg.hashsalt": "hccli", "svg.fonttype": "path"}):
            fig.savefig(fh, format=fmt, dpi=DPI, metadata=metadata)
        os.replace(tmp, target)
    except OSError as e:
        raise HcError(f"{clean_text(str(path))}: cannot write the plot: {clean_text(e.strerror or str(e))}") from e
    finally:
        if tmp.exists():
            tmp.unlink()
    return target


def write_plot(path: str | Path, draw: Callable[..., Drawn], data: Any, *,
               forbidden_dir: str | Path | None = None) -> str:
    """The one call a command makes once it has its data: draw it with a plot_X function
    (plot_model, plot_kernel, plot_diff, plot_params), save it, and return the line to tell
    the user, e.g. "wrote params.png (1100x1300 PNG)". The target is checked again first (a
    command checks it before its work too: PlotOpt's callback, or check_target)."""
    check_target(path, forbidden_dir=forbidden_dir)
    drawn = draw(data, path, forbidden_dir=forbidden_dir)
    w, h = drawn.figure.get_size_inches()
    fmt = plot_format(path)
    size = f"{round(w * DPI)}x{round(h * DPI)} PNG" if fmt == "png" else f"{w * 72:g}x{h * 72:g} pt SVG"
    return f"wrote {path} ({size})"
