"""Options shared by several commands (the huggingface_hub CLI habit): one spelling
per concept, parsed in callbacks, so that a command body receives sets and numbers
and the core never sees a flag.

A callback's error is an HcError naming the flag as typed; the app's error
boundary prints it as one line with exit code 2. To give a command of your own a
layer option under another name, reuse the callback:

    Annotated[Optional[str], typer.Option("--hc-layers", callback=layers_callback, help=...)]
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from hccli.cli import specs


def _flag(param: typer.CallbackParam) -> str:
    return max(param.opts, key=len) if param.opts else f"--{param.name}"


def layers_callback(ctx: typer.Context, param: typer.CallbackParam, value: Optional[str]):
    """'3-7,8,14-15' -> frozenset of layer numbers (None when the option is absent)."""
    if value is None or ctx.resilient_parsing:
        return value
    return specs.parse_layers(value, _flag(param))


def ranges_callback(ctx: typer.Context, param: typer.CallbackParam, value: Optional[str]):
    """'2-7,8-13' -> ((2, 7), (8, 13)): bounds the core matches against the layer groups."""
    if value is None or ctx.resilient_parsing:
        return value
    return specs.parse_ranges(value, _flag(param))


def check_plot(value: Path, flag: str = "--plot", forbidden_dir: Optional[object] = None) -> None:
    """The plot file can be written (extension, matplotlib, folder, not in forbidden_dir, a
    checkpoint), or an HcError naming the flag. Commands call it before their work; the
    option's callback already has, without the checkpoint."""
    from hccli.base.errors import HcError
    from hccli.plot import check_target, clean_text  # numpy and matplotlib load only when a plot is asked for

    try:
        check_target(value, forbidden_dir=forbidden_dir)
    except HcError as exc:
        named = clean_text(str(value))
        what = exc.message if exc.message.startswith((named, str(value))) else f"{named}: {exc.message}"
        raise HcError(f"{flag} {what}") from None


def plot_callback(ctx: typer.Context, param: typer.CallbackParam, value: Optional[Path]):
    """A wrong plot file must fail while the flags are parsed, before the command computes or prints."""
    if value is None or ctx.resilient_parsing:
        return value
    check_plot(value, _flag(param))
    return value


def _choices(aliases: dict[str, str], expected: str):
    def callback(ctx: typer.Context, param: typer.CallbackParam, value: Optional[list[str]]):
        if not value or ctx.resilient_parsing:
            return None
        # typer turns a list option's value back into a list: hand it over sorted
        return sorted(specs.parse_choices(value, _flag(param), aliases, expected))

    return callback


sites_callback = _choices(specs.SITE_ALIASES, "attn, ffn, head")
components_callback = _choices(specs.COMPONENT_ALIASES,
                               "pre, post, comb, fn (or read, write, combination, projection)")
roles_callback = _choices(specs.ROLE_ALIASES, ", ".join(dict.fromkeys(specs.ROLE_ALIASES.values())))

# Typer sees str / list[str]; the command receives a frozenset of layers, a tuple of
# (first, last) bounds, and sorted lists of canonical site / component / role names.
LayersOpt = Annotated[Optional[str], typer.Option(
    "--layers", "-l", callback=layers_callback, show_default=False,
    help="Layers, e.g. 3-7, 2,8,14 or 20-39. Stages are numbered after the backbone (40-42 in V4.1).")]
GroupOpt = Annotated[Optional[str], typer.Option(
    "--group", "-g", callback=ranges_callback, show_default=False,
    help="Layer groups by their bounds as the groups table prints them, e.g. 2-7, or 2-13 for two "
         "neighbouring groups.")]
SitesOpt = Annotated[Optional[list[str]], typer.Option(
    "--site", "-s", callback=sites_callback, show_default=False, help="attn, ffn or head.")]
ComponentsOpt = Annotated[Optional[list[str]], typer.Option(
    "--component", "-c", callback=components_callback, show_default=False,
    help="pre (read), post (write), comb (combination), fn (projection).")]
RolesOpt = Annotated[Optional[list[str]], typer.Option(
    "--role", "-r", callback=roles_callback, show_default=False,
    help="window, source, reuse, reindex, compressed, engram, hash, stage.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document for scripts instead of tables.")]
PlotOpt = Annotated[Optional[Path], typer.Option(
    # readable=False: the file is written, never read (click's readable check follows a link)
    "--plot", callback=plot_callback, metavar="FILE", show_default=False, readable=False,
    help="Also draw a picture into FILE, .png or .svg by its extension (needs matplotlib, hccli's "
         "plot extra).")]
