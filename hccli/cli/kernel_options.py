"""Options of the kernel commands (run-kernel, bench), parsed in callbacks: the core sees typed values.

A callback's HcError goes through the app's error boundary like any other (one
line, exit 2); flag names appear in these messages and nowhere in the core.
Nothing here imports torch or tilelang.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from hccli.base.errors import HcError
from hccli.base.limits import MAX_BENCH_POINTS, MAX_HC_MULT, MAX_SINKHORN_ITERS
from hccli.cli.options import (Choice, at_least, choice_option, config_option, device_option, input_file,
                               layers_option, seed_option, token_list_option, tokens_option)
from hccli.kernels.registry import ALIASES, IMPL_NAMES, TABLE, canonical
from hccli.base.vocab import DEFAULT_HC_EPS, DEFAULT_HC_MULT, DEFAULT_SINKHORN_ITERS

# every name run-kernel's --impl takes: the table's, then the older spellings still accepted
Impl = Choice("Impl", {name: name for name in (*IMPL_NAMES, *ALIASES)})


class KernelSite(Choice):
    """The sites the split-Sinkhorn op runs at (the head mix has no Sinkhorn)."""

    attn = "attn"
    ffn = "ffn"


def _canonical_impl(value: Optional[Impl]) -> Optional[str]:
    # an older spelling reaches the command as the table's row it names
    return canonical(str(value)) if value is not None else value


def one_of(names: list[str]) -> str:
    """'a, b or c'."""
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else "".join(names)


def check_eps(value: Optional[float]) -> Optional[float]:
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise HcError(f"--eps {value}: expected a finite number >= 0")
    return value


def _input_file_option(flag: str, help: str) -> Any:
    """An optional path option read as an input file (a regular file, else one line naming the flag)."""
    return Annotated[Optional[Path], typer.Option(flag, callback=input_file(flag), help=help)]


_HC_WHY = f" (a real model's hc_mult is 4; {MAX_HC_MULT} is the most hc runs the op for)"

ImplOpt = choice_option(
    Impl, "--impl", callback=_canonical_impl, metavar="NAME",  # the help lists the names
    refuse=lambda v: f"--impl {v!r} is unknown; expected one of {', '.join(IMPL_NAMES)}",
    help=one_of([f"{i.name} ({i.says})" if i.says else i.name for i in TABLE]) + ".")
DeviceOpt = device_option("cpu, cuda or cuda:N (default: chosen by --impl).")
SeedOpt = seed_option("Seed of the random input.")
HcMultOpt = Annotated[Optional[int], typer.Option(
    "--hc-mult", callback=at_least("--hc-mult", 1, MAX_HC_MULT, _HC_WHY),
    help=f"Streams (default {DEFAULT_HC_MULT}; at most {MAX_HC_MULT}).")]
ItersOpt = Annotated[Optional[int], typer.Option(
    "--iters", callback=at_least("--iters", 1, MAX_SINKHORN_ITERS),
    help=f"Sinkhorn iterations (default {DEFAULT_SINKHORN_ITERS}).")]
EpsOpt = Annotated[Optional[float], typer.Option("--eps", callback=check_eps, help=f"eps (default {DEFAULT_HC_EPS:g}).")]
TokensOpt = tokens_option("Random mixes (or hidden states) of this many tokens.")
TokenListOpt = token_list_option("Token counts to time (repeat the option, at most "
                                 f"{MAX_BENCH_POINTS} times; default 1, 64, 4096, 65536, 1M, 16M on a GPU, "
                                 "up to 65536 on the CPU).", most=MAX_BENCH_POINTS)
MixesOpt = _input_file_option(
    "--mixes", "Mixes [..., (2+hc)*hc] from a .safetensors (tensor `mixes`), .npy or .json file.")
HiddenFileOpt = _input_file_option(
    "--hidden-file", "Like --hidden, with the hidden state from a file (tensor `hidden`).")
ConfigOpt = config_option("Take hc_mult, iterations, eps and norm_eps from this config.json.")
CompareOpt = _input_file_option(
    "--compare", "Re-run the inputs of a --save file and compare each output with the stored one (exit 1 beyond --atol).")
SiteOpt = choice_option(KernelSite, "--site", "-s", help="attn or ffn.", refuse=lambda v: (
    f"--site {v!r}: the split-Sinkhorn op runs at the attn and ffn sites (the head mix has no Sinkhorn); "
    "expected attn or ffn"))
LayerOpt = layers_option("--layer", "-l", one=True, help="Layer of --checkpoint (stages after the backbone).")
