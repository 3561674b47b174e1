"""The root Typer app and the error boundary.

Each command lives in its own module and registers itself on `app` when
imported. The boundary sits in the group's `invoke`, so Typer's CliRunner in the
tests goes through the same path as the console script: whatever a command
raises becomes one line on stderr and an exit code chosen by the exception's
type (`describe`). HC_DEBUG=1 adds the traceback and keeps the code. What click
itself refuses while parsing (an unknown option, a value of the wrong type, no
command) is answered in the group's `main` the same way: one line, one hint, exit 2.
"""

from __future__ import annotations

import gc
import os
import signal
import sys

# The imports of a start (typer, rich, the command's modules) build ~100k objects that live to
# the end; a cyclic GC pass over them as they pile up frees nothing and delays the start.
_gc_on = gc.isenabled()
gc.disable()

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from hccli import __version__
from hccli.base.errors import EXIT_FINDINGS, EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, HcError
from hccli.base import interrupts
from hccli.cli import help_style

if _gc_on:
    gc.enable()  # a library user's (or a test's) process keeps its GC


def describe(exc: BaseException) -> tuple[str, int]:
    """The one line and the exit code for an exception that reached the boundary."""
    from hccli.cli.output import plain  # only on the way out: start-up stays lean

    if isinstance(exc, HcError):
        return f"hc: error: {plain(exc.message)}", exc.exit_code
    if isinstance(exc, interrupts.Stopped):  # SIGTERM, SIGHUP: as shells report them, 128 + the number
        return f"hc: interrupted ({signal.Signals(exc.signum).name})", 128 + exc.signum
    if isinstance(exc, (KeyboardInterrupt, typer.Abort)):  # Typer would end an Abort with 1: findings
        return "hc: interrupted", EXIT_INTERRUPTED
    if isinstance(exc, OSError):
        # EACCES, EROFS, ENOSPC, EIO ...: the user's to act on, so it names the path, not our code
        what = exc.strerror or str(exc) or type(exc).__name__
        paths = [os.fsdecode(p) for p in (exc.filename, exc.filename2) if p is not None]
        where = " -> ".join(plain(p) for p in paths)
        return f"hc: error: {where + ': ' if where else ''}{plain(what)}", EXIT_INPUT
    detail = plain(str(exc))[:300]
    return (f"hc: internal error: {type(exc).__name__}{': ' + detail if detail else ''} "
            "(HC_DEBUG=1 for the traceback)", EXIT_INTERNAL)


def _say(line: str) -> None:
    """The boundary's one line on stderr; where stderr is gone (the terminal hung up: SIGHUP, EIO)
    the exit code alone says it."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _quiet_stdout() -> None:
    # The reader went away (`hc ... | head -1`): point stdout at /dev/null so that the
    # flush at exit does not fail a second time and turn a clean end into exit 120.
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # CliRunner's stdout has no descriptor
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


# click as Typer runs it (a copy of its own in recent versions): its exceptions are the usage errors
_click_errors = sys.modules[TyperGroup.__mro__[1].__module__.rpartition(".")[0] + ".exceptions"]


def usage_lines(exc: Exception) -> list[str]:
    """A usage error of click's (unknown option or command, a value of the wrong type, a missing
    argument, no command at all): its message as the one line, and where to look next."""
    ctx = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None else "hc"
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    from hccli.cli.output import plain

    return [f"hc: error: {plain(message)}", f"see '{plain(path)} --help'"]


def _parsed(parse_args, ctx, args):
    try:
        return parse_args(ctx, args)
    except _click_errors.UsageError as exc:
        if exc.ctx is None:  # click's parser leaves some out: the hint then names the command all the same
            exc.ctx = ctx
        raise


class _HcSubGroup(TyperGroup):
    """A group of commands (the root, `hc cache`): no command is a usage error like any other."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        help_style.apply(self)

    def parse_args(self, ctx, args):
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            # click's own answer would print the whole help on stdout, as it builds its message
            raise _click_errors.UsageError(f"missing command; expected one of {', '.join(self.list_commands(ctx))}",
                                           ctx=ctx)
        return _parsed(super().parse_args, ctx, args)


class _HcGroup(_HcSubGroup):
    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        # The boundary for what click itself refuses, before or around `invoke`: one line (and one
        # hint) for a usage error instead of click's box with the usage; click's own ends (--help,
        # typer.Exit) come back as their exit codes.
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _click_errors.ClickException as exc:
            for line in usage_lines(exc):
                _say(line)
            code = EXIT_INPUT
        except (typer.Abort, KeyboardInterrupt) as exc:  # a prompt's end of input, a stop in parsing
            line, code = describe(exc)
            _say(line)
        else:
            code = code if isinstance(code, int) else EXIT_OK  # a command returns None
        if standalone_mode:
            sys.exit(code)
        return code

    def invoke(self, ctx):
        from hccli.cli.output import begin_invocation  # (a command's own import: nothing added to a start)

        begin_invocation()  # a JSON document's warnings are its own invocation's
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.TyperException, _click_errors.ClickException):
            raise  # Typer's own ends: --help, typer.Exit(code), usage errors (main says them)
        except BrokenPipeError:
            _quiet_stdout()
            raise typer.Exit(EXIT_OK) from None
        except (Exception, KeyboardInterrupt) as exc:
            line, code = describe(exc)
            if os.environ.get("HC_DEBUG") == "1":
                import traceback

                traceback.print_exc()
            _say(line)
            raise typer.Exit(code) from None


def _refuse_repeats(command, ctx, args) -> list[str]:
    """An option that takes one value, given twice: one line, where click would let the last one
    win silently (`--tokens 4 --tokens 8`). Options a command repeats (bench's --tokens, the list
    options: docs/CLI.md) are declared multiple and pass, as do flags. Read with click's own
    parser, so that `--tokens=4`, `-t4` and a value that looks like a flag are told apart as
    click tells them."""
    if not ctx.resilient_parsing:
        seen: set[str] = set()
        for param in command.make_parser(ctx).parse_args(args=list(args))[2]:
            if getattr(param, "multiple", True) or getattr(param, "is_flag", True) or param.nargs != 1:
                continue
            if param.name in seen:
                raise _click_errors.UsageError(f"{max(param.opts, key=len)} given more than once; "
                                               f"hc {ctx.command.name} takes one value of it", ctx=ctx)
            seen.add(param.name)
    return args


class _HcCommand(TyperCommand):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        help_style.apply(self)

    def format_help(self, ctx, formatter):
        with help_style.ranges_unsaid(self.params):
            return super().format_help(ctx, formatter)

    def parse_args(self, ctx, args):
        _parsed(lambda c, a: _refuse_repeats(self, c, a), ctx, args)
        return _parsed(super().parse_args, ctx, args)

    def collect_usage_pieces(self, ctx):
        # arguments as click names them (PATH, [CONFIG]): typer writes a required one as {path},
        # which reads as a placeholder left unfilled
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = (param.metavar or param.name or "").upper()
                pieces.append(name if param.required else f"[{name}]")
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


class HcTyper(typer.Typer):
    """The root app and its sub-apps (`hc cache`): every command gets the usage line above."""

    def __init__(self, *args, cls=None, **kwargs):
        super().__init__(*args, cls=cls or _HcSubGroup, **kwargs)

    def command(self, *args, cls=None, **kwargs):
        return super().command(*args, cls=cls or _HcCommand, **kwargs)


app = HcTyper(
    name="hc",
    cls=_HcGroup,
    help=(
        "Count, inspect and run the hyper-connections (mHC) of DeepSeek-V4-family models.\n\n"
        "Exit codes: 0 ok, 1 verify found errors, 2 bad usage or input, 70 internal error, 130 interrupted "
        "(143 SIGTERM, 129 SIGHUP). "
        "Set HC_DEBUG=1 to see tracebacks."
    ),
    no_args_is_help=True,
    add_completion=True,  # typer's --install-completion and --show-completion (the README names them)
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
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Show the version and exit."),
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
    "run-site": "run_site",
    "check-port": "check_port",
    "cache": "cache",
}
_registered: set[str] = set()


def register(names=None) -> typer.Typer:
    """Register the named commands (default: all) and return the app."""
    import importlib

    gc_on = gc.isenabled()
    gc.disable()  # see the top of this module
    try:
        for name in names or COMMANDS:
            if name not in _registered:
                importlib.import_module(f"hccli.cli.commands.{COMMANDS[name]}")
                _registered.add(name)
    finally:
        if gc_on:
            gc.enable()
    return app


# Commands whose runs that answered (these exit codes: diff's 1 says a value changed) end without
# interpreter teardown (see _end): they hold no resources that only a finaliser releases, and
# freeing their readers' ~100k objects takes a while.
_QUICK_EXIT = {"inspect": (EXIT_OK,), "count-params": (EXIT_OK,), "diff": (EXIT_OK, EXIT_FINDINGS)}
# Commands that run with the cyclic GC off: they build ~500k long-lived, acyclic objects (headers,
# index, tensor records) that a full collection would walk again and again, freeing nothing; the
# process ends soon after (diff's compare allocates reused buffers and arrays, no cycles).
_NO_GC = frozenset({"inspect", "diff"})
# OpenBLAS starts a spinning thread per core when numpy is imported; inspect's few 4x4 matrices
# need none, nor run-site's projections of a few tokens (threads spinning for busy cores make
# them far slower than one thread). Only set where the user chose no thread count of their own.
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_ONE_BLAS_THREAD = frozenset({"inspect", "run-site", "check-port"})


def main() -> None:
    # The first Ctrl-C, SIGTERM or SIGHUP stops the command (KeyboardInterrupt: its clean-up runs,
    # the boundary prints one line, the code is 128 + the signal's number); later ones are ignored,
    # so they cannot cut that short. A signal the parent made us ignore (a background job's SIGINT,
    # nohup's SIGHUP) stays ignored.
    taken = interrupts.install()
    # Typer builds every registered command's parameters at each start; a run of
    # one command registers only that one (start-up time), --help and the rest all.
    first = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    helping = "--help" in sys.argv or "-h" in sys.argv
    if first in _ONE_BLAS_THREAD and not helping and not any(k in os.environ for k in _BLAS_THREADS):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    if first in _NO_GC and not helping:
        gc.disable()
    register([first] if first in COMMANDS and not helping else None)
    try:
        try:
            app()
        except SystemExit as done:
            code = done.code
        else:
            code = EXIT_OK
        # The command is over. Python's teardown puts back the default action of a signal it
        # handles (the process dies with no exit code of ours) but keeps an ignored one ignored.
        stopped = interrupts.fired() is not None
        for s in taken:
            signal.signal(s, signal.SIG_IGN)
    except KeyboardInterrupt as exc:
        # The first stop signal came after the command's own boundary had answered (stop_once has
        # already ignored the rest): the same one line as any interrupted command, no traceback.
        line, code = describe(exc)
        stopped = True
        _say(line)
    try:
        sys.stdout.flush()  # what is still buffered goes now, where a closed pipe can be told apart
    except BrokenPipeError:
        _quiet_stdout()
        code = EXIT_OK
    if stopped and isinstance(code, int):
        # A KeyboardInterrupt that left an exec() or eval() of a string on its way to the boundary
        # (dataclasses, namedtuple and typing make their methods so: any import the command does
        # lazily, rich for its result line among them) is recorded by CPython as unhandled, caught
        # or not; `python -m hccli` then ends, after the teardown, by killing itself with SIGINT
        # instead of exiting with our code. After a Ctrl-C the process therefore ends here.
        _end(code, stopped=True)
    if first in _QUICK_EXIT and (EXIT_OK if code is None else code) in _QUICK_EXIT[first] and not helping:
        _end(EXIT_OK if code is None else code)
    sys.exit(code)


def _end(code: int, *, stopped: bool = False) -> None:
    """Exit with `code` now, skipping the interpreter's teardown (freeing every object one by
    one). The atexit functions still run and both streams are flushed. Unless a Ctrl-C `stopped`
    the command (then this is the only end that keeps the code), with another thread alive (none
    of ours outlives its command) or a stream that cannot be flushed the normal exit takes over."""
    import atexit
    import threading

    if threading.active_count() > 1 and not stopped:
        return
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        if not stopped:
            return  # let the normal exit deal with it
    os._exit(code)
