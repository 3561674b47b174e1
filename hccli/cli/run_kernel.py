"""`hc run-kernel`: the split-Sinkhorn op over sample mixes, on a GPU (tilelang) or the CPU (torch)."""


from pathlib import Path
from typing import Annotated, Optional

import typer

from hccli.cli.app import app
from hccli.cli.options import JsonOpt

EPILOG = """Examples:

  hc run-kernel                                   # the bundled sample, 4 tokens

  hc run-kernel --tokens 4096 --seed 1 --limit 2  # random mixes

  hc run-kernel --mixes mixes.npy                 # .safetensors (tensor `mixes`), .npy or .json

  hc run-kernel --checkpoint /tmp/tiny --layer 3 --site ffn        # a model's own base and scale

  hc run-kernel --checkpoint /tmp/tiny --layer 3 --hidden          # the whole pre stage, with its hc_fn

  hc run-kernel --impl torch --save golden.safetensors             # golden vectors for a port
"""


@app.command("run-kernel", epilog=EPILOG)
def run_kernel_cmd(
    impl: Annotated[str, typer.Option("--impl", help="auto (the exact kernel on a CUDA GPU, else torch), exact "
                                      "(bit-identical to block, fast), fast (within 1e-6, fastest), block (the "
                                      "published reference kernel's shape) or torch.")] = "auto",
    device: Annotated[Optional[str], typer.Option("--device", help="cpu, cuda or cuda:N (default: chosen "
                                                  "by --impl).")] = None,
    tokens: Annotated[Optional[int], typer.Option("--tokens", "-t", help="Random mixes (or hidden states) of "
                                                  "this many tokens.", min=1)] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random input.", min=0)] = 0,
    mixes: Annotated[Optional[Path], typer.Option("--mixes", help="Mixes [..., (2+hc)*hc] from a .safetensors "
                                                  "(tensor `mixes`), .npy or .json file.")] = None,
    checkpoint: Annotated[Optional[str], typer.Option("--checkpoint", help="Take hc_base, hc_scale (and hc_fn) "
                                                      "from this checkpoint (a path, or hf://org/name).")] = None,
    layer: Annotated[Optional[int], typer.Option("--layer", "-l", help="Layer of --checkpoint (stages after "
                                                 "the backbone).", min=0)] = None,
    site: Annotated[str, typer.Option("--site", "-s", help="attn or ffn.")] = "attn",
    hidden: Annotated[bool, typer.Option("--hidden", help="Start from a random hidden state [tokens, hc, dim] "
                                         "and compute the mixes as the model does.")] = False,
    hidden_file: Annotated[Optional[Path], typer.Option("--hidden-file", help="Like --hidden, with the hidden "
                                                        "state from a file (tensor `hidden`).")] = None,
    dim: Annotated[Optional[int], typer.Option("--dim", help="Width of the random hidden state (default 64; "
                                               "a checkpoint's hc_fn fixes it).", min=1)] = None,
    config: Annotated[Optional[Path], typer.Option("--config", help="Take hc_mult, iterations, eps and "
                                                   "norm_eps from this config.json.")] = None,
    hc_mult: Annotated[Optional[int], typer.Option("--hc-mult", help="Streams (default 4).", min=1)] = None,
    iters: Annotated[Optional[int], typer.Option("--iters", help="Sinkhorn iterations (default 20).")] = None,
    eps: Annotated[Optional[float], typer.Option("--eps", help="eps (default 1e-6).")] = None,
    limit: Annotated[int, typer.Option("--limit", help="Tokens to print.", min=0)] = 4,
    save: Annotated[Optional[Path], typer.Option("--save", help="Write inputs and outputs as golden vectors "
                                                 "to this .safetensors file.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the --save file.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Run the split-Sinkhorn op (pre, post and the 4 x 4 comb matrix) over sample mixes.

    On a CUDA GPU with tilelang installed, the exact tilelang kernel runs (bit-identical
    to the published reference kernel); elsewhere the torch reference does, and the output says
    which ran and where. The input is the bundled sample unless --tokens, --mixes,
    --hidden/--hidden-file or --checkpoint say otherwise.
    """
    from hccli.cli import render_kernel
    from hccli.cli.output import emit_json, show
    from hccli.kernels.run import check_save_path, gather, run, save_golden

    if save is not None:
        check_save_path(save, force=force, protect=Path(checkpoint) if checkpoint else None)
    inp = gather(tokens=tokens, seed=seed, mixes_file=mixes, checkpoint=checkpoint, layer=layer, site=site,
                 hidden=hidden, hidden_file=hidden_file, dim=dim, config=config, hc_mult=hc_mult, iters=iters,
                 eps=eps)
    result = run(inp, impl, device)
    if save is not None:
        save_golden(result, save)
    if json_out:
        emit_json(result.to_json())
    else:
        show(*render_kernel.renderables(result, limit=limit, saved=save))
