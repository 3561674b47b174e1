"""The store protocol: where a checkpoint's files live, as everything above asks for them.

Everything above the store (the shard set, verification, HC values, inspect) asks a store the
same few things: which files there are, the bytes of a range of one, a small file whole (with a
cap), a name to show, and how many reads may run at once. A single file or a GGUF fits the same
protocol (a store of one file); no caller asks "is it remote?". store.py has the local store and
picks the store for what the user named; remote/hub.py the hub's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from hccli.checkpoint.safetensors.header import read_header
from hccli.checkpoint.safetensors.header_types import Header
from hccli.checkpoint.source import ByteSource


class Store(ABC):
    """The files of one checkpoint, wherever they are."""

    label: str  # what messages call the whole store
    workers: int = 1  # how many reads may usefully run at once (latency-bound stores: many)
    bulk_reads_cheap: bool = True  # False where reading MBs of tensor data costs a transfer
    hub: Any = None  # what the report shows of a hub repository (endpoint, commit, transfer)

    @abstractmethod
    def files(self) -> list[str]:
        """Every file name, relative to the store's root ("a/b" for subfolders)."""

    @abstractmethod
    def exists(self, name: str) -> bool:
        """Whether a file of that name is there (of any kind: opening it says what is wrong)."""

    @abstractmethod
    def source(self, name: str, size: int | None = None) -> ByteSource:
        """Exact byte ranges of one file (size, when known, saves a probe)."""

    @abstractmethod
    def read_small(self, name: str, cap: int, expected: str) -> bytes | None:
        """One file read whole, at most `cap` bytes; None when there is no such file."""

    @abstractmethod
    def display(self, name: str) -> str:
        """What messages call one file."""

    def header(self, name: str) -> Header:
        """One safetensors (or GGUF) file's header (never its data)."""
        with self.source(name) as src:
            if name.endswith(".gguf"):
                from hccli.checkpoint.gguf.store import read_gguf_header

                return read_gguf_header(src)
            return read_header(src)
