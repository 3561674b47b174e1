"""The error boundary: exception type -> one line on stderr and an exit code of one meaning."""

import errno
import os
import subprocess
import sys

import pytest

from ckpt_tools import tiny
from conftest import ROOT, run_hc, run_hc_process
from hccli.base.errors import EXIT_FINDINGS, EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, HcError


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("err") / "tiny")


def _raising(monkeypatch, exc):
    def boom(*args, **kwargs):
        raise exc

    monkeypatch.setattr("hccli.inspecting.report.build_inspect", boom)


def _one_line(r):
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS, errno.ENOSPC, errno.EIO])
def test_os_errors_are_one_line_naming_the_file(monkeypatch, tiny_ckpt, code):
    _raising(monkeypatch, OSError(code, os.strerror(code), "/ckpt/model-00001-of-00002.safetensors"))
    r = run_hc("inspect", tiny_ckpt)
    assert r.exit_code == EXIT_INPUT
    line = _one_line(r)
    assert line == f"hc: error: /ckpt/model-00001-of-00002.safetensors: {os.strerror(code)}"


def test_file_names_in_os_errors_are_escaped(monkeypatch, tiny_ckpt):
    _raising(monkeypatch, PermissionError(errno.EACCES, "Permission denied", "/ck/evil\x1b[2J.json"))
    line = _one_line(run_hc("inspect", tiny_ckpt))
    assert "\x1b" not in line and "\\x1b[2J" in line


def test_a_crash_is_an_internal_error_not_findings(monkeypatch, tiny_ckpt):
    _raising(monkeypatch, ZeroDivisionError("division by zero"))
    r = run_hc("inspect", tiny_ckpt, "--verify")
    assert r.exit_code == EXIT_INTERNAL and EXIT_INTERNAL not in (EXIT_FINDINGS, EXIT_INPUT)
    line = _one_line(r)
    assert "internal error" in line and "ZeroDivisionError" in line and "HC_DEBUG=1" in line


def test_interrupt_exits_130(monkeypatch, tiny_ckpt):
    _raising(monkeypatch, KeyboardInterrupt())
    r = run_hc("inspect", tiny_ckpt)
    assert r.exit_code == EXIT_INTERRUPTED == 130 and _one_line(r) == "hc: interrupted"


@pytest.mark.parametrize("exc, code", [(ZeroDivisionError("x"), EXIT_INTERNAL),
                                       (HcError("bad key 'hc_mult'"), EXIT_INPUT),
                                       (OSError(errno.EROFS, "Read-only file system", "/x"), EXIT_INPUT)])
def test_hc_debug_adds_the_traceback_and_keeps_the_code(monkeypatch, tiny_ckpt, exc, code):
    monkeypatch.setenv("HC_DEBUG", "1")
    _raising(monkeypatch, exc)
    r = run_hc("inspect", tiny_ckpt)
    assert r.exit_code == code
    assert "Traceback" in r.stderr and r.stderr.strip().splitlines()[-1].startswith("hc: ")


def test_full_disk_on_stdout_names_standard_output(tiny_ckpt):
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "hccli", "inspect", str(tiny_ckpt), "--json"], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    assert proc.returncode == EXIT_INPUT
    assert proc.stderr.strip() == f"hc: error: standard output: {os.strerror(errno.ENOSPC)}"


@pytest.mark.parametrize("args", [["--tensors", "--json"], ["--tensors", "--limit", "5000"]])
def test_closed_pipe_exits_0(tiny_ckpt, args):
    # `hc ... | head -1`: the output is larger than a pipe's buffer, so hc meets the closed end
    proc = subprocess.Popen([sys.executable, "-m", "hccli", "inspect", str(tiny_ckpt), *args], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert err == ""


def test_usage_and_input_errors_exit_2(tiny_ckpt, tmp_path):
    assert run_hc("inspect", tiny_ckpt, "--no-such-option").exit_code == EXIT_INPUT
    assert run_hc("inspect", tmp_path / "nothing").exit_code == EXIT_INPUT


def test_measured_child_reports_exit_code(tiny_ckpt):
    proc, _, peak = run_hc_process("inspect", tiny_ckpt, "--layers", "99")
    assert proc.returncode == EXIT_INPUT and peak > 0 and "--layers 99: this model has" in proc.stderr


def test_readme_lists_exactly_the_exit_codes():
    import re

    from hccli.base import errors

    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    listed = {int(m) for m in re.findall(r"^\| (\d+) \|", section, re.M)}
    assert listed == {v for k, v in vars(errors).items() if k.startswith("EXIT_")}


def test_an_abort_is_not_findings(monkeypatch, tiny_ckpt):
    import typer

    _raising(monkeypatch, typer.Abort())
    r = run_hc("inspect", tiny_ckpt)
    assert r.exit_code == EXIT_INTERRUPTED and _one_line(r) == "hc: interrupted"
