"""The options of `hc inspect`, parsed here and only here: the core gets sets of layer
numbers and dtype names as headers spell them, never a flag."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Optional

import typer

from hccli.errors import HcError

# Six digits, as vocab reads layer numbers in tensor names: no model comes near, and a
# range of them stays a set a few MB large.
_ITEM = re.compile(r"(\d{1,6})(?:\s*-\s*(\d{1,6}))?")


def parse_layer_spec(flag: str, spec: str) -> frozenset[int]:
    """'3', '2-7', '2,8,14', '0-3,8' -> layer numbers. Checked against a checkpoint later,
    by the core, once its layers are known."""
    out: set[int] = set()
    for item in spec.split(","):
        item = item.strip()
        m = _ITEM.fullmatch(item)
        if not m:
            what = "an empty item" if not item else repr(item)
            raise HcError(f"{flag} {spec!r}: {what} is not a layer number or a range like 3-7")
        a = int(m[1])
        b = int(m[2]) if m[2] is not None else a
        if a > b:
            raise HcError(f"{flag} {spec!r}: range {item} runs backwards")
        out.update(range(a, b + 1))
    return frozenset(out)


def _layers(flag: str):
    return lambda spec: parse_layer_spec(flag, spec)


def parse_dtype(spec: str) -> str:
    from hccli.checkpoint.header import DTYPES  # at parse time: the registry of all commands stays light

    dtype = spec.strip().upper()
    if dtype not in DTYPES:
        raise HcError(f"--dtype {spec!r}: not a safetensors dtype; expected one of {', '.join(DTYPES)}")
    return dtype


PathArg = Annotated[str, typer.Argument(
    help="A checkpoint directory, its model.safetensors.index.json, one .safetensors file, or a hub "
         "repository hf://org/name\\[@revision]\\[/subfolder].", show_default=False)]
ConfigOpt = Annotated[Optional[Path], typer.Option(
    "--config", help="config.json to check against (default: the one beside the checkpoint, if any).")]
VerifyOpt = Annotated[bool, typer.Option(
    "--verify", help="Check index, headers, HC tensors and the config's inventory; exit 1 if an error is found.")]
NameOpt = Annotated[Optional[str], typer.Option(
    "--name", "-n", help="List tensors whose name matches this glob, e.g. '*.hc_*' or 'layers.3.*'.")]
LayerOpt = Annotated[Optional[frozenset], typer.Option(
    "--layer", "-l", parser=_layers("--layer"), metavar="LAYERS",
    help="List tensors of these layers (3, 2-7, 2,8,14; stages after the backbone).")]
DtypeOpt = Annotated[Optional[str], typer.Option(
    "--dtype", parser=parse_dtype, help="List tensors of this dtype, e.g. F32.")]
TensorsOpt = Annotated[bool, typer.Option("--tensors", help="List every tensor (up to --limit).")]
LimitOpt = Annotated[int, typer.Option("--limit", help="Rows of the tensor list to print.", min=1)]
HcLayerOpt = Annotated[Optional[frozenset], typer.Option(
    "--hc-layer", parser=_layers("--hc-layer"), metavar="LAYERS",
    help="Show these layers' HC sites in full: base split into pre/post/comb and the comb matrix.")]
