"""Byte sources: where a checkpoint file's bytes come from.

The header parser and the value reader only ever ask a source for its size and
for exact byte ranges, so the same code serves a local file today and HTTP
range requests later. A source never hands back more or fewer bytes than asked.
"""

from __future__ import annotations

import os
import stat
from abc import ABC, abstractmethod
from pathlib import Path

from hccli.errors import HcError


def one_line(text: str, limit: int = 200) -> str:
    """Escape control characters (a tensor or file name may hold a newline) and cap the length,
    so that every message stays one line."""
    out = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return out if len(out) <= limit else out[: limit - 3] + "..."


class SourceError(HcError):
    """A source could not be opened, or could not give the bytes asked for.

    code: "not_found", "not_a_file", "unreadable", "bad_range", "short_read", "too_large",
    and for remote sources "http_status", "network", "timeout".
    """

    def __init__(self, message: str, code: str):
        super().__init__(message, exit_code=2)
        self.code = code


class ByteSource(ABC):
    """Random access to the bytes of one file."""

    @property
    @abstractmethod
    def name(self) -> str:
        """What messages call this source (a path, later a URL)."""

    @abstractmethod
    def size(self) -> int:
        """The total number of bytes."""

    @abstractmethod
    def read(self, offset: int, length: int) -> bytes:
        """Exactly `length` bytes starting at `offset`, or SourceError."""

    def _check_range(self, offset: int, length: int, size: int) -> None:
        if type(offset) is not int or type(length) is not int or offset < 0 or length < 0:
            raise SourceError(
                f"{one_line(self.name)}: bad byte range (offset {offset!r}, length {length!r});"
                " expected non-negative integers",
                "bad_range",
            )
        if offset + length > size:
            raise SourceError(
                f"{one_line(self.name)}: expected {length} bytes at offset {offset},"
                f" file has {size} bytes",
                "short_read",
            )

    def close(self) -> None:  # noqa: B027 - optional for sources that hold nothing
        """Release whatever the source holds."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LocalFile(ByteSource):
    """A file on disk, read with positioned reads of exactly the requested length."""

    def __init__(self, path: str | os.PathLike[str]):
        self._path = Path(path)
        self._name = str(path)
        try:
            # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever;
            # the fstat below then refuses it (and any other non-regular file) by name.
            self._fd: int | None = os.open(self._path, _OPEN_FLAGS)
        except FileNotFoundError:
            raise SourceError(f"{one_line(self._name)}: no such file", "not_found") from None
        except IsADirectoryError:
            raise SourceError(
                f"{one_line(self._name)}: is a directory, expected a .safetensors file", "not_a_file"
            ) from None
        except OSError as exc:
            raise SourceError(
                f"{one_line(self._name)}: cannot open ({one_line(exc.strerror or str(exc))})",
                "unreadable",
            ) from None
        try:
            st = os.fstat(self._fd)
        except OSError as exc:  # pragma: no cover - fstat on an open fd practically never fails
            self.close()
            raise SourceError(f"{one_line(self._name)}: cannot stat ({exc})", "unreadable") from None
        if not stat.S_ISREG(st.st_mode):
            self.close()
            raise SourceError(
                f"{one_line(self._name)}: is {file_kind(st.st_mode)}, not a regular file; expected a "
                f"{'.gguf' if self._name.endswith('.gguf') else '.safetensors'} file",
                "not_a_file",
            )
        # The size is fixed when the source is opened: a file that changes under us
        # shows up as a short read rather than as a header that silently disagrees.
        self._size = st.st_size

    @property
    def name(self) -> str:
        return self._name

    @property
    def path(self) -> Path:
        return self._path

    def size(self) -> int:
        return self._size

    def read(self, offset: int, length: int) -> bytes:
        self._check_range(offset, length, self._size)
        if self._fd is None:
            raise SourceError(f"{one_line(self._name)}: read after close", "unreadable")
        chunks: list[bytes] = []
        got = 0
        while got < length:
            try:
                chunk = _pread(self._fd, length - got, offset + got)
            except OSError as exc:
                raise SourceError(
                    f"{one_line(self._name)}: read failed at offset {offset + got}"
                    f" ({one_line(exc.strerror or str(exc))})",
                    "unreadable",
                ) from None
            if not chunk:
                raise SourceError(
                    f"{one_line(self._name)}: expected {length} bytes at offset {offset},"
                    f" file ended after {got} (it shrank while being read?)",
                    "short_read",
                )
            chunks.append(chunk)
            got += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __repr__(self) -> str:
        return f"LocalFile({self._name!r})"


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, words in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISDIR, "a directory")):
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def regular_file_size(path: str | os.PathLike[str], expected: str) -> int:
    """The size of a regular file, checked by stat before anything opens it (a FIFO would
    block the open); a SourceError naming the path and what it is otherwise."""
    name = one_line(str(path))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise SourceError(f"{name}: no such file; expected {expected}", "not_found") from None
    except OSError as exc:
        raise SourceError(f"{name}: cannot read ({one_line(exc.strerror or str(exc))}); expected {expected}",
                          "unreadable") from None
    if not stat.S_ISREG(st.st_mode):
        raise SourceError(f"{name}: is {file_kind(st.st_mode)}, not a regular file; expected {expected}",
                          "not_a_file")
    return st.st_size


def read_small_file(path: str | os.PathLike[str], cap: int, expected: str) -> bytes | None:
    """A small file read whole (an index, a config), or None when there is none.

    Refuses a non-regular file by name without blocking on it, and a file over `cap`
    bytes before reading any of it (a padded or endless file must not cost memory)."""
    name = one_line(str(path))
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SourceError(f"{name}: cannot open ({one_line(exc.strerror or str(exc))}); expected {expected}",
                          "unreadable") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SourceError(f"{name}: is {file_kind(st.st_mode)}, not a regular file; expected {expected}",
                              "not_a_file")
        if st.st_size > cap:
            raise SourceError(f"{name}: {st.st_size:,} bytes; expected {expected} of at most {cap:,} bytes",
                              "too_large")
        chunks, got = [], 0
        want = st.st_size + 1  # the whole file in one read, and one byte to see its end
        while True:  # to the end, but never past the cap (a file growing while read)
            chunk = os.read(fd, min(max(want - got, 1 << 16), cap + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            if got > cap:
                raise SourceError(f"{name}: grew past {cap:,} bytes while being read; expected {expected}",
                                  "too_large")
        return b"".join(chunks)
    except OSError as exc:
        raise SourceError(f"{name}: cannot read ({one_line(exc.strerror or str(exc))})", "unreadable") from None
    finally:
        os.close(fd)


def _pread(fd: int, length: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, length, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # pragma: no cover - Windows
    return os.read(fd, length)  # pragma: no cover
