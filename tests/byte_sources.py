"""Byte sources for tests: in memory, and counting what is asked of another."""

from hccli.checkpoint.source import ByteSource


class MemorySource(ByteSource):
    """An in-memory source that records what was asked of it."""

    def __init__(self, data: bytes, name: str = "mem.safetensors"):
        self._data = data
        self._name = name
        self.calls: list[tuple[int, int]] = []

    @property
    def name(self) -> str:
        return self._name

    def size(self) -> int:
        return len(self._data)

    def read(self, offset: int, length: int) -> bytes:
        self._check_range(offset, length, len(self._data))
        self.calls.append((offset, length))
        return self._data[offset : offset + length]


class CountingSource(ByteSource):
    """Wraps another source and counts the bytes asked of it."""

    def __init__(self, inner: ByteSource):
        self.inner = inner
        self.calls: list[tuple[int, int]] = []

    @property
    def name(self) -> str:
        return self.inner.name

    def size(self) -> int:
        return self.inner.size()

    def read(self, offset: int, length: int) -> bytes:
        self.calls.append((offset, length))
        out = self.inner.read(offset, length)
        assert len(out) == length
        return out

    def read_into(self, offset: int, into: memoryview) -> None:
        self.calls.append((offset, len(into)))
        self.inner.read_into(offset, into)

    @property
    def bytes_read(self) -> int:
        return sum(n for _, n in self.calls)
