"""Start-up guard for `hc count-params` (issue #14): the command must not pull in
heavy modules it never uses. Checked in a fresh interpreter, because the test
process itself has imported everything already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# main() ends count-params with os._exit after the atexit functions, so the probe is one of them
PROBE = """
import atexit, json, sys
def _report(path=sys.argv[1]):
    with open(path, "w") as f:
        json.dump(sorted(sys.modules), f)
atexit.register(_report)
sys.argv = ["hc", *sys.argv[2:]]
from hccli.cli.app import main
main()
"""

HEAVY = ("numpy", "torch", "tilelang", "safetensors", "huggingface_hub", "matplotlib")


def _modules(tmp_path: Path, *args: str) -> set[str]:
    out = tmp_path / "modules.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(out.read_text()))


@pytest.mark.parametrize("args", [("count-params",), ("count-params", "--json"),
                                  ("count-params", "-g", "2-7", "-r", "reuse", "-s", "attn", "-c", "comb")])
def test_count_params_imports_nothing_heavy(tmp_path, args):
    mods = _modules(tmp_path, *args)
    assert "hccli.counting.report" in mods  # the probe saw the command run
    heavy = sorted(m for m in mods if m.split(".")[0] in HEAVY)
    assert not heavy, heavy
    assert "rich._emoji_codes" not in mods  # nothing printed by default could hold an emoji code
    # other commands are registered only for --help
    assert not {"hccli.cli.inspect", "hccli.cli.run_kernel", "hccli.cli.bench"} & mods


def test_count_params_json_skips_rich_tables(tmp_path):
    assert "rich.table" not in _modules(tmp_path, "count-params", "--json")
    assert "hccli.counting.model" not in _modules(tmp_path, "count-params", "--json")


@pytest.mark.parametrize("text", ["", "plain", "a: b", "[bold]a:[/]b:", "10:30 : 4:5", "\\[x]", "no: code: here"])
def test_markup_is_richs_markup(text):
    # what rich makes of our markup, emoji codes aside (there are none in our strings)
    from rich.text import Text

    from hccli.cli.output import markup

    ours, rich_default = markup(text, "table.title"), Text.from_markup(text, style="table.title")
    assert (ours.plain, ours.spans, ours.style) == (rich_default.plain, rich_default.spans, rich_default.style)


@pytest.mark.parametrize("text", ["x:smile:y", "[bold]x:smile:[/] y", ":+1: and :-1:", "dir/x:thumbs_up-emoji:y"])
def test_markup_leaves_emoji_codes_as_written(text):
    # a name from a file or a server that looks like an emoji code is printed as written
    from rich.text import Text

    from hccli.cli.output import markup

    assert markup(text).plain == Text.from_markup(text, emoji=False).plain
    assert ":" in markup(text).plain and markup(text).plain != Text.from_markup(text).plain
