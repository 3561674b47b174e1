"""Which flags go together: one function per command, run by `check_flags(ctx)` as the first
line of the command's body, before it opens a file or prints a line.

A single flag's value is checked by its option's callback or type (cli/options.py); what
is left for here is what no one flag can see: a flag that needs another, two that exclude
each other, one that another makes pointless. The rules read the values the flags were
parsed into from the command's context, so that a command body does not hand them over one by
one, and name the flags as the user typed them.
"""

from __future__ import annotations

from typing import Any, Callable

import typer

from hccli.base.errors import HcError


class Flags:
    """A command's parsed values by parameter name, and which of them the user set."""

    def __init__(self, ctx: typer.Context):
        self._values = ctx.params
        self._params = {p.name: p for p in ctx.command.params}

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def flag(self, name: str) -> str:
        param = self._params[name]
        if param.param_type_name == "argument":
            return (param.metavar or param.name or name).upper()
        return max(param.opts, key=len)

    def given(self, *names: str) -> list[str]:
        """The flags of `names` whose value is not the default, in the order named."""
        # a flag given with its default value changes nothing, so it conflicts with nothing
        return [self.flag(n) for n in names if self._values[n] != self._params[n].default]


def _count_params(f: Flags) -> None:
    if f["convention"] is not None and (f["plot"] is None or not f["model"]):
        raise HcError(f"--convention {f['convention']}: it picks what the whole-model bars of --plot count; "
                      "give it with --plot and --model")


def _inspect(f: Flags) -> None:
    if f["quiet"] and not f["verify"]:
        raise HcError("--quiet prints --verify's verdict and findings only; add --verify (or leave out --quiet)")


def _run_kernel(f: Flags) -> None:
    if f["compare"] is not None:
        if f["plot"] is not None:
            raise HcError("--plot draws the outputs of a run and --compare prints a comparison; give one")
        given = f.given("tokens", "mixes", "checkpoint", "hidden", "hidden_file", "dim", "config", "hc_mult",
                        "iters", "eps", "save")
        if given:
            raise HcError(f"--compare re-runs the inputs and parameters its file holds; drop {', '.join(given)}")
        return  # the file holds the inputs: what chooses them below is not asked for
    hidden = f["hidden"] or f["hidden_file"] is not None
    if f["mixes"] is not None and hidden:
        raise HcError("--mixes and --hidden are two sources of mixes; give one")
    if f["tokens"] is not None and f["mixes"] is not None:
        raise HcError("--tokens makes random mixes and --mixes reads them from a file; give one")
    if f["dim"] is not None and not hidden:
        raise HcError("--dim is the width of a hidden state; give it with --hidden")
    if f["checkpoint"] is None and f["layers"] is not None:
        raise HcError("--layers needs --checkpoint (the layer whose hc_base and hc_scale to use)")
    if f["checkpoint"] is not None and f["layers"] is None:
        raise HcError(f"--checkpoint {f['checkpoint']}: also give --layers L (and --site attn|ffn)")


def _run_site(f: Flags) -> None:
    if f["compare"] is not None:
        given = f.given("source", "config", "layers", "sites", "tokens", "streams", "save", "plot", "precision",
                        "sublayer")
        if given:
            raise HcError(f"--compare re-runs the inputs its file holds; drop {', '.join(given)}")
        return
    if f["source"] is None:
        raise HcError("run-site needs SOURCE (a checkpoint or a config.json), or --compare FILE")
    if f["tokens"] is not None and f["streams"] is not None:
        raise HcError("--tokens makes seeded streams and --streams reads them from a file; give one")


def _bench(f: Flags) -> None:
    if f["op"] != "split":
        if f["hc_mult"] not in (None, 4):
            raise HcError(f"--hc-mult {f['hc_mult']}: the site kernels are built for hc 4 only")
        if f["op"] == "site-chain" and f["host"]:
            raise HcError("--host times one eager call of site-pre / site-write; --op site-chain has none")
        return  # the site ops' own names for --impl are the core's to check
    if f["peers"] is not None:
        raise HcError("--peers loads the serving engines' site kernels, for --op site-pre, site-write, site-chain")
    from hccli.kernels.registry import TIMED, canonical

    for name in f["impl"] or ():
        if canonical(name) not in TIMED:
            raise HcError(f"--impl {name!r} is unknown to hc bench; expected some of {', '.join(TIMED)}")


RULES: dict[str, Callable[[Flags], None]] = {
    "count-params": _count_params,
    "inspect": _inspect,
    "run-kernel": _run_kernel,
    "run-site": _run_site,
    "bench": _bench,
}


def check_flags(ctx: typer.Context) -> None:
    """The rules of the command `ctx` runs (none for a command without any)."""
    rule = RULES.get(ctx.command.name or "")
    if rule is not None:
        rule(Flags(ctx))
