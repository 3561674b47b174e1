"""--help on every command renders (rich markup in a help string once crashed `hc inspect --help`)."""

import pytest

from conftest import every_command, run_hc
from hccli.cli.app import COMMANDS


@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS)], ids=lambda c: " ".join(c) or "hc")
def test_help_renders(command):
    r = run_hc(*command, "--help")
    assert r.exit_code == 0, (r.exception, r.stderr)
    assert "Usage" in r.stdout and "--help" in r.stdout


def test_inspect_help_shows_the_hub_form_literally():
    out = run_hc("inspect", "--help").stdout
    assert "[@revision]" in out and "[/subfolder]" in out


def _every_command():
    return every_command()


# the value types typer writes for an option or argument; anything else in <...> is a placeholder
_TYPES = {"<str>", "<int>", "<float>", "<path>", "<int range>", "<float range>"}


@pytest.mark.parametrize("command", _every_command(), ids=" ".join)
def test_help_has_no_unfilled_placeholders(command, monkeypatch):
    import re

    monkeypatch.setenv("COLUMNS", "250")
    out = run_hc(*command, "--help").stdout
    assert not re.findall(r"\{\w+\}", out)  # a required argument as typer writes it: {path}
    assert set(re.findall(r"<[^<>\s]+(?: range)?>", out)) <= _TYPES  # a parser's name: <parse_dtype>
    usage = next(line for line in out.splitlines() if "Usage:" in line)
    assert re.search(r"\[OPTIONS\]( (\[?[A-Z]+\]?|COMMAND \[ARGS\]\.\.\.))*$", usage.strip()), usage


def test_every_command_is_covered():
    assert ["cache", "clear"] in _every_command() and ["inspect"] in _every_command()


def _completing(**env):
    import os
    import subprocess
    import sys

    from conftest import ROOT

    full = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **env}
    return subprocess.run([sys.executable, "-c", "import sys; sys.argv[0] = 'hc'; from hccli.cli.app import main; main()"],
                          env=full, capture_output=True, text=True, timeout=120)


def test_shell_completion_is_offered_and_completes_commands_and_options():
    assert "--install-completion" in run_hc("--help").stdout  # as the README says
    assert _completing(_HC_COMPLETE="complete_bash", COMP_WORDS="hc cou", COMP_CWORD="1").stdout.split() == [
        "count-params"]
    assert "--verify" in _completing(_HC_COMPLETE="complete_bash", COMP_WORDS="hc inspect --ver",
                                     COMP_CWORD="2").stdout.split()
