"""`hc inspect`: what a checkpoint holds, its hyper-connection values, and --verify."""


from pathlib import Path
from typing import Annotated, Optional

import typer

from hccli.cli.app import app
from hccli.cli.options import JsonOpt

EPILOG = """Examples:

  hc make-checkpoint sample_configs/tiny-v4.1.json /tmp/tiny && hc inspect /tmp/tiny

  hc inspect /tmp/tiny --verify                    # exit 1 if an error-level finding exists

  hc inspect /tmp/tiny --name '*.hc_attn_*' --layer 2-3

  hc inspect /tmp/tiny/model.safetensors.index.json --dtype F32 --json

  hc inspect /tmp/tiny --hc-layer 3                 # comb offsets and the comb matrix of layer 3

  hc inspect hf://deepseek-ai/DeepSeek-V4.1-Flash --verify   # over HTTP ranges: headers and HC values only
"""


@app.command("inspect", epilog=EPILOG)
def inspect_cmd(
    path: Annotated[str, typer.Argument(help="A checkpoint directory, its model.safetensors.index.json, "
                                             "one .safetensors file, or a hub repository "
                                             "hf://org/name[@revision][/subfolder].", show_default=False)],
    config: Annotated[Optional[Path], typer.Option("--config", help="config.json to check against "
                                                   "(default: the one beside the checkpoint, if any).")] = None,
    verify: Annotated[bool, typer.Option("--verify", help="Check index, headers, HC tensors and the config's "
                                         "inventory; exit 1 if an error is found.")] = False,
    name: Annotated[Optional[str], typer.Option("--name", "-n", help="List tensors whose name matches this "
                                                "glob, e.g. '*.hc_*' or 'layers.3.*'.")] = None,
    layer: Annotated[Optional[str], typer.Option("--layer", "-l", help="List tensors of these layers "
                                                 "(3, 2-7, 2,8,14; stages after the backbone).")] = None,
    dtype: Annotated[Optional[str], typer.Option("--dtype", help="List tensors of this dtype, e.g. F32.")] = None,
    tensors: Annotated[bool, typer.Option("--tensors", help="List every tensor (up to --limit).")] = False,
    limit: Annotated[int, typer.Option("--limit", help="Rows of the tensor list to print.", min=1)] = 50,
    hc_layer: Annotated[Optional[str], typer.Option("--hc-layer", help="Show these layers' HC sites in full: "
                                                    "base split into pre/post/comb and the comb matrix.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Read a checkpoint's headers (never its weights) and show what it holds.

    A summary (shards, tensors, stored bytes, bytes per dtype, logical parameters),
    a tree with repeated layers collapsed, and the hyper-connection section: per
    layer and site the scale values, the base split into pre/post/comb offsets, and
    the comb matrix the base alone yields (mixes = 0). Nothing is ever written into
    the checkpoint's directory.
    """
    from hccli.accounting import parse_layers
    from hccli.cli import render_inspect
    from hccli.cli.output import emit_json, note, progress_bar, safe, show
    from hccli.inspect_report import build_inspect

    big = 10_000  # a layer filter before the layer count is known: checked against it below
    with progress_bar("reading headers", enabled=not json_out) as tick:
        report = build_inspect(
            path, config=config, name_glob=name, dtype=dtype, list_tensors=tensors,
            layers=parse_layers(layer, big, "--layer") if layer else None,
            hc_layers=parse_layers(hc_layer, big, "--hc-layer") if hc_layer else None,
            run_verify=verify, progress=tick,
        )
    n_total = report.n_layers + report.n_stages
    for opt, spec in (("--layer", layer), ("--hc-layer", hc_layer)):
        if spec:
            parse_layers(spec, n_total + 1, opt)  # past the checkpoint's layers (+1: the root head)
    unreadable = [s for s in report.ckpt.shards if s.header is None]
    if unreadable and report.findings is None:
        for s in unreadable[:5]:
            note(f"[yellow]warning:[/] shard not read: {safe(s.error or s.file)}")
        if len(unreadable) > 5:
            note(f"[yellow]warning:[/] ... and {len(unreadable) - 5} more shards not read (--verify lists all)")
    if json_out:
        emit_json(report.to_json())
    else:
        show(*render_inspect.renderables(report, limit=limit, detail=hc_layer is not None))
    if report.errors:
        raise typer.Exit(1)
