"""`--plot` and `run-kernel --save` through the CLI: the same guarded writer (hccli/base/safe_write.py),
so they refuse the same set-ups with the same words, never write through a link (planted at
the target, at a temporary name, or swapped in while the command runs), never into a FIFO,
device or directory, never into the checkpoint."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from ckpt_tools import tiny
from conftest import SAMPLES, run_hc

TINY = SAMPLES / "tiny-v4.1.json"
KERNEL = ("run-kernel", "--impl", "torch", "--tokens", "3")


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "elsewhere" / "victim.bin"
    v.parent.mkdir()
    v.write_bytes(b"precious")
    return v


def error_line(r, before_work=True) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("hc: error: "), (r.exit_code, r.stderr)
    assert "Traceback" not in r.stderr and (r.stdout == "" or not before_work)
    return lines[0]


def no_temporaries(*dirs):
    for d in dirs:
        assert not [p for p in d.rglob("*") if p.name.endswith((".partial", ".hc-plot"))], d


# set-up name -> makes the target (out.png / out.safetensors) in tmp_path
def _link(t, v):
    t.symlink_to(v)


def _dangling(t, v):
    t.symlink_to(v.parent / "new.bin")


SETUPS = {
    "symlink": (_link, "is a symbolic link, not a regular file"),
    "dangling symlink": (_dangling, "is a symbolic link, not a regular file"),
    "fifo": (lambda t, v: os.mkfifo(t), "is a FIFO, not a regular file"),
    "directory": (lambda t, v: t.mkdir(), "is a directory, not a regular file"),
}


def _refusal(tmp_path, args, flag, target):
    line = error_line(run_hc(*args, flag, target))
    prefix = f"hc: error: {flag} {target}: "
    assert line.startswith(prefix), line
    return line[len(prefix):]


@pytest.mark.parametrize("setup", SETUPS)
def test_plot_and_save_refuse_the_same_set_ups_with_the_same_words(tmp_path, mpl, torch, victim, setup):
    make, words = SETUPS[setup]
    said = {}
    for flag, name in (("--plot", "out.png"), ("--save", "out.safetensors")):
        target = tmp_path / name
        make(target, victim)
        said[flag] = _refusal(tmp_path, KERNEL, flag, target)
        assert words in said[flag]
        assert victim.read_bytes() == b"precious" and not (victim.parent / "new.bin").exists()
        assert os.path.lexists(target) and not stat.S_ISREG(os.lstat(target).st_mode)  # left as it was
    assert said["--plot"] == said["--save"]
    no_temporaries(tmp_path)


@pytest.mark.parametrize("where", ["ck/out", "link/out", "ck/sub/../out"])
def test_plot_and_save_refuse_the_checkpoint_directory_in_the_same_words(tmp_path, mpl, torch, where):
    ck = tiny(tmp_path / "ck")
    (ck / "sub").mkdir()
    (tmp_path / "link").symlink_to(ck)
    before = sorted(p.name for p in ck.rglob("*"))
    args = KERNEL[:3] + ("--checkpoint", str(ck), "--layers", "1")
    said = {flag: _refusal(tmp_path, args, flag, tmp_path / f"{where}{ext}")
            for flag, ext in (("--plot", ".png"), ("--save", ".safetensors"))}
    assert said["--plot"] == said["--save"] == (f"inside the checkpoint directory {ck}; hc never writes there, "
                                                "choose a file elsewhere")
    assert sorted(p.name for p in ck.rglob("*")) == before


def test_plot_and_save_name_a_missing_folder_in_the_same_words(tmp_path, mpl, torch):
    said = {flag: _refusal(tmp_path, KERNEL, flag, tmp_path / "nowhere" / f"out{ext}")
            for flag, ext in (("--plot", ".png"), ("--save", ".safetensors"))}
    assert said["--plot"] == said["--save"] == f"directory {tmp_path / 'nowhere'} does not exist"


@pytest.mark.parametrize("setup", ["symlink", "dangling symlink", "fifo"])
def test_count_params_plot_never_writes_through_a_link_or_into_a_fifo(tmp_path, mpl, victim, setup):
    make, words = SETUPS[setup]
    target = tmp_path / "p.png"
    make(target, victim)
    assert words in _refusal(tmp_path, ("count-params", str(TINY)), "--plot", target)
    assert victim.read_bytes() == b"precious" and not (victim.parent / "new.bin").exists()
    assert not stat.S_ISREG(os.lstat(target).st_mode)
    no_temporaries(tmp_path)


def test_plot_into_a_device_or_a_link_to_one_is_refused(tmp_path, mpl):
    # a node made here, never /dev/null: code that got this wrong would replace it when run as root
    node = tmp_path / "node.png"
    try:
        os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except OSError:
        pytest.skip("cannot make a device node here")
    link = tmp_path / "p.png"
    link.symlink_to(node)
    assert "is a character device" in _refusal(tmp_path, ("count-params", str(TINY)), "--plot", node)
    assert "symbolic link" in _refusal(tmp_path, ("count-params", str(TINY)), "--plot", link)
    assert stat.S_ISCHR(os.lstat(node).st_mode) and link.is_symlink()


def test_plot_ignores_a_link_planted_at_the_old_temporary_name(tmp_path, mpl, victim):
    # a plot's temporary used to be .NAME.PID.hc-plot, opened with a plain open(): a link planted
    # there was followed. CliRunner runs the command in this process, so the PID is ours.
    target = tmp_path / "p.png"
    planted = tmp_path / f".p.png.{os.getpid()}.hc-plot"
    planted.symlink_to(victim)
    r = run_hc("count-params", str(TINY), "--plot", target)
    assert r.exit_code == 0, r.stderr
    assert victim.read_bytes() == b"precious"
    assert not target.is_symlink() and target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_replaces_a_regular_file_save_only_with_force(tmp_path, mpl, torch):
    png, st = tmp_path / "p.png", tmp_path / "g.safetensors"
    png.write_bytes(b"old")
    st.write_bytes(b"old")
    assert run_hc("count-params", str(TINY), "--plot", png).exit_code == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    line = _refusal(tmp_path, KERNEL, "--save", st)
    assert line == "file exists; expected a new file name (or pass --force)" and st.read_bytes() == b"old"
    assert run_hc(*KERNEL, "--save", st, "--force").exit_code == 0
    assert st.read_bytes() != b"old"
    no_temporaries(tmp_path)
    # the hint belongs to that refusal alone, whatever the path's words
    odd = tmp_path / "file exists" / "g.safetensors"
    assert _refusal(tmp_path, KERNEL, "--save", odd) == (f"directory {odd.parent} does not exist")


def _attacker(target, victim):
    """Swaps a link to the victim in and out at the target until told to stop."""
    stop = threading.Event()

    def attack():
        while not stop.is_set():
            try:
                os.symlink(victim, target)
            except FileExistsError:
                pass
            try:
                os.unlink(target)
            except FileNotFoundError:
                pass

    t = threading.Thread(target=attack)
    t.start()
    return stop, t


@pytest.mark.parametrize("flag", ["--plot", "--save"])
def test_a_link_swapped_in_while_the_command_runs_is_never_written_through(tmp_path, mpl, torch, victim, flag):
    target = tmp_path / ("out.png" if flag == "--plot" else "out.safetensors")
    extra = ("--force",) if flag == "--save" else ()
    stop, attacker = _attacker(target, victim)
    codes = []
    try:
        for _ in range(8):
            r = run_hc(*KERNEL, flag, target, *extra)
            codes.append(r.exit_code)
            if r.exit_code:  # refused (before the work, or as it wrote): one line naming the file
                line = error_line(r, before_work=False)
                assert str(target) in line and ("symbolic link" in line or "cannot write" in line), line
            assert victim.read_bytes() == b"precious"
    finally:
        stop.set()
        attacker.join()
    assert set(codes) <= {0, 2} and victim.read_bytes() == b"precious"
    no_temporaries(tmp_path)
