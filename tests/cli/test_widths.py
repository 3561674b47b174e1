"""Widths, as a user meets them: every documented invocation at an 80-column terminal and piped,
and every command's --help at 80 columns.

The documented invocations are the console blocks that tests/cli/test_docs_commands.py runs (its
extractor and runner, reused: the same commands in the same order in a fresh folder), run twice
more: with COLUMNS=80, as a terminal of 80 columns gives it (the width rule takes COLUMNS, piped
or not), and piped with COLUMNS unset. At 80 every line fits; piped, a table row may stay one
long record (a line that a script reads whole), but every other line (headers, summaries,
titles, notes) keeps within 120. A table row is told by rich's box-drawing characters, which
only tables and trees draw (no prose of ours holds one). The boundary's `hc: error:` line and a
`warning:` line are one line at any width (docs/security.md): records that scripts grep."""

from __future__ import annotations

import re
import subprocess

import pytest

from conftest import every_command
from test_docs_commands import CASES, blocks, session, _run  # noqa: F401 - session: the fixture, reused

TERMINAL = 80
PIPED_PROSE = 120
_BOX = re.compile("[\u2500-\u257f]")  # box drawing: a table's rules and column separators, a tree's guides
_ONE_LINE = ("hc: error: ", "hc: internal error: ", "warning: ")


def _wide(printed: list[str], width: int, tables_whole: bool) -> list[tuple[int, str]]:
    return [(len(line), line) for line in printed if len(line) > width and not line.startswith(_ONE_LINE)
            and not (tables_whole and _BOX.search(line))]


def _mode(session, name: str, columns: str | None) -> dict:
    env = {k: v for k, v in session["env"].items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    root = session["root"] / f"widths-{name}"
    root.mkdir(exist_ok=True)
    return session.setdefault(f"widths-{name}", {"root": root, "env": env, "done": {}})


def _printed(mode: dict, page: str, index: int) -> list[str]:
    """What the block printed, its page's earlier blocks run first (once) in the mode's folder."""
    page_blocks = blocks(page)
    done = mode["done"].setdefault(page, 0)
    for earlier in page_blocks[done:index]:
        if not earlier.needs:
            _run(mode, earlier)
    mode["done"][page] = index + 1
    printed, failed = _run(mode, page_blocks[index])
    assert not failed, (page, page_blocks[index].line, failed, printed[-20:])
    return printed


def _skip_unrunnable(page: str, index: int) -> None:
    block = blocks(page)[index]
    if block.needs:
        pytest.skip(f"{page} line {block.line} needs {block.needs}")


@pytest.mark.parametrize("page, index", CASES, ids=[f"{p}:{blocks(p)[i].line or 'table'}" for p, i in CASES])
def test_every_line_fits_an_80_column_terminal(session, page, index):
    _skip_unrunnable(page, index)
    printed = _printed(_mode(session, "80", str(TERMINAL)), page, index)
    wide = _wide(printed, TERMINAL, tables_whole=False)
    assert not wide, (page, blocks(page)[index].line, wide)


@pytest.mark.parametrize("page, index", CASES, ids=[f"{p}:{blocks(p)[i].line or 'table'}" for p, i in CASES])
def test_piped_prose_keeps_within_120_columns(session, page, index):
    _skip_unrunnable(page, index)
    printed = _printed(_mode(session, "piped", None), page, index)
    wide = _wide(printed, PIPED_PROSE, tables_whole=True)
    assert not wide, (page, blocks(page)[index].line, wide)


# --help

def _every_command() -> list[list[str]]:
    return [[]] + every_command()  # hc itself, then each subcommand


def _help(session, command: list[str]) -> list[str]:
    env = {**session["env"], "COLUMNS": str(TERMINAL)}
    done = subprocess.run(["hc", *command, "--help"], env=env, capture_output=True, text=True, timeout=120,
                          cwd=session["root"])
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout.splitlines()


def _word(text: str) -> str:
    return text.split()[0] if text.split() else ""


def _short_prose_lines(lines: list[str]) -> list[str]:
    """Lines of a flowed paragraph that end before they need to: the next line's first word would
    have fit. Outside the panels a paragraph sits one column in, on rich's width less its padding
    (a verbatim block, an example, is indented further and kept as written); in a panel the help
    column starts where its continuation lines start, and ends before the right border's padding."""
    short = []
    for a, b in zip(lines, lines[1:]):
        if re.match(r" \S", a) and re.match(r" \S", b):
            if len(a.rstrip()) - 1 + 1 + len(_word(b)) <= TERMINAL - 2:
                short.append(a)
    panel: list[str] = []
    for line in lines + [""]:
        if line.startswith("│") and line.endswith("│"):
            panel.append(line)
            continue
        short += _short_panel_lines(panel)
        panel = []
    return short


def _short_panel_lines(panel: list[str]) -> list[str]:
    starts = [len(line) - len(line[1:].lstrip()) for line in panel if line[1:].strip()]
    continued = [s for s in starts if s > min(starts, default=0)]  # nothing in the name column
    if not continued:
        return []
    x = max(set(continued), key=continued.count)  # the help column's first character
    short = []
    for a, b in zip(panel, panel[1:]):
        text_a, text_b = a[x:-1].rstrip(), b[x:-1].strip()
        if b[1:x].strip() or not text_a or not text_b or text_b.startswith("[required]"):
            continue  # b begins a new row, or a new item
        room = len(a) - 2 - x  # the column's width: up to the border's padding
        if len(text_a) + 1 + len(_word(text_b)) <= room:
            short.append(a)
    return short


@pytest.mark.parametrize("command", _every_command(), ids=lambda c: " ".join(c) or "hc")
def test_help_flows_to_80_columns(session, command):
    lines = _help(session, command)
    text = "\n".join(lines)
    assert not [line for line in lines if len(line) > TERMINAL], text
    # click's range types as typer writes them: a bound is said in the help's own words
    assert not re.search(r"<\w+ range>|\bx[<>]=?-?\d|\d[<>]=?x\b", text), text
    assert not _short_prose_lines(lines), (_short_prose_lines(lines), text)


@pytest.mark.parametrize("command", _every_command(), ids=lambda c: " ".join(c) or "hc")
def test_help_says_each_default_once(session, command):
    """Where an option's help speaks of its default, typer's [default: ...] is not added to it."""
    lines = _help(session, command)
    entries, entry = [], []
    for line in lines:
        if re.match(r"│ [-\w*]", line) and entry:  # a new option or argument row
            entries.append(" ".join(entry))
            entry = []
        if line.startswith("│"):
            entry.append(line.strip("│ "))
    entries.append(" ".join(entry))
    twice = [e for e in entries if "[default:" in e and re.search(r"\bdefault\b", e.replace("[default:", ""), re.I)]
    assert not twice, twice


@pytest.mark.parametrize("command", _every_command(), ids=lambda c: " ".join(c) or "hc")
def test_help_examples_stay_verbatim(session, command):
    """A verbatim block (click's \\b paragraph: the examples, indented) shows each of its lines whole, none
    spilled onto a line of its own at the margin."""
    import typer

    from hccli.cli.app import register

    cmd = typer.main.get_command(register())
    for name in command:
        cmd = cmd.commands[name]
    # app.flowed has joined every other paragraph into one unindented line
    source = "\n".join(t for t in (cmd.help, cmd.epilog) if t)
    verbatim = [line.strip() for line in source.splitlines() if re.match(r"\s+\S", line)]
    shown = {line.strip() for line in _help(session, command)}
    assert [line for line in verbatim if line not in shown] == []
    if command and command[0] != "cache":
        assert verbatim, "the examples are a verbatim block"
