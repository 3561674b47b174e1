"""`hc run-site`: the whole HC site (projection, split, collapse, write-back) of a model's layers."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from hccli.cli.app import app
from hccli.cli.flag_rules import check_flags
from hccli.cli.kernel_options import DeviceOpt, SeedOpt
from hccli.cli.options import (Choice, CompareAtolOpt, ForceOpt, JsonOpt, LayersOpt, PlotOpt, SitesOpt, choice_option,
                               config_option, input_file, layer_spec, listed, tokens_option)
from hccli.base.errors import HcError
from hccli.kernels.registry import IMPL_NAMES

EPILOG = """Examples:

\b
  # each site's pre, post, comb, stream RMS
  hc run-site /tmp/tiny --layers 0-1

\b
  # a config: sample values
  hc run-site sample_configs/tiny-v4.1.json --tokens 4

\b
  # pure stream mixing
  hc run-site /tmp/tiny --sublayer zero --site ffn

\b
  # the projection in bf16: drift against f32
  hc run-site /tmp/tiny --precision bf16

\b
  # on a GPU: the fused site kernels
  hc run-site /tmp/tiny --device cuda

\b
  # golden site vectors for a port
  hc run-site /tmp/tiny --save golden.safetensors

\b
  # ... re-run from their inputs
  hc run-site --compare golden.safetensors

\b
  # ... and a port's outputs judged
  hc check-port port.safetensors --golden golden.safetensors
"""

class Precision(Choice):
    """The projection's operand formats."""

    f32 = "f32"
    tf32 = "tf32"
    bf16 = "bf16"
    f16 = "f16"


# the numpy reference, then every name of run-kernel's table
SiteImpl = Choice("SiteImpl", {name: name for name in ("numpy", *IMPL_NAMES)})


def _sublayer(value: str) -> str:
    if value not in ("zero", "random"):
        input_file("--sublayer")(Path(value))
    return value


@app.command("run-site", epilog=EPILOG)
def run_site_cmd(
    ctx: typer.Context,
    source: Annotated[Optional[str], typer.Argument(
        help="A checkpoint in any dialect hc reads (a folder, a .safetensors or .gguf file, hf://org/name), "
             "or a config.json (sample values).", show_default=False)] = None,
    config: config_option("The checkpoint's config.json, where it has none.") = None,
    layers: LayersOpt = None,
    sites: SitesOpt = None,
    tokens: tokens_option("Seeded streams of this many tokens (default 16).") = None,
    seed: SeedOpt = 0,
    streams: Annotated[Optional[Path], typer.Option(
        "--streams", callback=input_file("--streams"),
        help="The streams \\[tokens, hc, dim] of the first site: .safetensors (tensor `streams`, BF16 or F32) "
             "or a float32 .npy.")] = None,
    sublayer: Annotated[str, typer.Option(
        "--sublayer", callback=_sublayer, help="The sub-layer's output f at each site: zero (pure stream mixing), "
        "random (seeded), or a .safetensors file of `LAYER.SITE.f` (or one `f`).")] = "random",
    impl: Annotated[Optional[SiteImpl], typer.Option(
        "--impl", metavar=listed(SiteImpl), show_default=False,
        help="numpy (the reference, CPU; the default without --device), auto (the default with a GPU --device: "
             "the fused site kernels site_pre and site_write where they have a build, else the torch path, saying "
             "why), torch (the torch path), or exact, fast or block (the torch path, the split through that kernel "
             "of run-kernel).")] = None,
    device: DeviceOpt = None,
    precision: choice_option(
        Precision, "--precision",
        refuse=lambda v: f"--precision {v!r}: expected one of {', '.join(p.value for p in Precision)}",
        help="The projection's operands in this format; the drift of pre, post, comb and h against f32 is "
             "reported.") = Precision.f32,
    save: Annotated[Optional[Path], typer.Option("--save", help="Write golden site vectors (inputs and every "
                                                 "step) to this .safetensors file.")] = None,
    force: ForceOpt = False,
    compare: Annotated[Optional[Path], typer.Option(
        "--compare", callback=input_file("--compare"),
        help="Re-run the inputs of a --save file and compare every step (exit 1 beyond --atol).")] = None,
    atol: CompareAtolOpt = 0.0,
    json_out: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Run the HC site of a model's layers: mixes, pre/post/comb, collapse and write-back.

    Each site's streams are the site before's output (V4.1: its pre is handed on too),
    starting from seeded streams or --streams. Prints per site pre, post and token 0's comb,
    and the streams' RMS in and out. --save writes golden vectors for a port; check-port
    judges a port's outputs against them.
    """
    check_flags(ctx)
    from hccli.cli.render import site as render_site
    from hccli.cli.output import damage_warnings, emit, note, safe

    impl = impl.value if impl is not None else None  # the core takes the name
    if compare is not None:
        from hccli.runsite.run import compare_file

        result = compare_file(compare, impl, device, atol)
        emit(result, json_out, lambda: render_site.comparison(result), command="run-site")
        if result.exit_code:
            raise typer.Exit(result.exit_code)
        return
    from hccli.runsite.run import RunRequest, run_site
    from hccli.runsite.source import open_model, protected

    if save is not None:
        from hccli.runkernel.golden import check_save_target

        try:
            check_save_target(save, force=force, protect=protected(source))
        except HcError as exc:
            raise HcError(f"--save {exc.message}" + (" (or pass --force)" if "file exists" in exc.message else ""),
                          ) from None
    if plot is not None:
        from hccli.cli.options import check_plot

        check_plot(plot, forbidden_dir=protected(source))
    model = open_model(source, config, seed)
    damage_warnings(model.findings, model.config_note)  # before the run: it may be why the run fails
    req = RunRequest(tokens, seed, streams, sublayer, layer_spec(layers), tuple(sites) if sites else None, precision.value, impl,
                     device)
    report = run_site(model, req, save, force=force)
    emit(report, json_out, lambda: render_site.renderables(report), command="run-site")
    if plot is not None:
        from hccli.plot import write_plot
        from hccli.plot.site import SiteFigureData, plot_site

        figure = SiteFigureData.from_report(report)
        note(safe(write_plot(plot, plot_site, figure, forbidden_dir=model.protect)), wrap=False)
