"""Pictures of the hyper-connections: PNG or SVG files drawn with matplotlib.

matplotlib is an optional extra (`hccli[plot]`) and is imported here only when a
plot is asked for, so `hc` starts without it. Figures are built on a bare
matplotlib Figure (no pyplot): no global backend is chosen and no GUI can be
opened, and the rc settings a user's matplotlibrc may carry are replaced by the
defaults for the duration of one figure, so the same data gives the same bytes.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from hccli.base.errors import HcError

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
        from hccli.base.extras import install_hint

        raise HcError(f"plotting needs matplotlib, which is not installed: {install_hint('plot')}") from e
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


def check_target(path: str | Path, *, forbidden_dir: str | Path | None = None) -> tuple[Path, str]:
    """(absolute path, format) of a plot file that can be written, or the HcError that says why
    not: the extension, matplotlib, then safe_write's rules (a new or regular file, not through a
    link, not in the checkpoint directory forbidden_dir, an existing folder). Cheap, so that a
    command calls it before it does any work."""
    from hccli.base.safe_write import check_target as check_file

    fmt = plot_format(path)
    require_matplotlib()
    return check_file(path, overwrite=True, forbidden=forbidden_dir), fmt


def save_figure(fig: Any, path: str | Path, *, forbidden_dir: str | Path | None = None) -> Path:
    """Write the figure as PNG or SVG (by extension) with no dates or software names in
    it, so that the same figure gives the same bytes, through safe_write (whole or not at
    all, never through a link, never inside forbidden_dir, a checkpoint directory)."""
    from hccli.base.safe_write import write_file

    _, fmt = check_target(path, forbidden_dir=forbidden_dir)
    metadata = {"Software": None} if fmt == "png" else {"Date": None, "Creator": None}
    mpl = require_matplotlib()

    def fill(fh: Any) -> None:
        with mpl.rc_context({"svg.hashsalt": "hccli", "svg.fonttype": "path"}):
            fig.savefig(fh, format=fmt, dpi=DPI, metadata=metadata)

    return write_file(path, fill, overwrite=True, forbidden=forbidden_dir)


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
