"""The safetensors header parser: valid files as safetensors writes them, a hostile file for
every rule, and fuzzing (generated, mutated and mistyped headers) checked against the
reference implementation's own parser (`safetensors.deserialize`). The careful path's verdict
is the verdict: the fast accept declines or returns exactly its header."""

from __future__ import annotations

import gc
import gzip
import io
import json
import pickle
import random
import struct
import time
import tracemalloc
from collections import Counter

import numpy as np
import pytest
import safetensors
import safetensors.numpy as stnp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open

import hccli.checkpoint.safetensors.header_fast as header_fast
import hccli.checkpoint.source as source_mod
from hccli.checkpoint.safetensors.header import header_length, parse_header, read_header
from hccli.checkpoint.safetensors.header_types import DTYPES, MAX_HEADER_SIZE, N_LEN, Header, HeaderError, TensorInfo
from hccli.checkpoint.sniff import SNIFF_LEN, sniff
from hccli.checkpoint.safetensors.header_careful import parse_careful
from hccli.checkpoint.safetensors.header_fast import parse_fast
from hccli.base.bounded import SourceError
from hccli.checkpoint.source import LocalFile
from hccli.base.errors import HcError

from byte_sources import CountingSource, MemorySource  # noqa: E402

FNAME = "model-00001-of-00002.safetensors"
U64 = 2**64

ALL_CODES = {
    "empty_file", "too_short", "header_too_large", "header_truncated", "empty_header",
    "bad_utf8", "bad_json", "not_object", "duplicate_key", "bad_metadata", "bad_entry",
    "unknown_dtype", "bad_shape", "bad_offsets", "overflow", "partial_byte", "span_mismatch",
    "gap_or_overlap", "truncated", "trailing_bytes",
    "lfs_pointer", "html", "xml", "json_file", "zip", "gzip", "pickle", "gguf", "npy", "text_file",
}
# Rejections the reference parser would let through: we are stricter on purpose.
STRICTER_THAN_REFERENCE = {"duplicate_key"}

CASES_RUN: Counter[str] = Counter()


# --------------------------------------------------------------------------- helpers


@pytest.fixture(params=["msgspec", "careful"])
def decoder(request, monkeypatch):
    """Run a test with the fast accept, and again as without msgspec installed (the careful path alone)."""
    if request.param == "msgspec":
        pytest.importorskip("msgspec")
    else:
        monkeypatch.setattr(header_fast, "_DECODERS", [None])
    return request.param


def blob(header, data: bytes = b"", length: int | None = None) -> bytes:
    """A file: 8-byte LE length, the header (object, str or raw bytes), the data."""
    if isinstance(header, (dict, list)):
        header = json.dumps(header)
    if isinstance(header, str):
        header = header.encode("utf-8")
    n = len(header) if length is None else length
    return struct.pack("<Q", n) + header + data


def ent(dtype: str, shape, begin: int, end: int, **extra):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end], **extra}


GOOD = {"a": ent("F32", [2], 0, 8), "b": ent("U8", [4], 8, 12)}
GOOD_DATA = bytes(range(12))


def reference(data: bytes):
    """The reference parser's view: {name: (dtype, shape, data)} or None when it rejects."""
    try:
        return {name: (t["dtype"], list(t["shape"]), bytes(t["data"])) for name, t in safetensors.deserialize(data)}
    except Exception:
        return None


def ours(header: Header, data: bytes):
    return {t.name: (t.dtype, list(t.shape), data[t.abs_begin : t.abs_end]) for t in header.tensors}


def assert_rejects(tmp_path, data: bytes, code: str, *fragments: str, tensor: str | None = None) -> HeaderError:
    """Both entry points (bytes and a LocalFile) reject with `code` in one line naming the file."""
    with pytest.raises(HeaderError) as from_bytes:
        parse_header(data, len(data), FNAME)
    path = tmp_path / FNAME
    path.write_bytes(data)
    with LocalFile(path) as src, pytest.raises(HeaderError) as from_file:
        read_header(src)
    for exc, name in ((from_bytes.value, FNAME), (from_file.value, str(path))):
        msg = str(exc)
        assert exc.code == code, msg
        assert isinstance(exc, HcError) and exc.exit_code == 2
        assert msg.startswith(name + ": "), msg
        assert "\n" not in msg and "\r" not in msg
        for fragment in fragments:
            assert fragment in msg, msg
        if tensor is not None:
            assert f"tensor '{tensor}'" in msg, msg
            assert exc.tensor == tensor
    return from_bytes.value


# --------------------------------------------------------------------------- valid files


def test_dtypes_match_the_reference_list():
    # Every dtype safetensors 0.8 knows, with its bit width (tensor.rs Dtype::bitsize).
    assert DTYPES == {
        "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
        "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16,
        "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64,
        "I64": 64, "U64": 64,
    }
    for dtype, bits in DTYPES.items():
        n = 8  # 8 elements are a whole number of bytes for every width
        data = blob({"t": ent(dtype, [n], 0, n * bits // 8)}, bytes(n * bits // 8))
        assert reference(data) is not None, dtype
        assert parse_header(data, len(data), FNAME)["t"].nbytes == n * bits // 8


def _compare_with_safe_open(path, header: Header) -> None:
    raw = path.read_bytes()
    on_disk = json.loads(raw[8 : 8 + header.header_len])
    with safe_open(str(path), framework="numpy") as f:
        assert set(f.keys()) == set(header.names)
        assert f.metadata() == header.metadata
        for t in header.tensors:
            sl = f.get_slice(t.name)
            assert list(sl.get_shape()) == list(t.shape)
            assert sl.get_dtype() == t.dtype
            assert on_disk[t.name]["data_offsets"] == [t.begin, t.end]
    ref = reference(raw)
    assert ref == ours(header, raw)


def test_files_written_by_safetensors_numpy(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {
        "layers.0.hc_attn_fn": rng.standard_normal((24, 64)).astype(np.float32),
        "layers.0.hc_attn_base": rng.standard_normal(24).astype(np.float32),
        "layers.0.hc_attn_scale": np.array([1.0, 2.0, 3.0], dtype=np.float32),
        "f64": np.arange(5, dtype=np.float64),
        "f16": np.arange(6, dtype=np.float16).reshape(2, 3),
        "i8": np.arange(-4, 4, dtype=np.int8),
        "u8": np.arange(7, dtype=np.uint8),
        "i16": np.arange(3, dtype=np.int16),
        "u16": np.arange(3, dtype=np.uint16),
        "i32": np.arange(3, dtype=np.int32),
        "u32": np.arange(3, dtype=np.uint32),
        "i64": np.arange(3, dtype=np.int64),
        "u64": np.arange(3, dtype=np.uint64),
        "bool": np.array([True, False, True]),
        "c64": np.array([1 + 2j], dtype=np.complex64),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    path = tmp_path / "numpy.safetensors"
    stnp.save_file(tensors, str(path), metadata={"format": "np", "note": "héllo"})
    with LocalFile(path) as src:
        header = read_header(src)
    assert header.name == str(path)
    assert header.data_start == 8 + header.header_len
    assert header.file_size == path.stat().st_size
    assert header.metadata == {"format": "np", "note": "héllo"}
    assert len(header.tensors) == len(tensors) and "scalar" in header and "nope" not in header
    assert [t.begin for t in header.tensors] == sorted(t.begin for t in header.tensors)
    assert header["scalar"].shape == () and header["scalar"].n_elements == 1
    assert header["empty"].nbytes == 0 and header["empty"].n_elements == 0
    fn = header["layers.0.hc_attn_fn"]
    assert (fn.dtype, fn.shape, fn.n_elements, fn.nbytes) == ("F32", (24, 64), 1536, 6144)
    assert isinstance(fn, TensorInfo) and fn.bits_per_element == 32
    assert fn.abs_begin == header.data_start + fn.begin and fn.abs_end == header.data_start + fn.end
    _compare_with_safe_open(path, header)


def test_files_written_by_safetensors_torch(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    tensors = {
        "bf16": torch.arange(10, dtype=torch.float32).to(torch.bfloat16).reshape(2, 5),
        "e4m3": torch.zeros(4, 32).to(torch.float8_e4m3fn),
        "e5m2": torch.zeros(3).to(torch.float8_e5m2),
        "e8m0": torch.ones(2, 2).to(torch.float8_e8m0fnu),
        "fp4.weight": torch.zeros(4, 16, dtype=torch.int8),
    }
    path = tmp_path / "torch.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    with LocalFile(path) as src:
        header = read_header(src)
    assert {t.name: t.dtype for t in header.tensors} == {
        "bf16": "BF16", "e4m3": "F8_E4M3", "e5m2": "F8_E5M2", "e8m0": "F8_E8M0", "fp4.weight": "I8",
    }
    _compare_with_safe_open(path, header)


def test_parse_header_accepts_the_whole_file_or_just_the_header():
    data = blob(GOOD, GOOD_DATA)
    n = int.from_bytes(data[:8], "little")
    whole = parse_header(data, len(data), FNAME)
    just_header = parse_header(data[: 8 + n], len(data), FNAME)
    assert whole == just_header
    with pytest.raises(ValueError):
        parse_header(data[: 8 + n - 1], len(data), FNAME)


# The fast accept shares one dtype string and one shape tuple among the entries that have them (the
# memory of a 100k-tensor checkpoint); the careful path's verdict is unchanged by it.


def _sized_file(entries: dict) -> tuple[bytes, int]:
    body = json.dumps(entries).encode()
    data = sum(e["data_offsets"][1] - e["data_offsets"][0] for e in entries.values())
    return len(body).to_bytes(8, "little") + body, 8 + len(body) + data


def _repeated_entries(n: int) -> dict:
    return {f"layers.{i}.w": {"dtype": "BF16", "shape": [4096, 2], "data_offsets": [i * 16384, (i + 1) * 16384]}
            for i in range(n)}


def test_repeated_shapes_and_dtypes_are_one_object():
    pytest.importorskip("msgspec")
    prefix, size = _sized_file(_repeated_entries(3))
    body = prefix[8:]
    header = parse_fast(body, len(body), size, "x.safetensors")
    assert header is not None
    a, b, c = header.tensors
    assert a.shape == (4096, 2) and a.shape is b.shape is c.shape
    assert a.dtype == "BF16" and a.dtype is b.dtype is c.dtype
    careful = parse_careful(body.decode(), len(body), size, "x.safetensors")
    assert header == careful and parse_header(prefix, size, "x.safetensors") == careful


# Edge cases the reference accepts, so we must too (and agree on what they mean).
ACCEPTED = {
    "empty-header-object": (blob("{}"), {}),
    "padded-like-safetensors-writes": (blob('{"t":' + json.dumps(ent("U8", [2], 0, 2)) + "}      ", b"ab"), {"t": "U8"}),
    "json-whitespace-around": (blob('\t\r\n {"t":' + json.dumps(ent("U8", [2], 0, 2)) + "} \n", b"ab"), {"t": "U8"}),
    "header-order-differs-from-data-order": (
        blob({"z": ent("U8", [2], 2, 4), "a": ent("U8", [2], 0, 2)}, b"abcd"), {"z": "U8", "a": "U8"}),
    "extra-fields-in-entry": (blob({"t": ent("U8", [2], 0, 2, extra=[1, {"x": None}], big=10**40)}, b"ab"), {"t": "U8"}),
    "metadata-null": (blob({"__metadata__": None, "t": ent("U8", [1], 0, 1)}, b"a"), {"t": "U8"}),
    "metadata-empty": (blob({"__metadata__": {}, "t": ent("U8", [1], 0, 1)}, b"a"), {"t": "U8"}),
    "zero-size-tensors-share-offsets": (
        blob({"a": ent("F32", [0, 3], 0, 0), "b": ent("F32", [0], 0, 0), "c": ent("U8", [1], 0, 1)}, b"a"),
        {"a": "F32", "b": "F32", "c": "U8"}),
    "zero-dim-with-huge-later-dims": (blob({"t": ent("U8", [0, 2**40, 2**40], 0, 0)}), {"t": "U8"}),
    "scalar": (blob({"t": ent("F64", [], 0, 8)}, bytes(8)), {"t": "F64"}),
    "sub-byte-whole-bytes": (
        blob({"f4": ent("F4", [4], 0, 2), "f6": ent("F6_E2M3", [4], 2, 5), "f6b": ent("F6_E3M2", [2, 2], 5, 8)}, bytes(8)),
        {"f4": "F4", "f6": "F6_E2M3", "f6b": "F6_E3M2"}),
    "empty-and-unicode-names": (blob({"": ent("U8", [1], 0, 1), "ψ.😀": ent("U8", [1], 1, 2)}, b"ab"), {"": "U8", "ψ.😀": "U8"}),
    "surrogate-pair-escape": (blob('{"\\ud83d\\ude00":' + json.dumps(ent("U8", [1], 0, 1)) + "}", b"a"), {"😀": "U8"}),
    "nesting-at-the-limit": (
        blob('{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":' + "[" * 125 + "]" * 125 + "}}", b"a"), {"t": "U8"}),
    "negative-and-float-numbers-in-extra-fields": (blob({"t": ent("U8", [1], 0, 1, x=-3, y=1.5e300)}, b"a"), {"t": "U8"}),
    # ':' and '-' inside strings, literal or escaped, are no separators or signs.
    "colons-and-hyphens-in-strings": (
        blob({"__metadata__": {"date": "2026-11-30T22:00:00", "a:b": "-0-0-0"}, "x-0:y": ent("U8", [1], 0, 1)}, b"a"),
        {"x-0:y": "U8"}),
    # __metadata__ first (read on its own) with a '}' inside a string, and last (read by a skip).
    "metadata-first-with-brace-in-value": (
        blob('{ "__metadata__" : {"a": "x}y", "b": "{z}"}, "t":' + json.dumps(ent("U8", [1], 0, 1)) + "}", b"a"),
        {"t": "U8"}),
    "metadata-last": (blob({"t": ent("U8", [1], 0, 1), "__metadata__": {"format": "pt"}}, b"a"), {"t": "U8"}),
    "escaped-colon-and-hyphen": (blob('{"a\\u003ab\\u002d0":' + json.dumps(ent("U8", [1], 0, 1)) + "}", b"a"),
                                 {"a:b-0": "U8"}),
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_accepted_like_the_reference(case, tmp_path, decoder):
    data, dtypes = ACCEPTED[case]
    header = parse_header(data, len(data), FNAME)
    assert {t.name: t.dtype for t in header.tensors} == dtypes
    assert header.metadata == json.loads(data[8 : 8 + header.header_len]).get("__metadata__")
    ref = reference(data)
    assert ref is not None, "the reference rejects this; the case is wrong"
    assert ref == ours(header, data)
    path = tmp_path / "ok.safetensors"
    path.write_bytes(data)
    with LocalFile(path) as src:
        assert read_header(src) == Header(str(path), header.header_len, header.data_start, header.file_size,
                                          header.metadata, header.tensors)


def test_header_length_accepts_exactly_the_cap():
    head = struct.pack("<Q", MAX_HEADER_SIZE)
    assert header_length(head, 8 + MAX_HEADER_SIZE, FNAME) == MAX_HEADER_SIZE
    with pytest.raises(HeaderError) as exc:
        header_length(struct.pack("<Q", MAX_HEADER_SIZE + 1), 10**12, FNAME)
    assert exc.value.code == "header_too_large"


# --------------------------------------------------------------------------- hostile files


def _deep(depth: int) -> str:
    # The top-level object and the entry are levels 1 and 2.
    inner = depth - 2
    return '{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":' + "[" * inner + "]" * inner + "}}"


def _torch_zip() -> bytes:
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, buf)
    return buf.getvalue()


def _npy() -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.zeros(3))
    return buf.getvalue()


LFS = (
    b"version https://git-lfs.github.com/spec/v1\n"
    b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
    b"size 5003389056\n"
)

HOSTILE = {
    # (file bytes, code, fragments, tensor)
    "empty-file": (b"", "empty_file", ["0 bytes"], None),
    "three-bytes": (b"\x01\x02\x03", "too_short", ["3 bytes", "at least 8"], None),
    "seven-bytes-of-text": (b"oops!\n", "too_short", ["6 bytes", "text file"], None),
    "length-over-cap": (struct.pack("<Q", MAX_HEADER_SIZE + 1) + bytes(64), "header_too_large",
                        ["100,000,001", "at most 100,000,000"], None),
    "length-u64-max": (b"\xfe" * 8 + bytes(16), "header_too_large", ["at most 100,000,000"], None),
    "length-beyond-file": (blob("{}", length=1000), "header_truncated", ["1,000 bytes", "only 2"], None),
    # A truncated shard whose length byte happens to be '{' or a pickle opcode is still a truncated shard.
    "length-beyond-file-brace-byte": (blob("{" * 20, length=0x7B), "header_truncated", ["123 bytes"], None),
    "length-beyond-file-pickle-bytes": (blob("x" * 20, length=0x0280), "header_truncated", ["640 bytes"], None),
    "zero-length-zero-filled": (bytes(4096), "empty_header", ["length is 0", "zero bytes"], None),
    "zero-length": (blob("{}", length=0), "empty_header", ["length is 0"], None),
    "utf8-invalid-byte": (blob(b'{"a\xff":' + json.dumps(ent("U8", [1], 0, 1)).encode() + b"}", b"a"),
                          "bad_utf8", ["0xff", "file offset 11"], None),
    "utf8-overlong": (blob(b'{"\xc0\xaf":{}}'), "bad_utf8", ["0xc0"], None),
    "utf8-encoded-surrogate": (blob(b'{"\xed\xa0\x80":{}}'), "bad_utf8", ["0xed"], None),
    "utf8-cut-multibyte": (blob(b'{"t":{}}  \xc3'), "bad_utf8", ["0xc3"], None),
    "json-trailing-comma": (blob('{"t":' + json.dumps(ent("U8", [1], 0, 1)) + ",}", b"a"), "bad_json", ["not valid JSON"], None),
    "json-single-quotes": (blob("{'t': {}}"), "bad_json", ["not valid JSON", "file offset 9"], None),
    "json-nul-padding": (blob('{"t":' + json.dumps(ent("U8", [1], 0, 1)) + "}\x00\x00\x00", b"a"), "bad_json", ["not valid JSON"], None),
    "json-bom": (blob("\ufeff{}"), "bad_json", ["not valid JSON"], None),
    "json-comment": (blob('{/* hi */}'), "bad_json", ["not valid JSON"], None),
    "json-two-objects": (blob("{}{}"), "bad_json", ["not valid JSON"], None),
    "json-nan": (blob('{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":NaN}}', b"a"), "bad_json", ["NaN"], None),
    "json-infinity": (blob('{"__metadata__":{},"x":Infinity}'), "bad_json", ["Infinity"], None),
    "json-minus-infinity": (blob('{"x":[-Infinity]}'), "bad_json", ["-Infinity"], None),
    "json-number-out-of-range": (blob('{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1e400}}', b"a"),
                                 "bad_json", ["out-of-range number 1e400"], None),
    "json-lone-surrogate-in-name": (blob('{"\\ud800x":' + json.dumps(ent("U8", [1], 0, 1)) + "}", b"a"),
                                    "bad_json", ["lone surrogate"], None),
    "json-lone-surrogate-in-metadata": (blob('{"__metadata__":{"k":"\\udc00"}}'), "bad_json", ["lone surrogate"], None),
    "json-lone-surrogate-deep": (blob('{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":[[["\\ud800"]]]}}', b"a"),
                                 "bad_json", ["lone surrogate"], None),
    "json-nested-past-the-limit": (blob(_deep(128), b"a"), "bad_json", ["nested deeper than 127"], None),
    "json-nested-past-python": (blob("[" * 200_000 + "]" * 200_000), "bad_json", [], None),
    "not-object-array": (blob("[]"), "not_object", ["JSON array, expected an object"], None),
    # Refused as an array without reading on, as the reference does (it may be 100 MB of [] or numbers).
    "not-object-array-cut-short": (blob("[[], [1, "), "not_object", ["JSON array"], None),
    "not-object-null": (blob("null"), "not_object", ["JSON null"], None),
    "not-object-number": (blob("12"), "not_object", ["JSON number"], None),
    "not-object-string": (blob('"x"'), "not_object", ["JSON string"], None),
    "duplicate-tensor": (blob('{"t":' + json.dumps(ent("U8", [1], 0, 1)) + ',"t":' + json.dumps(ent("U8", [1], 0, 1)) + "}", b"a"),
                         "duplicate_key", ["'t' more than once"], None),
    "duplicate-field": (blob('{"t":{"dtype":"U8","shape":[1],"shape":[1],"data_offsets":[0,1]}}', b"a"),
                        "duplicate_key", ["'shape'"], None),
    "duplicate-metadata": (blob('{"__metadata__":{},"__metadata__":{}}'), "duplicate_key", ["'__metadata__'"], None),
    "duplicate-metadata-key": (blob('{"__metadata__":{"a":"1","a":"2"}}'), "duplicate_key", ["'a'"], None),
    # The fast paths count ':' against the keys they decoded: escaped ':' must not hide a repeat
    # (the repeated entry's 4 ':' against 4 escaped ones).
    "duplicate-tensor-beside-escaped-colon": (
        blob('{"a' + "\\u003a" * 4 + '":' + json.dumps(ent("U8", [1], 0, 1)) + ',"t":' + json.dumps(ent("U8", [1], 1, 2))
             + ',"t":' + json.dumps(ent("U8", [1], 1, 2)) + "}", b"ab"), "duplicate_key", ["'t'"], None),
    "duplicate-field-beside-colon-in-name": (blob('{"x:y":{"dtype":"U8","shape":[1],"shape":[1],"data_offsets":[0,1]}}', b"a"),
                                             "duplicate_key", ["'shape'"], None),
    "metadata-array": (blob({"__metadata__": ["a"]}), "bad_metadata", ["JSON array"], None),
    "metadata-string": (blob({"__metadata__": "pt"}), "bad_metadata", ["JSON string"], None),
    "metadata-int-value": (blob({"__metadata__": {"step": 5}}), "bad_metadata", ["['step']", "JSON number", "expected a string"], None),
    "metadata-null-value": (blob({"__metadata__": {"a": None}}), "bad_metadata", ["JSON null"], None),
    "metadata-object-value": (blob({"__metadata__": {"a": {"b": "c"}}}), "bad_metadata", ["JSON object"], None),
    "entry-array": (blob({"t": [0, 1]}), "bad_entry", ["JSON array"], "t"),
    "entry-null": (blob({"t": None}), "bad_entry", ["JSON null"], "t"),
    "entry-string": (blob({"t": "F32"}), "bad_entry", ["JSON string"], "t"),
    "entry-no-dtype": (blob({"t": {"shape": [1], "data_offsets": [0, 1]}}, b"a"), "bad_entry", ["no 'dtype'"], "t"),
    "entry-no-shape": (blob({"t": {"dtype": "U8", "data_offsets": [0, 1]}}, b"a"), "bad_entry", ["no 'shape'"], "t"),
    "entry-no-offsets": (blob({"t": {"dtype": "U8", "shape": [1]}}, b"a"), "bad_entry", ["no 'data_offsets'"], "t"),
    # Three keys, as many ':' as an ordinary entry, one field missing.
    "entry-other-field-for-offsets": (blob({"t": {"dtype": "U8", "shape": [1], "x": [0, 1]}}, b"a"), "bad_entry",
                                      ["no 'data_offsets'"], "t"),
    "dtype-lowercase": (blob({"t": ent("u8", [1], 0, 1)}, b"a"), "unknown_dtype", ['"u8"', "F8_E4M3"], "t"),
    "dtype-made-up": (blob({"t": ent("FP4", [2], 0, 1)}, b"a"), "unknown_dtype", ['"FP4"'], "t"),
    "dtype-number": (blob({"t": ent(5, [1], 0, 1)}, b"a"), "unknown_dtype", ["dtype 5"], "t"),
    "dtype-null": (blob({"t": ent(None, [1], 0, 1)}, b"a"), "unknown_dtype", ["dtype null"], "t"),
    "shape-negative": (blob({"t": ent("U8", [-1], 0, 1)}, b"a"), "bad_shape", ["[-1]"], "t"),
    "shape-float": (blob({"t": ent("U8", [1.0], 0, 1)}, b"a"), "bad_shape", ["[1.0]"], "t"),
    "shape-minus-zero": (blob('{"t":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}}'), "bad_shape", [], "t"),
    # The fast paths count '-' against those in decoded strings: a '-' in a name must not hide a -0.
    "shape-minus-zero-beside-hyphen-in-name": (blob('{"a-b":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}}'),
                                               "bad_shape", [], "a-b"),
    "shape-minus-zero-beside-escaped-hyphen": (blob('{"a\\u002d":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}}'),
                                               "bad_shape", [], "a-"),
    "shape-string-dim": (blob({"t": ent("U8", ["1"], 0, 1)}, b"a"), "bad_shape", ['["1"]'], "t"),
    "shape-bool-dim": (blob({"t": ent("U8", [True], 0, 1)}, b"a"), "bad_shape", ["[true]"], "t"),
    "shape-null-dim": (blob({"t": ent("U8", [None], 0, 1)}, b"a"), "bad_shape", ["[null]"], "t"),
    "shape-nested": (blob({"t": ent("U8", [[1]], 0, 1)}, b"a"), "bad_shape", [], "t"),
    "shape-2-pow-64": (blob({"t": ent("U8", [U64, 0], 0, 0)}), "bad_shape", ["0..2^64-1"], "t"),
    "shape-huge-literal": (blob('{"t":{"dtype":"U8","shape":[' + "9" * 5000 + '],"data_offsets":[0,1]}}', b"a"),
                           "bad_shape", ["(5000 digits)"], "t"),
    "shape-not-a-list": (blob({"t": ent("U8", "2x3", 0, 6)}, bytes(6)), "bad_shape", ['"2x3"'], "t"),
    "shape-number": (blob({"t": ent("U8", 6, 0, 6)}, bytes(6)), "bad_shape", ["shape 6"], "t"),
    "offsets-one": (blob({"t": {"dtype": "U8", "shape": [1], "data_offsets": [0]}}, b"a"), "bad_offsets", ["[0]"], "t"),
    "offsets-three": (blob({"t": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1, 2]}}, b"a"), "bad_offsets", [], "t"),
    "offsets-negative": (blob({"t": ent("U8", [1], -1, 0)}, b"a"), "bad_offsets", [], "t"),
    "offsets-float": (blob({"t": ent("U8", [1], 0, 1.0)}, b"a"), "bad_offsets", [], "t"),
    "offsets-bool": (blob({"t": ent("U8", [1], False, True)}, b"a"), "bad_offsets", [], "t"),
    "offsets-string": (blob({"t": {"dtype": "U8", "shape": [1], "data_offsets": "0,1"}}, b"a"), "bad_offsets", [], "t"),
    "offsets-2-pow-64": (blob({"t": ent("U8", [0], U64, U64)}), "bad_offsets", [], "t"),
    "offsets-minus-zero": (blob('{"t":{"dtype":"U8","shape":[1],"data_offsets":[-0,1]}}', b"a"), "bad_offsets", [], "t"),
    "offsets-reversed": (blob({"t": ent("U8", [1], 1, 0)}, b"a"), "bad_offsets", ["[1, 0] end before they begin"], "t"),
    "overflow-elements": (blob({"t": ent("U8", [2**32, 2**32], 0, 0)}), "overflow", ["2^64-1 elements"], "t"),
    "overflow-before-a-zero-dim": (blob({"t": ent("U8", [2**40, 2**40, 0], 0, 0)}), "overflow", [], "t"),
    "overflow-bits": (blob({"t": ent("F64", [2**61], 0, 0)}), "overflow", ["2^64-1 bits"], "t"),
    "partial-byte-f4": (blob({"t": ent("F4", [3], 0, 2)}, bytes(2)), "partial_byte", ["12 bits", "whole number of bytes"], "t"),
    "partial-byte-f6": (blob({"t": ent("F6_E3M2", [5], 0, 4)}, bytes(4)), "partial_byte", ["30 bits"], "t"),
    "span-too-short": (blob({"t": ent("F32", [2], 0, 7)}, bytes(7)), "span_mismatch", ["needs 8 bytes", "span 7"], "t"),
    "span-too-long-bf16": (blob({"t": ent("BF16", [3], 0, 8)}, bytes(8)), "span_mismatch", ["needs 6 bytes"], "t"),
    "span-f4-counted-as-bytes": (blob({"t": ent("F4", [4], 0, 4)}, bytes(4)), "span_mismatch", ["needs 2 bytes"], "t"),
    "first-tensor-not-at-0": (blob({"t": ent("U8", [1], 4, 5)}, bytes(5)), "gap_or_overlap", ["expected the first tensor at 0"], "t"),
    "gap": (blob({"a": ent("U8", [4], 0, 4), "b": ent("U8", [2], 6, 8)}, bytes(8)), "gap_or_overlap",
            ["gap of 2 bytes after 'a'"], "b"),
    "overlap": (blob({"a": ent("U8", [4], 0, 4), "b": ent("U8", [4], 2, 6)}, bytes(6)), "gap_or_overlap",
                ["overlap 'a' [0, 4]"], "b"),
    "same-bytes-twice": (blob({"a": ent("U8", [4], 0, 4), "b": ent("U8", [4], 0, 4)}, bytes(4)), "gap_or_overlap", ["overlap"], None),
    "empty-tensor-inside-another": (blob({"a": ent("U8", [4], 0, 4), "b": ent("U8", [0], 2, 2)}, bytes(4)), "gap_or_overlap", [], None),
    "data-one-byte-short": (blob(GOOD, GOOD_DATA[:-1]), "truncated", [f"expected {8 + len(json.dumps(GOOD)) + 12:,} bytes",
                                                                   f"file has {8 + len(json.dumps(GOOD)) + 11:,}"], None),
    "data-missing": (blob(GOOD), "truncated", ["truncated"], None),
    "trailing-bytes": (blob(GOOD, GOOD_DATA + b"junk"), "trailing_bytes", ["4 bytes after the last tensor"], None),
    "trailing-bytes-no-tensors": (blob("{}", b"x"), "trailing_bytes", ["1 byte after"], None),
    "pickle-small-frame": (b"\x80\x05\x95\x05\x00\x00\x00\x00\x00\x00\x00K\x01.", "pickle", ["pickle"], None),
    # What people download instead of a shard.
    "lfs-pointer": (LFS, "lfs_pointer", ["Git LFS pointer", "5,003,389,056-byte object", "git lfs pull"], None),
    "html-doctype": (b"<!DOCTYPE html>\n<html><body>404</body></html>\n", "html", ["HTML page"], None),
    "html-lowercase-indented": (b"\xef\xbb\xbf\n  <html lang=en><head></head></html>", "html", ["HTML page"], None),
    "xml-error": (b'<?xml version="1.0"?><Error><Code>AccessDenied</Code></Error>', "xml", ["XML document"], None),
    "index-json": (json.dumps({"metadata": {"total_size": 1}, "weight_map": {}}).encode(), "json_file", ["JSON document"], None),
    "pickle-protocol-2": (pickle.dumps({"w": [1, 2, 3]}, protocol=2), "pickle", ["pickle"], None),
    "pickle-protocol-4": (pickle.dumps({"w": [1, 2, 3]}, protocol=4), "pickle", ["pickle"], None),
    "pickle-protocol-5": (pickle.dumps({"w": [1, 2, 3]}, protocol=5), "pickle", ["pickle"], None),
    "gguf": (b"GGUF" + struct.pack("<IQQ", 3, 0, 0), "gguf", ["GGUF"], None),
    "gzip": (gzip.compress(blob(GOOD, GOOD_DATA)), "gzip", ["gzip"], None),
    "npy": (_npy(), "npy", ["NumPy"], None),
    "readme": (b"# Model card\n\nThis checkpoint is ...\n", "text_file", ["is a text file, not safetensors"], None),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_file_rejected(case, tmp_path, decoder):
    data, code, fragments, tensor = HOSTILE[case]
    assert code in ALL_CODES
    assert_rejects(tmp_path, data, code, *fragments, tensor=tensor)
    # Sanity of the fixture itself: the reference rejects it too, except where we are stricter.
    if code not in STRICTER_THAN_REFERENCE:
        assert reference(data) is None


def test_every_code_has_a_hostile_file():
    assert {code for _, code, _, _ in HOSTILE.values()} | {"zip"} == ALL_CODES


def test_torch_zip_checkpoint(tmp_path):
    assert_rejects(tmp_path, _torch_zip(), "zip", "zip archive", "PyTorch")


def test_hostile_tensor_and_file_names_stay_on_one_line(tmp_path):
    data = blob({"evil\nname\r\x1b[31m": ent("F32", [2], 0, 7)}, bytes(7))
    exc = assert_rejects(tmp_path, data, "span_mismatch")
    assert "evil\\nname\\r\\x1b[31m" in str(exc)
    with pytest.raises(HeaderError) as info:
        parse_header(b"", 0, "dir\nwith newline.safetensors")
    assert str(info.value) == "dir\\nwith newline.safetensors: file is empty (0 bytes), expected a safetensors file"


def test_small_frame_pickle_is_not_taken_for_a_length():
    # A protocol-5 pickle with a 5-byte first frame reads as a 93,651,200-byte header length.
    data = b"\x80\x05\x95\x05\x00\x00\x00\x00\x00\x00\x00K\x01."
    assert int.from_bytes(data[:8], "little") <= MAX_HEADER_SIZE
    assert sniff(data) == ("pickle", "is a Python pickle (a legacy PyTorch checkpoint?)")


def test_cap_is_checked_before_the_file_size(tmp_path):
    """A length just over the cap in a file big enough to hold it: rejected without reading it."""
    path = tmp_path / "sparse-cap.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", MAX_HEADER_SIZE + 1))
        f.truncate(8 + MAX_HEADER_SIZE + 1 + 16)  # sparse: costs no disk
    with LocalFile(path) as inner:
        src = CountingSource(inner)
        with pytest.raises(HeaderError) as exc:
            read_header(src)
    assert exc.value.code == "header_too_large"
    assert src.bytes_read <= 8 + SNIFF_LEN


def test_fast_paths_take_ordinary_headers_with_colons_and_hyphens_in_strings():
    header = {"__metadata__": {"format": "pt", "date": "2026-11-30T22:00:00", "x:y": "-0"},
              "model-1.layers.0:attn": ent("BF16", [2, 3], 12, 24), "b": ent("F32", [3], 0, 12)}
    data = blob(header, bytes(24))
    n = int.from_bytes(data[:8], "little")
    body = data[8 : 8 + n]
    careful = parse_careful(body.decode(), n, len(data), FNAME)
    if header_fast.msgspec_installed():
        assert parse_fast(body, n, len(data), FNAME) == careful
    assert careful.metadata == header["__metadata__"] and careful.names == ("b", "model-1.layers.0:attn")


# --------------------------------------------------------------------------- hostile sizes

# Headers of millions of tiny containers or numbers: the parse must stay linear in time and memory.
BIG_HOSTILE = {
    "arrays": lambda size: b"[" + b"[]," * (size // 3) + b"[]]",
    "minus-zero-metadata": lambda size: b'{"__metadata__":{"a":"' + b"-0" * (size // 2) + b'"}}',
    "floats": lambda size: b'{"x":[' + b"1.5," * (size // 4) + b"1.5]}",
}


def _parse_cost(body: bytes) -> tuple[float, int]:
    """CPU seconds (best of 3) and peak traced bytes of one parse_header of `body`."""
    data = struct.pack("<Q", len(body)) + body

    def parse():
        try:
            parse_header(data, len(data), FNAME)
        except HeaderError:
            pass

    parse()  # imports (numpy for nesting) and caches out of the timing
    seconds = []
    for _ in range(3):
        t = time.process_time()
        parse()
        seconds.append(time.process_time() - t)
    gc.collect()
    tracemalloc.start()
    try:
        parse()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return min(seconds), peak


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in ("arrays", "floats") else c
                                  for c in sorted(BIG_HOSTILE)])
def test_hostile_headers_cost_linear_time_and_memory(case, decoder):
    """Four times the header costs about four times the time and memory (quadratic would be 16),
    memory stays within what the reference parser needs per header byte (~11), and the time
    within a small multiple of a bare json.loads of the same text, measured here."""
    small, big = 1_000_000, 4_000_000
    t_small, m_small = _parse_cost(BIG_HOSTILE[case](small))
    body = BIG_HOSTILE[case](big)
    t_big, m_big = _parse_cost(body)
    t_json = []
    for _ in range(3):
        t = time.process_time()
        json.loads(body)
        t_json.append(time.process_time() - t)
    assert t_big < 3 * min(t_json) + 0.05, (t_big, min(t_json))
    assert t_big < 8 * max(t_small, 0.005), (t_small, t_big)
    assert m_big < 6 * m_small + 1_000_000, (m_small, m_big)
    assert m_big < 12 * big, m_big


# --------------------------------------------------------------------------- bounded reads


def test_read_header_of_a_big_sparse_file_reads_only_the_header(tmp_path, monkeypatch):
    big = 5 * 2**30
    header = {
        "__metadata__": {"format": "pt"},
        "embed.weight": ent("BF16", [big // 2], 0, big),
        "layers.0.hc_attn_scale": ent("F32", [3], big, big + 12),
    }
    text = json.dumps(header).encode()
    path = tmp_path / "big.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(8 + len(text) + big + 12)

    asked_of_os: list[int] = []
    real_pread = source_mod._pread

    def counting_pread(fd, length, offset):
        asked_of_os.append(length)
        return real_pread(fd, length, offset)

    monkeypatch.setattr(source_mod, "_pread", counting_pread)
    with LocalFile(path) as inner:
        src = CountingSource(inner)
        parsed = read_header(src)
    assert src.calls == [(0, 8), (8, len(text))]
    assert sum(asked_of_os) == 8 + len(text)
    assert parsed.file_size == 8 + len(text) + big + 12
    assert parsed["embed.weight"].nbytes == big
    assert parsed["layers.0.hc_attn_scale"].abs_begin == 8 + len(text) + big


def test_local_file_reads_exactly_what_is_asked(tmp_path, monkeypatch):
    path = tmp_path / "bytes.bin"
    path.write_bytes(bytes(range(256)) * 4)
    short_reads: list[int] = []
    real_pread = source_mod._pread

    def stingy_pread(fd, length, offset):
        # The OS may return fewer bytes than asked; LocalFile must keep reading, never more.
        length = min(length, 7)
        short_reads.append(length)
        return real_pread(fd, length, offset)

    monkeypatch.setattr(source_mod, "_pread", stingy_pread)
    with LocalFile(path) as src:
        assert src.size() == 1024
        assert src.read(10, 20) == (bytes(range(256)) * 4)[10:30]
        assert sum(short_reads) == 20
        assert src.read(1024, 0) == b""
        assert src.read(1000, 24) == (bytes(range(256)) * 4)[1000:]


def test_local_file_errors(tmp_path):
    path = tmp_path / "small.bin"
    path.write_bytes(b"0123456789")
    with LocalFile(path) as src:
        for offset, length, code in ((8, 3, "short_read"), (11, 0, "short_read"), (-1, 2, "bad_range"),
                                     (0, -1, "bad_range"), (1.0, 2, "bad_range")):
            with pytest.raises(SourceError) as exc:
                src.read(offset, length)
            assert exc.value.code == code and str(path) in str(exc.value)
    with pytest.raises(SourceError) as exc:
        src.read(0, 1)
    assert exc.value.code == "unreadable"
    for target, code in ((tmp_path / "missing.safetensors", "not_found"), (tmp_path, "not_a_file")):
        with pytest.raises(SourceError) as exc:
            LocalFile(target)
        assert exc.value.code == code and str(target) in str(exc.value) and exc.value.exit_code == 2


def test_local_file_notices_a_file_that_shrank(tmp_path):
    path = tmp_path / "shrinks.bin"
    path.write_bytes(bytes(100))
    with LocalFile(path) as src:
        with open(path, "r+b") as f:
            f.truncate(50)
        with pytest.raises(SourceError) as exc:
            src.read(40, 20)
    assert exc.value.code == "short_read"


# --------------------------------------------------------------------------- fuzzing

FUZZ = settings(max_examples=300, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

NAMES = st.text(max_size=10).filter(lambda s: s != "__metadata__")


@st.composite
def valid_files(draw):
    """A valid file built from generated tensors, with header order independent of data order."""
    specs = draw(st.lists(
        st.tuples(NAMES, st.sampled_from(sorted(DTYPES)), st.lists(st.integers(0, 5), max_size=3)),
        max_size=6, unique_by=lambda s: s[0]))
    fixed = []
    for name, dtype, shape in specs:
        n = 1
        for d in shape:
            n *= d
        if n * DTYPES[dtype] % 8:
            shape = shape + [4]  # 4 elements of 4 or 6 bits are whole bytes
            n *= 4
        fixed.append((name, dtype, shape, n * DTYPES[dtype] // 8))
    data_order = draw(st.permutations(range(len(fixed))))
    offsets, pos = {}, 0
    for i in data_order:
        offsets[i] = (pos, pos + fixed[i][3])
        pos += fixed[i][3]
    entries = [(name, ent(dtype, shape, *offsets[i])) for i, (name, dtype, shape, _) in enumerate(fixed)]
    metadata = draw(st.none() | st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3))
    if metadata is not None:
        entries.insert(draw(st.integers(0, len(entries))), ("__metadata__", metadata))
    text = json.dumps(dict(entries), ensure_ascii=draw(st.booleans()))
    text += " " * draw(st.integers(0, 7))
    data = bytes(i % 251 for i in range(pos))
    expected = {name: (dtype, shape, offsets[i]) for i, (name, dtype, shape, _) in enumerate(fixed)}
    return blob(text, data), expected, metadata


def _careful_verdict(text: str, n: int, size: int):
    try:
        return parse_careful(text, n, size, "fuzz.safetensors")
    except HeaderError as exc:
        return exc.code, str(exc)


def _check_paths_agree(data: bytes, verdict) -> None:
    """The careful path's verdict is the verdict: the fast accept either declines or returns
    exactly the careful path's header, and parse_header's answer, header or error, is the careful
    path's. `verdict` is parse_header's: a Header or (code, message)."""
    try:
        n = header_length(data[:SNIFF_LEN], len(data), "fuzz.safetensors")
    except HeaderError:
        return  # refused before any JSON: no path to compare
    body = data[N_LEN : N_LEN + n]
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        assert parse_fast(body, n, len(data), "fuzz.safetensors") is None
        return
    careful = _careful_verdict(text, n, len(data))
    assert verdict == careful
    fast = parse_fast(body, n, len(data), "fuzz.safetensors")
    if fast is not None:
        assert fast == careful
        CASES_RUN["fast"] += 1


def _check_any(data: bytes) -> str:
    """Parse through both entry points; return the code (or "ok"). Never anything but HeaderError."""
    source = MemorySource(data, "fuzz.safetensors")
    try:
        header = parse_header(data, len(data), "fuzz.safetensors")
    except HeaderError as exc:
        msg = str(exc)
        assert exc.code in ALL_CODES, exc.code
        assert msg.startswith("fuzz.safetensors: ") and "\n" not in msg
        with pytest.raises(HeaderError) as again:
            read_header(source)
        assert again.value.code == exc.code
        ref = reference(data)
        if ref is not None:
            assert exc.code in STRICTER_THAN_REFERENCE, (exc.code, msg)
        _check_paths_agree(data, (exc.code, msg))
        return exc.code
    _check_paths_agree(data, header)
    assert read_header(source) == header
    assert source.calls[0] == (0, 8) and sum(n for _, n in source.calls) == header.data_start
    ref = reference(data)
    assert ref is not None, "we accepted a file the reference rejects"
    assert ref == ours(header, data)
    assert header.data_start + sum(t.nbytes for t in header.tensors) == header.file_size
    return "ok"


@FUZZ
@given(valid_files())
def _fuzz_valid(case):
    data, expected, metadata = case
    header = parse_header(data, len(data), "fuzz.safetensors")
    assert header.metadata == metadata
    assert {t.name: (t.dtype, list(t.shape), (t.begin, t.end)) for t in header.tensors} == expected
    assert [t.begin for t in header.tensors] == sorted(t.begin for t in header.tensors)
    assert _check_any(data) == "ok"
    CASES_RUN["valid"] += 1


def test_fuzz_generated_valid_headers_round_trip():
    before, fast_before = CASES_RUN["valid"], CASES_RUN["fast"]
    _fuzz_valid()
    ran = CASES_RUN["valid"] - before
    fast = CASES_RUN["fast"] - fast_before
    print(f"generated valid headers: {ran} cases, taken by the fast accept: {fast}")
    assert ran > 0
    # The fast accept must take most valid headers, else its agreement is not being tested (where
    # msgspec is installed). Names with astral characters go careful under ensure_ascii.
    if header_fast.msgspec_installed():
        assert fast > ran // 2, fast


JSON_TOKENS = [b'"', b"{", b"}", b"[", b"]", b",", b":", b"-0", b"NaN", b"1e400", b'"\\ud800"', b" ",
               b"\x00", b"\xff", b"18446744073709551616", b"-1", b"null", b"true", b"\"F4\"", b"\"__metadata__\""]

MUTATION = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 2**16), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 2**16), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 2**16), st.binary(min_size=1, max_size=4)),
    st.tuples(st.just("token"), st.integers(0, 2**16), st.sampled_from(JSON_TOKENS)),
    st.tuples(st.just("delete"), st.integers(0, 2**16), st.integers(1, 8)),
    st.tuples(st.just("length"), st.integers(-3, 3) | st.integers(0, 2**64 - 1), st.just(0)),
)


def _mutate(data: bytes, op) -> bytes:
    kind, a, b = op
    if kind == "length":
        n = int.from_bytes(data[:8].ljust(8, b"\0"), "little")
        n = (n + a) % 2**64 if -3 <= a <= 3 else a
        return struct.pack("<Q", n) + data[8:]
    pos = a % (len(data) + 1)
    if kind == "flip" and data:
        pos %= len(data)
        return data[:pos] + bytes([data[pos] ^ b]) + data[pos + 1:]
    if kind == "truncate":
        return data[:pos]
    if kind in ("insert", "token"):
        return data[:pos] + b + data[pos:]
    if kind == "delete":
        return data[:pos] + data[pos + b:]
    return data


@settings(FUZZ, max_examples=1500)
@given(valid_files(), st.lists(MUTATION, min_size=1, max_size=4), st.booleans())
def _fuzz_mutated(case, ops, keep_length_right):
    data = case[0]
    if keep_length_right:
        # Mutate only the JSON text and fix the length field, to reach the deeper rules.
        n = int.from_bytes(data[:8], "little")
        text, rest = data[8 : 8 + n], data[8 + n :]
        for op in ops:
            if op[0] != "length":
                text = _mutate(text, op)
        data = blob(text, rest)
    else:
        for op in ops:
            data = _mutate(data, op)
    CASES_RUN["mutated:" + _check_any(data)] += 1


@pytest.mark.slow
def test_fuzz_mutated_files_parse_or_raise_header_error():
    before = sum(v for k, v in CASES_RUN.items() if k.startswith("mutated:"))
    _fuzz_mutated()
    ran = sum(v for k, v in CASES_RUN.items() if k.startswith("mutated:")) - before
    print(f"mutated files: {ran} cases, outcomes {dict(sorted((k[8:], v) for k, v in CASES_RUN.items() if k.startswith('mutated:')))}")
    assert ran > 0


JSON_LEAF = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6)
             | st.sampled_from(sorted(DTYPES)))
JSON_ANY = st.recursive(JSON_LEAF, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)
DIM = st.integers(0, 4) | st.integers(-2, 2**65) | JSON_LEAF
DTYPE_NAME = st.sampled_from(sorted(DTYPES))
SMALL = st.integers(0, 24)
# Mostly well-typed fields, so that the numeric rules (spans, tiling, sub-byte) get reached too.
ENTRY = st.one_of(
    st.fixed_dictionaries(
        {"dtype": st.one_of(DTYPE_NAME, DTYPE_NAME, DTYPE_NAME, JSON_ANY),
         "shape": st.one_of(st.lists(st.integers(0, 4), max_size=3), st.lists(st.integers(0, 4), max_size=3),
                            st.lists(DIM, max_size=3), JSON_ANY),
         "data_offsets": st.one_of(st.lists(SMALL, min_size=2, max_size=2), st.lists(SMALL, min_size=2, max_size=2),
                                   st.lists(SMALL | JSON_LEAF, max_size=3), JSON_ANY)},
        optional={"extra": JSON_ANY}),
    JSON_ANY,
)
METADATA = st.one_of(
    st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3),
    st.dictionaries(st.text(max_size=4), st.text(max_size=4) | JSON_LEAF, max_size=3),
    JSON_ANY,
)
HEADERS = st.tuples(st.dictionaries(NAMES, ENTRY, max_size=4), st.none() | METADATA).map(
    lambda pair: pair[0] if pair[1] is None else {"__metadata__": pair[1], **pair[0]})


def _plausible_data_size(header: dict) -> int:
    ends = [e["data_offsets"][1] for e in header.values()
            if isinstance(e, dict) and isinstance(e.get("data_offsets"), list) and len(e["data_offsets"]) == 2
            and type(e["data_offsets"][1]) is int and 0 <= e["data_offsets"][1] <= 64]
    return max(ends, default=0)


@settings(FUZZ, max_examples=800)
@given(HEADERS, st.integers(-2, 2))
def _fuzz_mistyped(header, data_delta):
    text = json.dumps(header, allow_nan=True)  # NaN/Infinity literals included on purpose
    data = blob(text, bytes(max(0, _plausible_data_size(header) + data_delta)))
    CASES_RUN["mistyped:" + _check_any(data)] += 1


@pytest.mark.slow
def test_fuzz_mistyped_headers_parse_or_raise_header_error():
    before = sum(v for k, v in CASES_RUN.items() if k.startswith("mistyped:"))
    _fuzz_mistyped()
    ran = sum(v for k, v in CASES_RUN.items() if k.startswith("mistyped:")) - before
    print(f"mistyped headers: {ran} cases, outcomes {dict(sorted((k[9:], v) for k, v in CASES_RUN.items() if k.startswith('mistyped:')))}")
    assert ran > 0


@settings(FUZZ, max_examples=400)
@given(valid_files(), st.data())
def _fuzz_renumbered(case, draw):
    """Valid JSON, valid types, wrong numbers: reaches the span, tiling and coverage rules."""
    data = case[0]
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    names = [k for k in header if k != "__metadata__"]
    for _ in range(draw.draw(st.integers(1, 3))):
        if not names:
            break
        entry = header[draw.draw(st.sampled_from(names))]
        field = draw.draw(st.sampled_from(["begin", "end", "dim", "dtype"]))
        delta = draw.draw(st.integers(-3, 3))
        if field in ("begin", "end"):
            i = 0 if field == "begin" else 1
            entry["data_offsets"][i] = max(0, entry["data_offsets"][i] + delta)
        elif field == "dim" and entry["shape"]:
            j = draw.draw(st.integers(0, len(entry["shape"]) - 1))
            entry["shape"][j] = max(0, entry["shape"][j] + delta)
        elif field == "dtype":
            entry["dtype"] = draw.draw(st.sampled_from(sorted(DTYPES)))
    rest = data[8 + n :]
    rest = rest[: max(0, len(rest) + draw.draw(st.integers(-2, 2)))] + bytes(max(0, draw.draw(st.integers(-2, 2))))
    CASES_RUN["renumbered:" + _check_any(blob(header, rest))] += 1


def test_fuzz_renumbered_headers_parse_or_raise_header_error():
    before = sum(v for k, v in CASES_RUN.items() if k.startswith("renumbered:"))
    _fuzz_renumbered()
    ran = sum(v for k, v in CASES_RUN.items() if k.startswith("renumbered:")) - before
    outcomes = {k[11:]: v for k, v in sorted(CASES_RUN.items()) if k.startswith("renumbered:")}
    print(f"renumbered headers: {ran} cases, outcomes {outcomes}")
    assert ran > 0


# Headers as json.dumps writes them, any order of entries and fields: whenever the fast accept
# takes one, the careful path accepts the same header and agrees on it.


DUMPED = {"n": 0, "fast": 0}
WHOLE = [d for d, bits in DTYPES.items() if bits % 8 == 0]


@st.composite
def dumped_headers(draw):
    n = draw(st.integers(0, 12))
    # BMP names: astral ones escape to \\ud83d-style pairs with ensure_ascii, which the fast path
    # leaves to the careful one (correct, just not what this test is for)
    bmp = st.characters(max_codepoint=0xFFFF, blacklist_categories=("Cs",))
    names = draw(st.lists(st.text(bmp, min_size=1, max_size=12).filter(lambda s: s != "__metadata__"),
                          min_size=n, max_size=n, unique=True))
    entries, offset = [], 0
    for name in names:
        dtype = draw(st.sampled_from(WHOLE))
        shape = draw(st.lists(st.integers(0, 5), max_size=3))
        size = DTYPES[dtype] // 8
        for d in shape:
            size *= d
        entries.append((name, {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}))
        offset += size
    rnd = random.Random(draw(st.integers(0, 2**32)))
    rnd.shuffle(entries)  # any order of entries and of the fields inside them is valid
    doc = {}
    if draw(st.booleans()):
        doc["__metadata__"] = draw(st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3))
    for name, e in entries:
        doc[name] = dict(rnd.sample(list(e.items()), 3)) if draw(st.booleans()) else e
    text = json.dumps(doc, ensure_ascii=draw(st.booleans()))
    return text, offset


@settings(max_examples=300, deadline=None)
@given(dumped_headers())
def _fuzz_dumped(case):
    text, data = case
    body = text.encode()
    size = N_LEN + len(body) + data
    DUMPED["n"] += 1
    fast = parse_fast(body, len(body), size, "f")
    careful = parse_careful(text, len(body), size, "f")
    if fast is not None:
        DUMPED["fast"] += 1
        assert fast == careful
    assert parse_header(len(body).to_bytes(8, "little") + body, size, "f") == careful


def test_fast_path_agrees_with_careful_path():
    DUMPED.update(n=0, fast=0)
    _fuzz_dumped()  # runs every example
    assert DUMPED["n"] >= 300 and DUMPED["fast"] > DUMPED["n"] * 3 // 4, DUMPED
