"""Every command shown in README.md and docs/ runs as written.

The convention (docs/ARCHITECTURE.md says it for writers):
- A ```console block is a shell session. `$ ` lines are the commands, run in order by one bash;
  every other line is output and must be a line of what the block printed (compared stripped;
  `...` alone elides lines, within a line it stands for any text).
- Each command must exit 0, unless the next command is `echo $?`: the line it prints, shown
  in the block, says the code.
- A block holding `# needs: gpu` (or `network`) is not run; the test says why it skipped.
- The blocks of one page run in order in one fresh folder of their own, beside links to the
  repository's sample_configs/ and docs/, so a page makes first what its examples need.
- The README's table of commands holds one `hc ...` example a row: they run after its blocks.
- No other fenced block (bash, sh, ...) holds commands, so nothing shown goes unrun.
Each `hc` runs in a fresh interpreter as the console script does, with its cache in the test's
folder and the hub offline."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import ROOT

PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]
_FAILED = "__hc_docs_command_failed__"
_NEEDS = re.compile(r"^# needs: (\w+)")


@dataclass
class Block:
    page: str
    line: int
    commands: list[str]
    shown: list[str] = field(default_factory=list)
    needs: str | None = None


def fenced(text: str):
    """(language, first line number, body) of each fenced block, a list item's (indented) too."""
    for m in re.finditer(r"^( *)```([\w-]*)\n(.*?)^\1```", text, re.S | re.M):
        body = "".join(line[len(m.group(1)):] for line in m.group(3).splitlines(keepends=True))
        yield m.group(2), text.count("\n", 0, m.start()) + 1, body


def readme_table_examples(text: str) -> list[str]:
    """The `hc ...` code spans of the README's table of commands, in table order."""
    section = text.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    return [m for row in re.findall(r"^\|.*\|$", section, re.M) for m in re.findall(r"`(hc [^`]+)`", row)]


def blocks(page: str) -> list[Block]:
    text = (ROOT / page).read_text()
    out = []
    for lang, line, body in fenced(text):
        if lang != "console":
            continue
        b = Block(page, line, [])
        for row in body.splitlines():
            if row.startswith("$ "):
                b.commands.append(row[2:])
            elif (need := _NEEDS.match(row)):
                b.needs = need.group(1)
            elif row.strip() and row.strip() != "...":
                b.shown.append(row.strip())
        out.append(b)
    if page == "README.md":
        out.append(Block(page, 0, readme_table_examples(text)))
    return out


CASES = [(page, i) for page in PAGES for i, _ in enumerate(blocks(page))]


def _script(commands: list[str]) -> str:
    lines = []
    for i, cmd in enumerate(commands):
        lines.append(cmd)
        if i + 1 < len(commands) and commands[i + 1] == "echo $?":
            continue  # the code is shown, and checked as output
        lines.append(f'__rc=$?; [ "$__rc" -eq 0 ] || echo "{_FAILED} {i} $__rc"')
    return "\n".join(lines) + "\n"


def _shown_in(line: str, printed: set[str]) -> bool:
    if "..." not in line:
        return line in printed
    shape = re.compile(".*".join(map(re.escape, line.split("..."))))
    return any(shape.fullmatch(p) for p in printed)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    root = tmp_path_factory.mktemp("docs")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    # the console script's way in: the program is called hc (usage lines, completion)
    (bin_dir / "hc").write_text(f'#!/bin/sh\nexec "{sys.executable}" -c "import sys; sys.argv[0] = \'hc\'; '
                                f'from hccli.cli.app import main; main()" "$@"\n')
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "HF_ENDPOINT", "HF_TOKEN")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", HC_CACHE_DIR=str(root / "cache"),
               HF_HUB_OFFLINE="1", PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return {"root": root, "env": env, "done": {}}


def _run(session, block: Block) -> tuple[list[str], list[tuple[str, int]]]:
    work = session["root"] / re.sub(r"\W", "_", block.page)
    if not work.exists():
        work.mkdir()
        for name in ("sample_configs", "docs"):
            (work / name).symlink_to(ROOT / name)
    done = subprocess.run(["bash", "-c", _script(block.commands)], cwd=work, env=session["env"],
                          capture_output=True, text=True, timeout=900)
    printed, failed = [], []
    for line in (done.stdout + done.stderr).splitlines():
        if line.startswith(_FAILED):
            _, i, code = line.split()
            failed.append((block.commands[int(i)], int(code)))
        else:
            printed.append(line)
    return printed, failed


@pytest.mark.parametrize("page, index", CASES, ids=[f"{p}:{blocks(p)[i].line or 'table'}" for p, i in CASES])
def test_the_block_runs_as_written(session, page, index):
    """Earlier blocks of the page run first (once), as a reader would have run them."""
    page_blocks = blocks(page)
    block = page_blocks[index]
    if block.needs:
        pytest.skip(f"{page} line {block.line} needs {block.needs}")
    done = session["done"].setdefault(page, 0)
    for earlier in page_blocks[done:index]:
        if not earlier.needs:
            _run(session, earlier)
    session["done"][page] = index + 1
    printed, failed = _run(session, block)
    assert not failed, (page, block.line, failed, printed[-40:])
    lines = {line.strip() for line in printed}
    missing = [s for s in block.shown if not _shown_in(s, lines)]
    assert not missing, (page, block.line, missing, printed[-60:])


def test_every_page_has_its_commands_in_console_blocks():
    """A command in any other fenced block would be shown and never run."""
    for page in PAGES:
        for lang, line, body in fenced((ROOT / page).read_text()):
            assert lang not in ("bash", "sh", "shell", "zsh"), (page, line, lang)
            if lang != "console":
                assert not re.search(r"^(\$ |hc )", body, re.M), (page, line)


def test_the_readme_table_lists_every_command_with_an_example():
    from hccli.cli.app import COMMANDS

    examples = readme_table_examples((ROOT / "README.md").read_text())
    assert {e.split()[1] for e in examples} == set(COMMANDS)


def test_the_readme_test_command_is_what_ci_runs():
    text = (ROOT / "README.md").read_text()
    tests = next(b for b in blocks("README.md") if any("pytest" in c for c in b.commands))
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for command in tests.commands:
        assert command in ci, command
    assert len(text.encode()) <= 12_288


def _anchors(path: Path) -> set[str]:
    """GitHub's ids of a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.*)$", path.read_text(), re.M)}


def test_links_resolve_and_every_page_is_reached_from_the_readme():
    pages, reached, todo = set(PAGES), set(), ["README.md"]
    while todo:
        page = todo.pop()
        if page in reached:
            continue
        reached.add(page)
        for target in re.findall(r"\]\(([^)\s]+)\)", (ROOT / page).read_text()):
            if re.match(r"\w+://", target):
                assert target.startswith("https://github.com/"), (page, target)
                continue
            file, _, anchor = target.partition("#")
            path = (ROOT / page).parent / file if file else ROOT / page
            assert path.exists(), (page, target)
            assert not anchor or anchor in _anchors(path), (page, target)
            rel = str(path.resolve().relative_to(ROOT))
            if rel in pages:
                todo.append(rel)
    assert reached == pages, sorted(pages - reached)


def test_the_readme_speaks_of_the_tool_not_of_where_it_was_built():
    text = (ROOT / "README.md").read_text().lower()
    for words in ("machine kind", "device machine", "2-core", "this machine", "h200", "development vm"):
        assert words not in text, words
