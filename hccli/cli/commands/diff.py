"""`hc diff A B`: did a conversion keep the hyper-connections?"""

from pathlib import Path
from typing import Annotated, Optional

import typer

from hccli.cli.app import app
from hccli.cli.options import (Choice, JsonOpt, LayersOpt, PlotOpt, SitesOpt, at_least, input_file, layer_spec,
                               listed, non_negative, seed_option, tokens_option)

EPILOG = """Examples:

\b
  # exit 1 if an HC value changed
  hc diff /ckpt/DeepSeek-V4-Flash model-f16.gguf

\b
  hc diff release/ converted/ --atol 1e-3 --rtol 1e-2 --json

\b
  # every shared tensor too, streamed
  hc diff release/ converted/ --values all

\b
  # and a picture: max |a - b| per site
  hc diff release/ model-q8.gguf --plot diff.png

\b
  # only those layers' attention
  hc diff release/ converted/ --layers 20-23 --site attn --values all
"""


class Values(Choice):
    """What is compared: the HC tensors only, or every tensor both sides hold."""

    hc = "hc"
    all = "all"


@app.command("diff", epilog=EPILOG)
def diff_cmd(
    a: Annotated[str, typer.Argument(help="The reference checkpoint: a directory, index .json, .safetensors, "
                                          ".gguf (or split set / folder), or hf://org/name.", show_default=False)],
    b: Annotated[str, typer.Argument(help="The checkpoint to compare with it, in any dialect.", show_default=False)],
    atol: Annotated[float, typer.Option("--atol", callback=non_negative("--atol"),
                                        help="Absolute tolerance for HC values, at least 0 (default 0: bit-identical).")] = 0.0,
    rtol: Annotated[float, typer.Option("--rtol", callback=non_negative("--rtol"),
                                        help="Relative tolerance, against A's value, at least 0.")] = 0.0,
    values: Annotated[Values, typer.Option("--values", metavar=listed(Values), help="hc: read only the HC tensors; all: also compare every "
                                           "tensor both hold, streamed.")] = Values.hc,
    tokens: tokens_option("Sample hidden states sent through each side's fn.", 0, 4096) = 16,
    seed: seed_option("Seed of the sample hidden states.") = 0,
    config_a: Annotated[Optional[Path], typer.Option("--config-a", callback=input_file("--config-a"),
                                                     help="config.json for A (default: beside it).")] = None,
    config_b: Annotated[Optional[Path], typer.Option("--config-b", callback=input_file("--config-b"),
                                                     help="config.json for B (default: beside it).")] = None,
    layers: LayersOpt = None,
    sites: SitesOpt = None,
    limit: Annotated[int, typer.Option("--limit", callback=at_least("--limit", 1),
                                       help="HC rows to print (worst first), at least 1.")] = 20,
    json_out: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Compare two checkpoints' hyper-connections, site by site, and the rest of their inventories.

    Per HC tensor (layer, site, part fn/base/scale): present on both sides, shape
    (a transpose is named), stored dtype or GGML type, max abs and max rel
    difference, and the effect: the pre/post weights and comb matrix the base alone
    gives, and those that seeded sample hidden states give through each side's
    site. Names are compared in canonical (release) form, so any two dialects mix.
    --layers and --site limit the HC comparison and --values all to those layers
    and sites (numbered as everywhere: stages after the backbone, the head mix last).
    Exit 0 when every HC value is within --atol/--rtol, 1 when not, 2 when a side
    cannot be read, spells one tensor twice or the two are different models. Never writes anything.
    """
    from hccli.cli.render import diff as render_diff
    from hccli.cli.output import damage_warnings, emit, progress_bar
    from hccli.diffing.diff import DiffRequest, build_diff
    from hccli.checkpoint.view import open_view

    if plot is not None:
        from hccli.cli.options import check_plot

        for side in (a, b):  # never into either checkpoint; before any work
            if Path(side).exists():
                check_plot(plot, forbidden_dir=Path(side))
    request = DiffRequest(atol=atol, rtol=rtol, tokens=tokens, seed=seed, values_all=values is Values.all,
                          layers=layer_spec(layers), sites=frozenset(sites) if sites else None)
    # each side's warnings as soon as it is open: a config set aside may be why B fails, or why they differ
    with open_view(a, config_a, whole=True) as va:
        damage_warnings(va.damage, va.config_note)
        with open_view(b, config_b, whole=True) as vb:
            damage_warnings(vb.damage, vb.config_note)
            with progress_bar("comparing", enabled=not json_out, in_bytes=True) as tick:
                report = build_diff(va, vb, request, progress=tick)
    emit(report, json_out, lambda: render_diff.renderables(report, limit=limit), command="diff")
    if plot is not None:
        from hccli.cli.output import note, safe
        from hccli.plot import write_plot
        from hccli.plot.diff import diff_figure_data, plot_diff

        note(safe(write_plot(plot, plot_diff, diff_figure_data(report), forbidden_dir=Path(b))), wrap=False)
    if report.exit_code:
        raise typer.Exit(report.exit_code)
