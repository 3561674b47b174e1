"""make-checkpoint writes whole or not at all, never through a link, and fails in one line."""

import errno
import os
import stat

import pytest

import hccli.checkpoint.synth as synth
from ckpt_tools import snapshot, tiny
from conftest import SAMPLES, run_hc

TINY = SAMPLES / "tiny-v4.1.json"


def one_line_error(r, *words):
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hc: error: "), r.stderr
    assert "Traceback" not in r.stderr
    assert r.exception is None or isinstance(r.exception, SystemExit)
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def fail_after(monkeypatch, n, exc):
    real = synth._write_shard
    calls = []

    def write(path, *a, **kw):
        if len(calls) == n:
            raise exc
        calls.append(path)
        return real(path, *a, **kw)

    monkeypatch.setattr(synth, "_write_shard", write)
    return calls


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EFBIG, errno.EIO])
@pytest.mark.parametrize("phantom", [False, True])
def test_a_write_error_leaves_no_outdir(tmp_path, monkeypatch, err, phantom):
    calls = fail_after(monkeypatch, 2, OSError(err, os.strerror(err)))
    out = tmp_path / "parent" / "ck"
    out.parent.mkdir()
    r = run_hc("make-checkpoint", TINY, out, *(["--phantom"] if phantom else []))
    one_line_error(r, str(out), errno.errorcode[err], "model-00003-of-00014.safetensors", "left as it was")
    assert len(calls) == 2 and all(p.parent != out for p in calls)  # two shards were written, elsewhere
    assert not out.exists()
    assert os.listdir(tmp_path / "parent") == []  # the temporary sibling is gone too


def test_a_write_error_leaves_an_existing_checkpoint_unchanged(tmp_path, monkeypatch):
    out = tiny(tmp_path / "ck", "tiny-v4.hf.json")
    before = snapshot(out)
    fail_after(monkeypatch, 2, OSError(errno.ENOSPC, "No space left on device"))
    one_line_error(run_hc("make-checkpoint", TINY, out, "--force"), "ENOSPC")
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_ctrl_c_leaves_nothing(tmp_path, monkeypatch):
    fail_after(monkeypatch, 3, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        synth.make_checkpoint(TINY, tmp_path / "ck")
    assert list(tmp_path.iterdir()) == []


def test_index_or_config_write_error_leaves_nothing(tmp_path, monkeypatch):
    real = synth._write_file

    def write(path, data):
        if path.name == "config.json":
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
        return real(path, data)

    monkeypatch.setattr(synth, "_write_file", write)
    one_line_error(run_hc("make-checkpoint", TINY, tmp_path / "ck"), "EDQUOT", "config.json")
    assert list(tmp_path.iterdir()) == []


def test_force_never_writes_through_a_planted_symlink(tmp_path):
    out = tiny(tmp_path / "ck")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    for name in ("model-00001-of-00014.safetensors", "model.safetensors.index.json", "config.json"):
        (out / name).unlink()
        (out / name).symlink_to(victim)
    assert run_hc("make-checkpoint", TINY, out, "--force").exit_code == 0
    assert victim.read_text() == "precious"
    assert not any(p.is_symlink() for p in out.iterdir())
    assert run_hc("inspect", out, "--verify", "--json").exit_code == 0


def test_force_never_follows_a_symlinked_subdirectory(tmp_path):
    out = tiny(tmp_path / "ck")
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "a.safetensors").write_text("mine")
    (out / "sub.safetensors").symlink_to(keep, target_is_directory=True)
    assert run_hc("make-checkpoint", TINY, out, "--force").exit_code == 0
    assert (keep / "a.safetensors").read_text() == "mine"


def test_outdir_that_is_a_symlink_is_refused(tmp_path):
    real = tiny(tmp_path / "real")
    before = snapshot(real)
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    one_line_error(run_hc("make-checkpoint", TINY, link, "--force"), "symbolic link")
    assert snapshot(real) == before and link.is_symlink()


def test_outdir_below_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    one_line_error(run_hc("make-checkpoint", TINY, tmp_path / "f" / "ck"), str(tmp_path / "f" / "ck"), "is a file")
    one_line_error(run_hc("make-checkpoint", TINY, tmp_path / "f" / "a" / "b"), "is a file")
    assert (tmp_path / "f").read_text() == "x"


def test_outdir_that_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    one_line_error(run_hc("make-checkpoint", TINY, tmp_path / "f", "--force"), "not a directory")


def test_negative_seed_is_a_one_line_error(tmp_path):
    one_line_error(run_hc("make-checkpoint", TINY, tmp_path / "ck", "--seed", "-1"), "--seed -1", "non-negative")
    assert not (tmp_path / "ck").exists()
    with pytest.raises(synth.HcError, match="non-negative"):
        synth.make_checkpoint(TINY, tmp_path / "ck", seed=-5)


def test_config_that_is_outdir_config_json(tmp_path):
    out = tiny(tmp_path / "ck", "tiny-v4.hf.json")
    cfg = out / "config.json"
    one_line_error(run_hc("make-checkpoint", cfg, out), "not empty")
    r = run_hc("make-checkpoint", cfg, out, "--force", "--seed", "3")
    assert r.exit_code == 0, r.stderr
    assert cfg.read_bytes() == (SAMPLES / "tiny-v4.hf.json").read_bytes()
    assert run_hc("inspect", out, "--verify", "--json").json()["findings"] == []


@pytest.mark.parametrize("arg", ["config", "missing.json"])
def test_config_without_outdir_says_so(tmp_path, monkeypatch, arg):
    monkeypatch.chdir(tmp_path)
    path = TINY if arg == "config" else tmp_path / arg
    line = one_line_error(run_hc("make-checkpoint", path), "missing OUTDIR", "config file", "[CONFIG] OUTDIR")
    assert str(path) in line
    assert list(tmp_path.iterdir()) == []


def test_new_checkpoint_has_ordinary_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        out = tiny(tmp_path / "ck")
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o755


def test_an_existing_empty_outdir_is_filled(tmp_path):
    out = tmp_path / "ck"
    out.mkdir()
    r = run_hc("make-checkpoint", TINY, out, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert doc["file_bytes"] == sum(p.stat().st_size for p in out.glob("*.safetensors"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"] and len(list(out.iterdir())) == 16


def test_an_error_while_finishing_or_renaming_leaves_nothing(tmp_path, monkeypatch):
    import hccli.base.atomic_dir as atomic

    monkeypatch.setattr(atomic, "_fsync_dir", lambda p: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    one_line_error(run_hc("make-checkpoint", TINY, tmp_path / "ck"), "EIO", "left as it was")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    old = tiny(tmp_path / "ck", "tiny-v4.hf.json")
    before = snapshot(old)
    real_rename = os.rename

    def rename(src, dst):  # the new directory cannot take OUTDIR's place: the old one goes back
        if str(dst) == str(old) and ".partial" in str(src):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real_rename(src, dst)

    monkeypatch.setattr(atomic.os, "rename", rename)
    one_line_error(run_hc("make-checkpoint", TINY, old, "--force"), "EXDEV")
    assert snapshot(old) == before and sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_missing_parent_directories_are_not_made(tmp_path):
    # a typo in the folder must not become a tree of new folders holding a checkpoint
    r = run_hc("make-checkpoint", SAMPLES / "tiny-v4.1.json", tmp_path / "no" / "such" / "out")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.strip() == (f"hc: error: {tmp_path}/no/such/out: its parent {tmp_path}/no/such does not exist; "
                                "expected OUTDIR in an existing directory (create that first)")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "no").mkdir()
    r = run_hc("make-checkpoint", "--phantom", tmp_path / "no" / "such" / "out")
    assert r.exit_code == 2 and "does not exist" in r.stderr and list((tmp_path / "no").iterdir()) == []
