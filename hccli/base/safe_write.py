"""The one way hc writes a single file (`--plot`, `run-kernel --save`, the remote cache).

A file named by a user may sit in a directory others can write to, beside a
checkpoint, or be a link planted to make hc overwrite something else. So:

- the target is taken lexically (`abspath`, as for make-checkpoint's OUTDIR): a
  target that is a symbolic link is refused, never resolved, and so is anything
  that is not a regular file (a directory, FIFO, device or socket); an existing
  regular file is replaced only where the caller allows it (`overwrite`);
- nothing is ever written inside a checkpoint directory (`forbidden`: the
  checkpoint, a directory or a single file's folder), however the path reaches it;
- the bytes go to a temporary file made beside the target with
  O_CREAT|O_EXCL|O_NOFOLLOW under an unpredictable name (so nothing planted there
  is followed), are synced, and the temporary is then renamed onto the target.
  Every step after the first check works through one descriptor of the target's
  directory, so a directory swapped for a link meanwhile changes nothing; the
  target is looked at again just before the rename, and the rename replaces a
  link swapped in after that look rather than following it. Without `overwrite`
  the file is published with link(), which refuses a name that exists by then.
- any exception, Ctrl-C included, removes the temporary; the rename and that
  removal run with Ctrl-C deferred (hccli/base/interrupts.py).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO, Callable

from hccli.base.atomic_dir import os_error
from hccli.base.errors import HcError
from hccli.base.interrupts import deferred_sigint

TMP_TRIES = 100  # names are 64 random bits: a collision means someone is planting files
MAX_WALK = 4096  # directories walked up from the target's folder, looking for the checkpoint
# walking up needs no permission to read a directory where O_PATH exists (Linux)
_UP_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY
_KINDS = ((stat.S_ISLNK, "symbolic link"), (stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"),
          (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))


class FileExists(HcError):
    """The target is a regular file and overwriting was not allowed: a caller adds its own way
    to allow it (a flag) to this message, and to no other."""


def checkpoint_root(checkpoint: str | Path | None) -> Path | None:
    """The directory nothing may be written into: the checkpoint directory, or a single-file
    checkpoint's folder; None for nothing given or a hub name (hf://org/name), which has none here."""
    if checkpoint is None:
        return None
    p = Path(checkpoint)
    if p.is_dir():
        return p
    return p.parent if p.exists() else None


def check_target(path: str | Path, *, overwrite: bool, forbidden: str | Path | None = None) -> Path:
    """The target's lexical absolute path when a file may be written there now, else the
    HcError that says why not (one line, naming the file and what was expected). Cheap: a
    command calls it before it does any work; write_file checks again as it writes."""
    target = Path(os.path.abspath(path))
    root = checkpoint_root(forbidden)
    dfd = _open_directory(path, target.parent, root)
    try:
        _refuse_inside(path, dfd, target.parent, root)
        _refuse_existing(path, dfd, target.name, overwrite)
        # the file is made beside the target and renamed in: its folder is what must be writable,
        # said now rather than when the work is done
        if not os.access(".", os.W_OK | os.X_OK, dir_fd=dfd):
            raise HcError(f"{path}: its folder {target.parent} is not writable; expected a folder hc may write in")
    finally:
        os.close(dfd)
    return target


def write_file(path: str | Path, fill: Callable[[BinaryIO], object], *, overwrite: bool,
               forbidden: str | Path | None = None, sync: bool = True) -> Path:
    """Write the file that `fill(fh)` writes to a binary file object, whole or not at all, under
    check_target's rules; returns the target's lexical absolute path. `sync` False skips the
    fsyncs (a cache entry, which is checked when read)."""
    target = Path(os.path.abspath(path))
    name = target.name
    root = checkpoint_root(forbidden)
    dfd = _open_directory(path, target.parent, root)
    tmp: str | None = None
    try:
        _refuse_inside(path, dfd, target.parent, root)
        _refuse_existing(path, dfd, name, overwrite)
        try:
            with deferred_sigint():  # made and named as one step: a Ctrl-C cannot fall between them
                fd, tmp = _create_temporary(dfd, name)
                fh = os.fdopen(fd, "wb")
            with fh:
                fill(fh)
                fh.flush()
                if sync:
                    os.fsync(fh.fileno())
            with deferred_sigint():
                _refuse_existing(path, dfd, name, overwrite)  # again: it may have changed meanwhile
                if not _publish(path, dfd, tmp, name, overwrite):
                    tmp = None  # renamed: the temporary name is gone
            if sync:
                _fsync_quietly(dfd)
        except OSError as exc:
            raise os_error(path, "write it", exc) from None
    finally:
        if tmp is not None:
            with deferred_sigint():
                _unlink_quietly(dfd, tmp)
        os.close(dfd)
    return target


def _open_directory(shown: str | Path, parent: Path, root: Path | None) -> int:
    try:
        return os.open(parent, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError) as exc:
        _refuse_inside(shown, None, parent, root)  # the more useful thing to say, where it is so
        if isinstance(exc, FileNotFoundError):
            raise HcError(f"{shown}: directory {parent} does not exist") from None
        raise HcError(f"{shown}: {parent} is not a directory; expected a file name in a directory") from None
    except OSError as exc:
        raise os_error(shown, f"open its directory {parent}", exc) from None


def _refuse_inside(shown: str | Path, dfd: int | None, parent: Path, root: Path | None) -> None:
    """Refuse when the directory held by dfd is the checkpoint directory or lies below it: its
    ancestors are walked through '..', so no path string (and no link in one) is trusted. With
    no directory to hold (it does not exist), the resolved path is compared."""
    if root is None:
        return
    try:
        st = os.stat(root)
    except OSError:
        return  # gone: nothing left to protect
    try:
        if dfd is None:
            raise FileNotFoundError
        inside = _below(dfd, (st.st_dev, st.st_ino))
    except OSError:  # no directory, or an ancestor that cannot be opened: the resolved path has to do
        inside = _is_within(os.path.realpath(parent), os.path.realpath(root))
    if inside:
        raise HcError(f"{shown}: inside the checkpoint directory {root}; hc never writes there, "
                      "choose a file elsewhere")


def _below(dfd: int, guarded: tuple[int, int]) -> bool:
    cur = os.dup(dfd)
    try:
        for _ in range(MAX_WALK):
            here = os.fstat(cur)
            if (here.st_dev, here.st_ino) == guarded:
                return True
            up = os.open("..", _UP_FLAGS, dir_fd=cur)
            os.close(cur)
            cur = up
            there = os.fstat(cur)
            if (there.st_dev, there.st_ino) == (here.st_dev, here.st_ino):
                return False  # the file system's root
        raise OSError(errno.ELOOP, "too many folders above the target")  # the resolved path decides
    finally:
        os.close(cur)


def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _refuse_existing(shown: str | Path, dfd: int, name: str, overwrite: bool) -> None:
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise os_error(shown, "look at it", exc) from None
    if not stat.S_ISREG(st.st_mode):
        kind = next((k for test, k in _KINDS if test(st.st_mode)), "special file")
        raise HcError(f"{shown}: is a {kind}, not a regular file; expected a new file or a regular file "
                      "to replace (hc never writes through a link or into a device)")
    if not overwrite:
        raise FileExists(f"{shown}: file exists; expected a new file name")


def _create_temporary(dfd: int, name: str) -> tuple[int, str]:
    flags = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)
    for _ in range(TMP_TRIES):
        tmp = f".{name[:40]}.{os.urandom(8).hex()}.partial"  # short: within NAME_MAX for any target
        try:
            return os.open(tmp, flags, 0o666, dir_fd=dfd), tmp  # 0o666: the user's umask decides, as for any file
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free temporary name after {TMP_TRIES} tries")


def _publish(shown: str | Path, dfd: int, tmp: str, name: str, overwrite: bool) -> bool:
    """Give the temporary the target's name; True when it was linked (the temporary name is
    still there, for the caller to remove), False when it was renamed."""
    if not overwrite:
        try:
            os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        except FileExistsError:
            _refuse_existing(shown, dfd, name, overwrite)  # says what is there now
            raise
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS):
                raise
            # no hard links on this file system: the look just taken has to do
        else:
            return True
    os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)  # replaces a link itself, never its target
    return False


def _unlink_quietly(dfd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dfd)
    except OSError:
        pass


def _fsync_quietly(dfd: int) -> None:
    try:
        os.fsync(dfd)
    except OSError:
        pass  # some file systems refuse fsync on a directory; the rename itself has happened
