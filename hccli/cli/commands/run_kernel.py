"""`hc run-kernel`: the split-Sinkhorn op over sample mixes, on a GPU (tilelang) or the CPU (torch)."""


from pathlib import Path
from typing import Annotated, Optional

import typer

from hccli.cli.app import app
from hccli.cli.flag_rules import check_flags
from hccli.cli.kernel_options import (CompareOpt, ConfigOpt, DeviceOpt, EpsOpt, HcMultOpt, HiddenFileOpt, ImplOpt,
                                      Impl, ItersOpt, KernelSite, LayerOpt, MixesOpt, SeedOpt, SiteOpt, TokensOpt)
from hccli.cli.options import CompareAtolOpt, ForceOpt, JsonOpt, PlotOpt, at_least
from hccli.base.errors import HcError

EPILOG = """Examples:

\b
  # the bundled sample, 4 tokens
  hc run-kernel

\b
  # random mixes
  hc run-kernel --tokens 4096 --seed 1 --limit 2

\b
  # .safetensors (tensor `mixes`), .npy or .json
  hc run-kernel --mixes mixes.npy

\b
  # a model's own base and scale
  hc run-kernel --checkpoint /tmp/tiny --layers 3 --site ffn

\b
  # the whole pre stage, with its hc_fn
  hc run-kernel --checkpoint /tmp/tiny --layers 3 --hidden

\b
  # golden vectors for a port
  hc run-kernel --impl torch --save golden.safetensors

\b
  # ... read back and re-run
  hc run-kernel --compare golden.safetensors --impl exact

\b
  # and a picture
  hc run-kernel --tokens 64 --limit 3 --plot comb.png
"""


def _source(tokens, seed, mixes, hidden, hidden_file, dim):
    """The flags that choose the mixes (which go together: flag_rules) -> one typed MixSource."""
    from hccli.runkernel import run

    if hidden or hidden_file is not None:
        return run.HiddenState(tokens or run.inputs.SAMPLE_TOKENS, dim, seed, hidden_file)
    if mixes is not None:
        return run.MixesFile(mixes)
    if tokens is not None:
        return run.RandomMixes(tokens, seed)
    return run.SampleMixes()


def _site(checkpoint, layer, site):
    from hccli.runkernel.run import CheckpointSite

    return None if checkpoint is None else CheckpointSite(checkpoint, layer, site.value)


@app.command("run-kernel", epilog=EPILOG)
def run_kernel_cmd(
    ctx: typer.Context,
    impl: ImplOpt = Impl.auto,
    device: DeviceOpt = None,
    tokens: TokensOpt = None,
    seed: SeedOpt = 0,
    mixes: MixesOpt = None,
    checkpoint: Annotated[Optional[str], typer.Option("--checkpoint", help="Take hc_base, hc_scale (and hc_fn) "
                                                      "from this checkpoint (a path, or hf://org/name).")] = None,
    layers: LayerOpt = None,
    site: SiteOpt = KernelSite.attn,
    hidden: Annotated[bool, typer.Option("--hidden", help="Start from a random hidden state \\[tokens, hc, dim] "
                                         "and compute the mixes as the model does.")] = False,
    hidden_file: HiddenFileOpt = None,
    dim: Annotated[Optional[int], typer.Option("--dim", callback=at_least("--dim", 1), help="Width of the random "
                                               "hidden state (default 64; a checkpoint's hc_fn fixes it).")] = None,
    config: ConfigOpt = None,
    hc_mult: HcMultOpt = None,
    iters: ItersOpt = None,
    eps: EpsOpt = None,
    limit: Annotated[int, typer.Option("--limit", callback=at_least("--limit", 1), help="Tokens to print, at "
                                       "least 1 (and to draw with --plot: at most 8).")] = 4,
    save: Annotated[Optional[Path], typer.Option("--save", readable=False,  # written, never read: safe_write's rules
                                                 help="Write inputs and outputs as golden vectors "
                                                 "to this .safetensors file.")] = None,
    force: ForceOpt = False,
    compare: CompareOpt = None,
    atol: CompareAtolOpt = 0.0,
    json_out: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Run the split-Sinkhorn op (pre, post and the 4 x 4 comb matrix) over sample mixes.

    On a CUDA GPU with tilelang installed, the exact tilelang kernel runs (bit-identical
    to the published reference kernel); elsewhere the torch reference does, and the output says
    which ran and where. The input is the bundled sample unless --tokens, --mixes,
    --hidden/--hidden-file or --checkpoint say otherwise. --compare FILE re-runs a --save file.
    """
    check_flags(ctx)
    from hccli.cli.render import kernel as render_kernel
    from hccli.cli.output import damage_warnings, emit, note, safe

    if compare is not None:
        from hccli.runkernel import golden

        result = golden.compare(golden.read(compare), impl.value, device, atol)
        emit(result, json_out, lambda: render_kernel.comparison(result), command="run-kernel")
        if result.exit_code:
            raise typer.Exit(result.exit_code)
        return

    from hccli.runkernel.golden import check_save_target
    from hccli.runkernel.run import Overrides, prepare, run, save_golden

    source = _source(tokens, seed, mixes, hidden, hidden_file, dim)
    where = _site(checkpoint, layers, site)
    protect = Path(checkpoint) if checkpoint else None
    if save is not None:
        from hccli.base.safe_write import FileExists

        try:
            check_save_target(save, force=force, protect=protect)
        except FileExists as exc:
            raise HcError(f"--save {exc.message} (or pass --force)") from None
        except HcError as exc:
            raise HcError(f"--save {exc.message}") from None
    if plot is not None and checkpoint is not None:
        from hccli.cli.options import check_plot

        check_plot(plot, forbidden_dir=checkpoint)  # before the kernel runs: nothing printed, nothing written
    inp = prepare(source, site=where, config=config, overrides=Overrides(hc_mult, iters, eps))
    damage_warnings(inp.findings, inp.config_note)
    result = run(inp, impl.value, device)
    if save is not None:
        save_golden(result, save, force=force, protect=protect)  # checked again as it is written
    emit(result.document(), json_out, lambda: render_kernel.renderables(result, limit=limit, saved=save),
         command="run-kernel")
    if plot is not None:
        from hccli.plot import write_plot
        from hccli.plot.kernel import KernelFigureData, plot_kernel

        note(safe(write_plot(plot, plot_kernel, KernelFigureData.from_result(result, limit),
                             forbidden_dir=checkpoint)), wrap=False)
