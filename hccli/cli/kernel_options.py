"""Options of the kernel commands (run-kernel, bench), parsed in callbacks: the core sees typed values.

A callback's HcError goes through the app's error boundary like any other (one
line, exit 2); flag names appear in these messages and nowhere in the core.
Nothing here imports torch or tilelang.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer

from hccli.cli.specs import parse_layers
from hccli.base.errors import HcError
from hccli.base.limits import MAX_HC_MULT, MAX_SINKHORN_ITERS
from hccli.kernels.registry import IMPL_NAMES, TABLE, canonical
from hccli.base.vocab import DEFAULT_HC_EPS, DEFAULT_HC_MULT, DEFAULT_SINKHORN_ITERS


def _impl(value: str) -> str:
    name = canonical(value)
    if name is None:
        raise HcError(f"--impl {value!r} is unknown; expected one of {', '.join(IMPL_NAMES)}")
    return name


def one_of(names: list[str]) -> str:
    """'a, b or c'."""
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else "".join(names)


def at_least(flag: str, minimum: int, maximum: int | None = None, why: str = ""):
    def check(value):
        if value is None:
            return value
        for v in value if isinstance(value, list) else [value]:
            if v < minimum or (maximum is not None and v > maximum):
                upper = f" and at most {maximum:,}" if maximum is not None else ""
                raise HcError(f"{flag} {v}: expected at least {minimum}{upper}{why}")
        return value

    return check


def check_eps(value: Optional[float]) -> Optional[float]:
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise HcError(f"--eps {value}: expected a finite number >= 0")
    return value


def input_file(flag: str):
    def check(value: Optional[Path]) -> Optional[Path]:
        if value is not None:
            from hccli.runkernel.files import regular_file

            try:
                regular_file(value)
            except HcError as exc:
                raise HcError(f"{flag} {exc.message}") from None
        return value

    return check


def _input_file_option(flag: str, help: str) -> Any:
    """An optional path option read as an input file (a regular file, else one line naming the flag)."""
    return Annotated[Optional[Path], typer.Option(flag, callback=input_file(flag), help=help)]


def _one_layer(text: str) -> int:
    # the layer-spec parser of every command, so that `--layer x` reads as it does for inspect
    layers = parse_layers(text, "--layer")
    if len(layers) != 1:
        raise HcError(f"--layer {text!r}: expected one layer number (run-kernel runs one site)")
    return next(iter(layers))


def _site(value: str) -> str:
    if value not in ("attn", "ffn"):
        raise HcError(f"--site {value!r}: the split-Sinkhorn op runs at the attn and ffn sites "
                      "(the head mix has no Sinkhorn); expected attn or ffn")
    return value


_HC_WHY = f" (a real model's hc_mult is 4; {MAX_HC_MULT} is the most hc runs the op for)"

ImplOpt = Annotated[str, typer.Option("--impl", callback=_impl, help=one_of(
    [f"{i.name} ({i.says})" if i.says else i.name for i in TABLE]) + ".")]
DeviceOpt = Annotated[Optional[str], typer.Option(
    "--device", help="cpu, cuda or cuda:N (default: chosen by --impl).")]
SeedOpt = Annotated[int, typer.Option("--seed", callback=at_least("--seed", 0), help="Seed of the random input.")]
HcMultOpt = Annotated[Optional[int], typer.Option(
    "--hc-mult", callback=at_least("--hc-mult", 1, MAX_HC_MULT, _HC_WHY),
    help=f"Streams (default {DEFAULT_HC_MULT}; at most {MAX_HC_MULT}).")]
ItersOpt = Annotated[Optional[int], typer.Option(
    "--iters", callback=at_least("--iters", 1, MAX_SINKHORN_ITERS),
    help=f"Sinkhorn iterations (default {DEFAULT_SINKHORN_ITERS}).")]
EpsOpt = Annotated[Optional[float], typer.Option("--eps", callback=check_eps, help=f"eps (default {DEFAULT_HC_EPS:g}).")]
TokensOpt = Annotated[Optional[int], typer.Option(
    "--tokens", "-t", callback=at_least("--tokens", 1), help="Random mixes (or hidden states) of this many tokens.")]
TokenListOpt = Annotated[Optional[List[int]], typer.Option(
    "--tokens", "-t", callback=at_least("--tokens", 1), help="Token counts to time (repeat the option; default "
    "1, 64, 4096, 65536, 1M, 16M on a GPU, up to 65536 on the CPU).")]
MixesOpt = _input_file_option(
    "--mixes", "Mixes [..., (2+hc)*hc] from a .safetensors (tensor `mixes`), .npy or .json file.")
HiddenFileOpt = _input_file_option(
    "--hidden-file", "Like --hidden, with the hidden state from a file (tensor `hidden`).")
ConfigOpt = _input_file_option("--config", "Take hc_mult, iterations, eps and norm_eps from this config.json.")
CompareOpt = _input_file_option(
    "--compare", "Re-run the inputs of a --save file and compare each output with the stored one (exit 1 beyond --atol).")
SiteOpt = Annotated[str, typer.Option("--site", "-s", callback=_site, help="attn or ffn.")]
LayerOpt = Annotated[Optional[int], typer.Option(
    "--layer", "-l", parser=_one_layer, metavar="LAYER",
    help="Layer of --checkpoint (stages after the backbone).")]
