"""Byte sources: where a checkpoint file's bytes come from.

The header parser and the value reader only ever ask a source for its size and
for exact byte ranges, so the same code serves a local file and HTTP range
requests (http_range.py). A source never hands back more or fewer bytes than asked.
"""

from __future__ import annotations

import os
import stat
from abc import ABC, abstractmethod
from pathlib import Path

from hccli.base.bounded import OPEN_FLAGS, SourceError, file_kind, one_line


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

    # the reads that suit this source when a tensor's bytes are streamed (values.TensorStream):
    # few and large where each is a round trip
    chunk_bytes: int = 8 << 20

    def read_into(self, offset: int, into: memoryview) -> None:
        """Exactly len(into) bytes starting at `offset`, written into `into`: a caller's buffer,
        reused from read to read."""
        into[:] = self.read(offset, len(into))

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

    # a chunk copied out of the page cache and compared while it is still in the CPU's cache
    # (benchmarks/NOTES.md, issue 37)
    chunk_bytes = 512 << 10

    def __init__(self, path: str | os.PathLike[str]):
        self._path = Path(path)
        self._name = str(path)
        try:
            # never blocking on a FIFO (OPEN_FLAGS); the fstat below then refuses it by name
            self._fd: int | None = os.open(self._path, OPEN_FLAGS)
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
        self._open_range(offset, length)
        chunks: list[bytes] = []
        got = 0
        while got < length:
            try:
                chunk = _pread(self._fd, length - got, offset + got)
            except OSError as exc:
                raise self._failed(offset + got, exc) from None
            if not chunk:
                raise self._ended(offset, length, got)
            chunks.append(chunk)
            got += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def read_into(self, offset: int, into: memoryview) -> None:
        length = len(into)
        if type(offset) is not int or not 0 <= offset <= self._size - length or self._fd is None:
            self._open_range(offset, length)  # says what is wrong; run per read, the checks above are its fast accept
        got = 0
        try:  # preadv releases the GIL: another thread compares meanwhile
            got = _preadv(self._fd, into, offset)
            while got < length:
                n = _preadv(self._fd, into[got:], offset + got)
                if not n:
                    raise self._ended(offset, length, got)
                got += n
        except OSError as exc:
            raise self._failed(offset + got, exc) from None

    def _open_range(self, offset: int, length: int) -> None:
        self._check_range(offset, length, self._size)
        if self._fd is None:
            raise SourceError(f"{one_line(self._name)}: read after close", "unreadable")

    def _failed(self, at: int, exc: OSError) -> SourceError:
        return SourceError(f"{one_line(self._name)}: read failed at offset {at}"
                           f" ({one_line(exc.strerror or str(exc))})", "unreadable")

    def _ended(self, offset: int, length: int, got: int) -> SourceError:
        return SourceError(f"{one_line(self._name)}: expected {length} bytes at offset {offset},"
                           f" file ended after {got} (it shrank while being read?)", "short_read")

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


def _preadv(fd: int, into: memoryview, offset: int) -> int:
    if _PREADV:
        return os.preadv(fd, [into], offset)
    chunk = _pread(fd, len(into), offset)  # pragma: no cover - macOS before 11, Windows
    into[:len(chunk)] = chunk  # pragma: no cover
    return len(chunk)  # pragma: no cover


_PREADV = hasattr(os, "preadv")


def _pread(fd: int, length: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, length, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # pragma: no cover - Windows
    return os.read(fd, length)  # pragma: no cover
