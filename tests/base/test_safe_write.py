"""hccli/base/safe_write.py, the one writer of single files: every refusal, and an attacker who
changes the target (or its directory) while the file is being written."""

from __future__ import annotations

import os
import stat
import threading

import pytest

import hccli.base.safe_write as safe_write
from hccli.base.errors import HcError
from hccli.base.safe_write import check_target, write_file

DATA = b"new bytes\n"


def put(data=DATA):
    return lambda fh: fh.write(data)


def leftovers(d):
    return sorted(n for n in os.listdir(d) if n.endswith(".partial"))


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "elsewhere" / "victim.txt"
    v.parent.mkdir()
    v.write_bytes(b"precious")
    return v


def refused(path, *words, overwrite=True, forbidden=None):
    for call in (lambda: check_target(path, overwrite=overwrite, forbidden=forbidden),
                 lambda: write_file(path, put(), overwrite=overwrite, forbidden=forbidden)):
        with pytest.raises(HcError) as e:
            call()
        msg = e.value.message
        assert "\n" not in msg and msg.startswith(f"{path}: "), msg
        for w in words:
            assert w in msg, (w, msg)
    return msg


def test_a_new_file_and_a_regular_file_replaced(tmp_path):
    t = tmp_path / "out.bin"
    assert write_file(t, put(), overwrite=False) == t
    assert t.read_bytes() == DATA
    write_file(t, put(b"again"), overwrite=True)
    assert t.read_bytes() == b"again" and leftovers(tmp_path) == []


def test_the_file_gets_the_users_umask_like_any_other(tmp_path):
    old = os.umask(0o027)
    try:
        write_file(tmp_path / "f", put(), overwrite=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "f").st_mode) == 0o640


def test_an_existing_file_without_overwrite(tmp_path):
    t = tmp_path / "out.bin"
    t.write_bytes(b"mine")
    refused(t, "file exists", "expected a new file name", overwrite=False)
    assert t.read_bytes() == b"mine"


@pytest.mark.parametrize("dangling", [False, True])
def test_a_symlinked_target_is_refused_and_its_target_untouched(tmp_path, victim, dangling):
    link = tmp_path / "out.png"
    dest = victim.parent / "new.png" if dangling else victim
    link.symlink_to(dest)
    refused(link, "is a symbolic link, not a regular file", "never writes through a link")
    assert link.is_symlink() and os.readlink(link) == str(dest)
    assert victim.read_bytes() == b"precious" and not (victim.parent / "new.png").exists()
    assert leftovers(tmp_path) == []


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "out.png"
    os.mkfifo(fifo)
    refused(fifo, "is a FIFO, not a regular file")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_directory_is_refused(tmp_path):
    d = tmp_path / "out.png"
    d.mkdir()
    refused(d, "is a directory, not a regular file")


def test_a_device_is_refused():
    # only looked at: a writer that got this wrong would replace /dev/null when run as root (the
    # write itself is tested on a node made in tmp_path, below)
    with pytest.raises(HcError, match="is a character device, not a regular file"):
        check_target("/dev/null", overwrite=True)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_device_node_made_here_is_refused(tmp_path):
    node = tmp_path / "out.png"
    try:
        os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
    except (PermissionError, OSError):
        pytest.skip("cannot make a device node here")
    refused(node, "is a character device")
    assert stat.S_ISCHR(os.lstat(node).st_mode)


def test_a_missing_directory_or_a_file_as_directory(tmp_path):
    refused(tmp_path / "nowhere" / "f.png", "directory", "does not exist")
    (tmp_path / "f").write_text("x")
    refused(tmp_path / "f" / "g.png", "is not a directory")


def test_never_inside_a_checkpoint_directory_however_it_is_reached(tmp_path):
    ck = tmp_path / "ck"
    (ck / "sub").mkdir(parents=True)
    (ck / "model.safetensors").write_bytes(b"x")
    (tmp_path / "link").symlink_to(ck)
    before = sorted(p.name for p in ck.rglob("*"))
    for target in (ck / "p.png", ck / "sub" / "p.png", ck / "sub" / ".." / "p.png", tmp_path / "link" / "p.png",
                   ck / "missing" / "p.png"):
        for forbidden in (ck, ck / "model.safetensors", tmp_path / "link"):  # a folder or a single file's folder
            refused(target, "inside the checkpoint directory", "hc never writes there", forbidden=forbidden)
    assert sorted(p.name for p in ck.rglob("*")) == before
    write_file(tmp_path / "beside.png", put(), overwrite=True, forbidden=ck)  # beside it is fine
    write_file(tmp_path / "p.png", put(), overwrite=True, forbidden="hf://org/name")  # a hub name guards nothing here


def test_a_link_planted_at_the_temporary_name_is_never_followed(tmp_path, victim, monkeypatch):
    # make the first name drawn predictable and plant a link there: the writer must draw another
    fixed = bytes(8)
    planted = tmp_path / f".out.png.{fixed.hex()}.partial"
    planted.symlink_to(victim)
    draws = iter([fixed])
    real = os.urandom
    monkeypatch.setattr(safe_write.os, "urandom", lambda n: next(draws, None) or real(n))
    write_file(tmp_path / "out.png", put(), overwrite=True)
    assert victim.read_bytes() == b"precious" and planted.is_symlink()
    assert (tmp_path / "out.png").read_bytes() == DATA
    assert leftovers(tmp_path) == [planted.name]  # only the attacker's link


def test_an_error_or_ctrl_c_while_writing_leaves_no_temporary(tmp_path):
    t = tmp_path / "out.bin"
    t.write_bytes(b"old")
    for exc in (KeyboardInterrupt(), ValueError("drawing failed"), OSError(28, "No space left on device")):
        def fill(fh, exc=exc):
            fh.write(b"half")
            raise exc

        with pytest.raises((KeyboardInterrupt, ValueError, HcError)) as e:
            write_file(t, fill, overwrite=True)
        if isinstance(exc, OSError):
            assert "ENOSPC" in e.value.message and str(t) in e.value.message
        assert t.read_bytes() == b"old" and leftovers(tmp_path) == []


# --- the target changes while the file is written ---

def test_a_link_swapped_in_while_writing_is_refused(tmp_path, victim):
    t = tmp_path / "out.png"

    def fill(fh):
        fh.write(DATA)
        t.symlink_to(victim)  # after the first look, before the rename

    with pytest.raises(HcError, match="is a symbolic link"):
        write_file(t, fill, overwrite=True)
    assert victim.read_bytes() == b"precious" and t.is_symlink() and leftovers(tmp_path) == []


def _at_the_last_look(monkeypatch, act):
    """Run `act` at safe_write's second look at the target, the one just before the rename: the
    attacker (or the other writer) wins the race."""
    real = safe_write._refuse_existing
    looks = []

    def look(shown, dfd, name, overwrite):
        real(shown, dfd, name, overwrite)
        looks.append(name)
        if len(looks) == 2:
            act()

    monkeypatch.setattr(safe_write, "_refuse_existing", look)


def test_a_link_swapped_in_after_the_last_look_is_replaced_not_followed(tmp_path, victim, monkeypatch):
    t = tmp_path / "out.png"
    _at_the_last_look(monkeypatch, lambda: t.symlink_to(victim))
    write_file(t, put(), overwrite=True)
    assert victim.read_bytes() == b"precious"
    assert not t.is_symlink() and t.read_bytes() == DATA  # a fresh file where the link was


def test_without_overwrite_a_file_that_appears_meanwhile_is_kept(tmp_path, monkeypatch):
    t = tmp_path / "out.safetensors"
    _at_the_last_look(monkeypatch, lambda: t.write_bytes(b"theirs"))
    with pytest.raises(HcError, match="file exists"):
        write_file(t, put(), overwrite=False)
    assert t.read_bytes() == b"theirs" and leftovers(tmp_path) == []


def test_a_directory_swapped_for_a_link_into_a_checkpoint_is_not_followed(tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    out = tmp_path / "out"
    out.mkdir()

    def fill(fh):
        fh.write(DATA)
        out.rename(tmp_path / "moved")  # the folder goes, a link into the checkpoint takes its name
        out.symlink_to(ck)

    write_file(out / "p.png", fill, overwrite=True, forbidden=ck)
    assert os.listdir(ck) == []
    assert (tmp_path / "moved" / "p.png").read_bytes() == DATA  # where the folder it checked went


def test_a_concurrent_attacker_never_gets_a_write_through_a_link(tmp_path, victim):
    t = tmp_path / "out.png"
    stop = threading.Event()

    def attack():
        while not stop.is_set():
            try:
                os.symlink(victim, t)
            except FileExistsError:
                pass
            try:
                os.unlink(t)
            except FileNotFoundError:
                pass

    attacker = threading.Thread(target=attack)
    attacker.start()
    outcomes = set()
    try:
        for i in range(300):
            try:
                write_file(t, put(b"%d" % i), overwrite=True)
                outcomes.add("written")
            except HcError as e:
                assert "symbolic link" in e.message or "cannot write" in e.message, e.message
                outcomes.add("refused")
            assert victim.read_bytes() == b"precious"
    finally:
        stop.set()
        attacker.join()
    assert victim.read_bytes() == b"precious" and leftovers(tmp_path) == []
    assert outcomes  # the loop ran; which outcomes the race gave varies with the scheduler


def test_temporary_names_are_tried_a_bounded_number_of_times(tmp_path, monkeypatch):
    fixed = bytes(8)
    (tmp_path / f".out.png.{fixed.hex()}.partial").symlink_to(tmp_path / "nowhere")
    draws = []
    monkeypatch.setattr(safe_write.os, "urandom", lambda n: draws.append(n) or fixed)
    with pytest.raises(HcError, match=f"no free temporary name after {safe_write.TMP_TRIES} tries"):
        write_file(tmp_path / "out.png", put(), overwrite=True)
    assert len(draws) == safe_write.TMP_TRIES and not (tmp_path / "out.png").exists()


def test_a_walk_up_cut_short_falls_back_to_the_resolved_path(tmp_path, monkeypatch):
    ck = tmp_path / "ck"
    (ck / "a" / "b").mkdir(parents=True)
    monkeypatch.setattr(safe_write, "MAX_WALK", 1)
    refused(ck / "a" / "b" / "p.png", "inside the checkpoint directory", forbidden=ck)
    write_file(tmp_path / "p.png", put(), overwrite=True, forbidden=ck)
