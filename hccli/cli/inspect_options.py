"""The options of `hc inspect`, parsed here and only here: the core gets sets of layer
numbers and dtype names as headers spell them, never a flag."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from hccli.base.errors import HcError
from hccli.cli.options import at_least, config_option, layers_option


def parse_dtype(spec: str) -> str:
    from hccli.checkpoint.safetensors.header_types import DTYPES  # at parse time: the registry of all commands stays light

    dtype = spec.strip().upper()
    if dtype not in DTYPES:
        raise HcError(f"--dtype {spec!r}: not a safetensors dtype; expected one of {', '.join(DTYPES)}")
    return dtype


PathArg = Annotated[str, typer.Argument(
    help="A checkpoint directory, its model.safetensors.index.json, one .safetensors file, or a hub "
         "repository hf://org/name\\[@revision]\\[/subfolder].", show_default=False)]
# checked as the flags are parsed, as every command's --config: a missing file is a bad value of it
ConfigOpt = config_option("config.json to check against (default: the one beside the checkpoint, if any).")
VerifyOpt = Annotated[bool, typer.Option(
    "--verify", help="Check index, headers, HC tensors and the config's inventory; exit 1 if an error is found.")]
NameOpt = Annotated[Optional[str], typer.Option(
    "--name", "-n", help="List tensors whose name matches this glob, e.g. '*.hc_*' or 'layers.3.*'.")]
# One layer option for both of inspect's views (docs/CLI.md says why): it lists those layers'
# tensors, and with --hc or --stats it picks the HC sites shown. The core numbers it.
LayersOpt = layers_option(help="These layers only: their tensors listed, or with --hc / --stats their HC sites "
                               "(3, 2-7, 2,8,14, mtp.0, head).")
DtypeOpt = Annotated[Optional[str], typer.Option(
    "--dtype", parser=parse_dtype, metavar="DTYPE", help="List tensors of this dtype, e.g. F32.")]
TensorsOpt = Annotated[bool, typer.Option("--tensors", help="List every tensor (up to --limit).")]
LimitOpt = Annotated[int, typer.Option("--limit", callback=at_least("--limit", 1),
                                       help="Rows of the tensor list to print, at least 1.")]
HcOpt = Annotated[bool, typer.Option(
    "--hc", help="Show the HC sites in full (of --layers, default all): base split into pre/post/comb and the "
                 "comb matrix.")]
TreeOpt = Annotated[bool, typer.Option(
    "--tree", help="Show the tree of tensors, repeated numbered blocks collapsed (layers.[0-42], vision.blocks.[0-26]).")]
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", "-q", help="With --verify: print the verdict and the findings only.")]
MetadataOpt = Annotated[bool, typer.Option(
    "--metadata", help="Show each file's own metadata: safetensors' __metadata__, a GGUF's key/values.")]
StatsOpt = Annotated[bool, typer.Option(
    "--stats", help="Value statistics of the HC tensors (min, max, mean, std, non-finite), read in bounded "
                    "chunks; with --layers, of those layers' sites.")]
