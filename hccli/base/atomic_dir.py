"""A directory that appears whole or not at all.

The contents are written into a temporary sibling (same parent, so the final
rename is atomic) and renamed into place at the end; any exception, Ctrl-C
included, removes the temporary directory and leaves the target as it was; the
clean-up and the final renames run with Ctrl-C deferred (hccli/base/interrupts.py),
so a second Ctrl-C cannot leave a temporary directory behind or the target
moved aside.
Replacing an existing target (force) never opens a path inside it: the old
directory is renamed aside, the new one renamed in, and the old one removed
with shutil.rmtree, which unlinks symlinks instead of following them.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from hccli.base.errors import HcError
from hccli.base.interrupts import deferred_sigint


def os_error(path: Path | str, doing: str, exc: OSError, then: str = "") -> HcError:
    code = errno.errorcode.get(exc.errno or 0, "")
    why = exc.strerror or str(exc)
    return HcError(f"{path}: cannot {doing}: {why}" + (f" ({code})" if code else "") + (f"; {then}" if then else ""))


def _target_state(target: Path, force: bool, ours: Callable[[str], bool]) -> str:
    """'new', 'empty' or 'replace'; an HcError for anything else."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return "new"
    except NotADirectoryError:
        raise HcError(f"{target}: a part of this path is a file, not a directory; expected OUTDIR under a "
                      "directory") from None
    except OSError as exc:
        raise os_error(target, "look at it", exc) from None
    if stat.S_ISLNK(st.st_mode):
        raise HcError(f"{target}: is a symbolic link; expected a new directory or a real one to replace")
    if not stat.S_ISDIR(st.st_mode):
        raise HcError(f"{target}: exists and is not a directory; expected a new or empty directory")
    try:
        entries = sorted(os.listdir(target))
    except OSError as exc:
        raise os_error(target, "list it", exc) from None
    if not entries:
        return "empty"
    if not force:
        raise HcError(f"{target}: directory is not empty; expected a new or empty one (or pass --force)")
    foreign = [e for e in entries if not ours(e)]
    if foreign:
        raise HcError(f"{target}: holds {foreign[0]!r}, which make-checkpoint does not write; refusing to replace "
                      "a directory that is not a checkpoint (remove it yourself)")
    return "replace"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def staged_directory(target: str | Path, *, force: bool, ours: Callable[[str], bool]) -> Iterator[Path]:
    """Yield an empty temporary sibling of `target`; when the block ends without an
    exception it becomes `target`. `ours(name)` says which entries of an existing
    target may be replaced (force)."""
    target = Path(os.path.abspath(target))  # lexical: a symlinked OUTDIR is refused, not resolved
    state = _target_state(target, force, ours)
    parent = target.parent
    # the folder it goes in is the user's to make: a typo in it must not become a new tree of folders
    if not parent.is_dir():
        what = "is not a directory" if os.path.lexists(parent) else "does not exist"
        raise HcError(f"{target}: its parent {parent} {what}; expected OUTDIR in an existing directory "
                      "(create that first)")
    tmp: Path | None = None
    try:
        with deferred_sigint():  # made and named as one step: a Ctrl-C cannot fall between them
            try:
                tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=parent))
            except OSError as exc:
                raise os_error(parent, "create a temporary directory", exc) from None
        yield tmp
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; a checkpoint is an ordinary directory
            _fsync_dir(tmp)
        except OSError as exc:
            raise os_error(tmp, "finish the new directory", exc, f"{target} is left as it was") from None
        with deferred_sigint():  # the renames and the old directory's removal finish once begun
            _commit(tmp, target, state)
    except BaseException:
        if tmp is not None:
            with deferred_sigint():
                shutil.rmtree(tmp, ignore_errors=True)
        raise


def _commit(tmp: Path, target: Path, state: str) -> None:
    parent = target.parent
    if state != "replace":
        try:
            os.rename(tmp, target)  # onto nothing or an empty directory: atomic
        except OSError as exc:
            raise os_error(target, "move the new checkpoint into place (did it change meanwhile?)", exc) from None
    else:
        try:
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=parent))
        except OSError as exc:
            raise os_error(parent, "create a temporary directory", exc) from None
        try:
            os.rename(target, old)  # onto the empty placeholder
        except OSError as exc:
            os.rmdir(old)
            raise os_error(target, "move the old directory aside", exc) from None
        try:
            os.rename(tmp, target)
        except OSError as exc:
            os.rename(old, target)
            raise os_error(target, "move the new checkpoint into place", exc) from None
        try:
            shutil.rmtree(old)
        except OSError as exc:
            raise os_error(old, f"remove the old contents of {target} (the new checkpoint is in place)",
                           exc) from None
    try:
        _fsync_dir(parent)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename itself has happened
