"""The fast path shares one dtype string and one shape tuple among the entries that have them
(memory of a 100k-tensor checkpoint), and the careful path's verdict is unchanged by it."""

from __future__ import annotations

import json

import pytest

from hccli.checkpoint.header import parse_header
from hccli.checkpoint.header_careful import parse_careful
from hccli.checkpoint.header_fast import parse_fast


def _file(entries: dict) -> tuple[bytes, int]:
    body = json.dumps(entries).encode()
    data = sum(e["data_offsets"][1] - e["data_offsets"][0] for e in entries.values())
    return len(body).to_bytes(8, "little") + body, 8 + len(body) + data


def _entries(n: int) -> dict:
    return {f"layers.{i}.w": {"dtype": "BF16", "shape": [4096, 2], "data_offsets": [i * 16384, (i + 1) * 16384]}
            for i in range(n)}


def test_repeated_shapes_and_dtypes_are_one_object():
    pytest.importorskip("msgspec")
    prefix, size = _file(_entries(3))
    body = prefix[8:]
    header = parse_fast(body, len(body), size, "x.safetensors")
    assert header is not None
    a, b, c = header.tensors
    assert a.shape == (4096, 2) and a.shape is b.shape is c.shape
    assert a.dtype == "BF16" and a.dtype is b.dtype is c.dtype
    careful = parse_careful(body.decode(), len(body), size, "x.safetensors")
    assert header == careful and parse_header(prefix, size, "x.safetensors") == careful
