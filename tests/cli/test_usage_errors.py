"""What click itself refuses (an unknown option or command, a value of the wrong type or range, a
missing argument or command) ends as every other failure does: one line `hc: error: ...` naming
the option, one hint after it, nothing on stdout, exit 2; in CliRunner and the console script."""

import os
import subprocess
import sys

import pytest
from conftest import ROOT

from hccli.cli.app import COMMANDS

CASES = [
    (["run-kernel", "--tokens", "1.5"], "Invalid value for '--tokens' / '-t': '1.5' is not a valid int.", "run-kernel"),
    (["bench", "--reps", "1e9"], "Invalid value for '--reps': '1e9' is not a valid int.", "bench"),
    (["inspect", "--bogus"], "No such option: --bogus", "inspect"),
    (["run-kernel", "--tokns", "3"], "No such option: --tokns (Possible options: --atol, --tokens)", "run-kernel"),
    (["inspect"], "Missing argument 'path'.", "inspect"),
    (["bench", "--op"], "Option '--op' requires an argument.", "bench"),
    (["count-params", "--json=yes"], "Option '--json' does not take a value.", "count-params"),
    (["count-params", "a.json", "b.json"], "Got unexpected extra argument(s) (b.json)", "count-params"),
    (["diff", "a", "b", "--values", "bogus"], "Invalid value for '--values': 'bogus' is not one of 'hc', 'all'.", "diff"),
    (["nosuchcmd"], "No such command 'nosuchcmd'.", ""),
    (["inspec"], "No such command 'inspec'. Did you mean 'inspect'?", ""),
    (["--bogus"], "No such option: --bogus", ""),
    ([], f"missing command; expected one of {', '.join(COMMANDS)}", ""),
    (["cache"], "missing command; expected one of list, clear", "cache"),
    (["cache", "list", "--bogus"], "No such option: --bogus", "cache list"),
]


@pytest.mark.parametrize("args,message,command", CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_a_usage_error_is_one_line_and_a_hint(hc, args, message, command):
    r = hc(*args)
    assert (r.exit_code, r.stdout) == (2, "")
    where = f"hc {command}" if command else "hc"
    assert r.stderr.splitlines() == [f"hc: error: {message}", f"see '{where} --help'"]


def test_what_a_user_typed_is_escaped_in_the_line(hc):
    r = hc("inspect", "--bo\x1b[2Jgus")
    assert r.exit_code == 2 and "\x1b" not in r.stderr
    assert r.stderr.splitlines()[0] == "hc: error: No such option: --bo\\x1b[2Jgus"


def test_help_and_version_still_end_well(hc):
    for args in (["--help"], ["inspect", "--help"], ["cache", "--help"], ["--version"]):
        r = hc(*args)
        assert r.exit_code == 0 and r.stderr == "" and r.stdout, args


@pytest.mark.parametrize("args,message,command", [CASES[0], CASES[9], CASES[12]],
                         ids=["bad value", "unknown command", "no command"])
def test_the_console_script_says_the_same(args, message, command):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("HC_DEBUG", None)
    r = subprocess.run([sys.executable, "-m", "hccli", *args], capture_output=True, text=True, timeout=120,
                       cwd=ROOT, env=env)
    where = f"python -m hccli {command}" if command else "python -m hccli"
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.splitlines() == [f"hc: error: {message}", f"see '{where} --help'"]


def test_a_bound_hc_checks_itself_is_one_line_too(hc):
    # hc's own callbacks word a bound in hc's words; still one line, nothing on stdout, exit 2
    r = hc("diff", "a", "b", "--seed", "-1")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr.splitlines() == ["hc: error: --seed -1: expected a non-negative integer"]
