"""--help on every command renders (rich markup in a help string once crashed `hc inspect --help`)."""

import pytest

from conftest import run_hc
from hccli.cli.app import COMMANDS


@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS)], ids=lambda c: " ".join(c) or "hc")
def test_help_renders(command):
    r = run_hc(*command, "--help")
    assert r.exit_code == 0, (r.exception, r.stderr)
    assert "Usage" in r.stdout and "--help" in r.stdout


def test_inspect_help_shows_the_hub_form_literally():
    out = run_hc("inspect", "--help").stdout
    assert "[@revision]" in out and "[/subfolder]" in out
