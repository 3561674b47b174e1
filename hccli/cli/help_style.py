"""The one help style of every command: paragraphs flowed to the terminal, readable metavars, each
default said once, bounds in hc's words (cli/app.py applies it to each command and group)."""

from __future__ import annotations

import inspect
import re
import sys
from contextlib import contextmanager
from typing import Iterator

from typer.core import TyperArgument, TyperGroup

# click as Typer runs it (a copy of its own in recent versions): its range types
_click_types = sys.modules[TyperGroup.__mro__[1].__module__.rpartition(".")[0] + ".types"]


def flowed(text):
    """Help text as paragraphs rich flows to the terminal: a docstring's line breaks inside a
    paragraph (its source layout) come out as stray short lines in typer's rich help, so each
    paragraph is joined into one line; a paragraph that starts with \\b (click's mark) is a
    verbatim block (examples), kept line by line, marker dropped."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    # the leading newline: typer dedents the text again (inspect.cleandoc), which leaves the
    # first line out of the common margin; a first line of its own keeps examples indented
    return "\n" + "\n\n".join(p[1:].strip("\n") if p.startswith("\b") else " ".join(p.split())
                                for p in paragraphs)


def _metavar(param) -> str:
    """A value's placeholder in --help where the option names none: N, NUM, PATH, or the option's
    name (LAYERS, DEVICE); typer's own are <int range>, <str>, and the range's [x>=1] beside."""
    kind = getattr(param.type, "name", "")
    if kind.startswith("int"):
        return "N"
    if kind.startswith("float"):
        return "NUM"
    if kind == "path":
        return "PATH"
    return max(param.opts, key=len).lstrip("-").upper()


def apply(command) -> None:
    """The one help style of every command (app.py's and the sub-apps'): paragraphs flowed,
    readable metavars, and each default said once: where an option's help speaks of its default
    in words, typer's [default: ...] is left off, else it is shown."""
    command.help = flowed(command.help)
    command.epilog = flowed(command.epilog)
    for param in command.params:
        if param.help and not param.help.startswith("\b"):
            param.help = " ".join(param.help.split())
        if isinstance(param, TyperArgument) or getattr(param, "is_flag", False):
            continue
        if param.metavar is None:
            param.metavar = _metavar(param)
        listed = re.fullmatch(r"\[(.*)\]", param.metavar)
        if len(param.metavar) > 20 and listed and all(c in (param.help or "") for c in listed[1].split("|")):
            # a long [a|b|...] would squeeze the help column that lists the choices anyway
            param.metavar = max(param.opts, key=len).lstrip("-").upper()
        if param.help and re.search(r"\bdefault\b", param.help, re.I):
            param.show_default = False
        elif param.show_default and param.default is not None and param.default != []:
            # in the paragraph, flowed with it: typer's own sits in a column of its own beside the
            # text, which breaks the paragraph's last line short
            default = getattr(param.default, "value", param.default)
            param.help = f"{param.help or ''} \\[default: {default}]".strip()
            param.show_default = False


@contextmanager
def ranges_unsaid(params) -> Iterator[None]:
    """While the help is written: typer writes a click range as "<int range> [x>=1]" after the
    metavar; the help says the bound in hc's words instead (the error, when parsed, in click's)."""
    ranged = [(p, p.type) for p in params if isinstance(p.type, _click_types._NumberRangeBase)]
    for p, t in ranged:
        p.type = _click_types.INT if isinstance(t, _click_types.IntRange) else _click_types.FLOAT
    try:
        yield
    finally:
        for p, t in ranged:
            p.type = t
