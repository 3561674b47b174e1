"""The root Typer app and the error boundary.

Each command lives in its own module and registers itself on `app` when
imported. The boundary sits in the group's `invoke`, so Typer's CliRunner in the
tests goes through the same path as the console script: an HcError becomes one
line on stderr and its exit code. HC_DEBUG=1 lets the traceback through.
"""

from __future__ import annotations

import os

import typer
from typer.core import TyperGroup

from hccli import __version__
from hccli.errors import HcError


class _HcGroup(TyperGroup):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except HcError as exc:
            if os.environ.get("HC_DEBUG") == "1":
                raise
            typer.echo(f"hc: error: {exc.message}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except BrokenPipeError:  # `hc ... | head`
            raise typer.Exit(0) from None


app = typer.Typer(
    name="hc",
    cls=_HcGroup,
    help=(
        "Count, inspect and run the hyper-connections (mHC) of DeepSeek-V4-family models.\n\n"
        "Set HC_DEBUG=1 to see tracebacks."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"hc {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """hc: hyper-connections of DeepSeek-V4-family models."""


# Importing a command module registers it on `app`. Command modules import only
# typer and the core they need at call time; torch and tilelang load inside the
# kernel commands.
COMMANDS = {
    "count-params": "count_params",
    "inspect": "inspect",
    "make-checkpoint": "make_checkpoint",
    "run-kernel": "run_kernel",
    "bench": "bench",
    "diff": "diff",
}
_registered: set[str] = set()


def register(names=None) -> typer.Typer:
    """Register the named commands (default: all) and return the app."""
    import importlib

    for name in names or COMMANDS:
        if name not in _registered:
            importlib.import_module(f"hccli.cli.{COMMANDS[name]}")
            _registered.add(name)
    return app


def main() -> None:
    # Typer builds every registered command's parameters at each start; a run of
    # one command registers only that one (start-up time), --help and the rest all.
    import sys

    first = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    register([first] if first in COMMANDS and "--help" not in sys.argv and "-h" not in sys.argv else None)
    app()
