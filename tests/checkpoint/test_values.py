"""Reading tensor values at validated offsets, cross-checked against safetensors' own loaders; and
--verify's NaN/Inf scan of an fn's values, read in bounded chunks."""

from __future__ import annotations

import ast
import json
import math
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy as stnp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hccli.checkpoint.verify import checks as verify
from hccli.checkpoint.safetensors.header import parse_header, read_header
from hccli.checkpoint.opening import open_checkpoint
from hccli.checkpoint.source import LocalFile
from hccli.checkpoint.values import (
    READABLE_DTYPES,
    TensorReadError,
    read_tensor,
    read_tensor_bytes,
    tensor_stream,
)
from hccli.base.errors import HcError

from byte_sources import CountingSource, MemorySource  # noqa: E402
from ckpt_tools import read_entries, rewrite, shard_of, tiny  # noqa: E402
from conftest import run_hc_process, write_sparse_shard  # noqa: E402

NATIVE = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16, "F16": np.float16,
    "I32": np.int32, "U32": np.uint32, "F32": np.float32, "C64": np.complex64, "F64": np.float64,
    "I64": np.int64, "U64": np.uint64,
}
CASES_RUN = {"roundtrip": 0}


def _read_all(path):
    with LocalFile(path) as src:
        header = read_header(src)
        return header, {name: read_tensor(src, header, name) for name in header.names}


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    # Bitwise, so that -0.0 and NaN payloads count too.
    assert a.tobytes() == b.tobytes()


def test_native_dtypes_match_safetensors_numpy(tmp_path):
    rng = np.random.default_rng(1)
    tensors = {}
    for dtype, np_type in NATIVE.items():
        if np_type is np.bool_:
            values = rng.integers(0, 2, (3, 5)).astype(bool)
        elif np.issubdtype(np_type, np.integer):
            info = np.iinfo(np_type)
            values = rng.integers(info.min, info.max, (3, 5), dtype=np_type, endpoint=True)
        else:
            values = (rng.standard_normal((3, 5)) * 100).astype(np_type)
            if np_type is np.complex64:
                values = values + 1j * values[::-1]
            values.flat[:4] = [np.nan, np.inf, -np.inf, -0.0]
        tensors[f"t.{dtype}"] = values
        tensors[f"scalar.{dtype}"] = values.reshape(-1)[5:6].reshape(())
        tensors[f"empty.{dtype}"] = values[:0]
    path = tmp_path / "native.safetensors"
    stnp.save_file(tensors, str(path))
    expected = stnp.load_file(str(path))
    header, got = _read_all(path)
    assert set(got) == set(expected)
    for name, array in got.items():
        _same(array, expected[name])
        assert not array.flags.writeable
    assert header["t.F32"].dtype == "F32"


def test_hc_tensors_of_a_layer(tmp_path):
    """The shapes a V4 layer's hc tensors have (F32 [24, 4*D], [24], [3]), at a tiny D."""
    rng = np.random.default_rng(2)
    dim = 16
    tensors = {
        "layers.0.hc_attn_fn": rng.standard_normal((24, 4 * dim)).astype(np.float32),
        "layers.0.hc_attn_base": rng.standard_normal(24).astype(np.float32),
        "layers.0.hc_attn_scale": rng.standard_normal(3).astype(np.float32),
    }
    path = tmp_path / "hc.safetensors"
    stnp.save_file(tensors, str(path))
    _, got = _read_all(path)
    for name, values in tensors.items():
        _same(got[name], values)


def test_bf16_is_widened_exactly(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    specials = torch.tensor([0.0, -0.0, 1.0, -2.5, float("inf"), float("-inf"), float("nan"),
                             3.3895e38, 9.18e-41, 1e-45])
    bits = torch.arange(0, 2**16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)  # every pattern
    path = tmp_path / "bf16.safetensors"
    save_file({"specials": specials.to(torch.bfloat16), "every": bits.reshape(256, 256).contiguous()}, str(path))
    expected = load_file(str(path))
    _, got = _read_all(path)
    for name in ("specials", "every"):
        want = expected[name].float().numpy()
        assert got[name].dtype == np.float32 and got[name].shape == want.shape
        nan = np.isnan(want)
        assert (np.isnan(got[name]) == nan).all()
        assert got[name][~nan].view(np.uint32).tolist() == want[~nan].view(np.uint32).tolist()
        # Widening is a shift: the stored 16 bits are the top half of the float32.
        stored = expected[name].view(torch.int16).numpy().view(np.uint16)
        assert ((got[name].view(np.uint32) >> 16) == stored).all()


@pytest.mark.parametrize("dtype, torch_name", [
    ("F8_E4M3", "float8_e4m3fn"),
    ("F8_E5M2", "float8_e5m2"),
    ("F8_E8M0", "float8_e8m0fnu"),
    ("F8_E4M3FNUZ", "float8_e4m3fnuz"),
    ("F8_E5M2FNUZ", "float8_e5m2fnuz"),
])
def test_fp8_tables_match_torch_for_every_byte(dtype, torch_name, tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    torch_dtype = getattr(torch, torch_name, None)
    if torch_dtype is None:
        pytest.skip(f"torch has no {torch_name}")
    every = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch_dtype).reshape(16, 16)
    path = tmp_path / f"{dtype}.safetensors"
    save_file({"w": every}, str(path))
    header, got = _read_all(path)
    assert header["w"].dtype == dtype
    want = every.float().numpy()
    nan = np.isnan(want)
    assert (np.isnan(got["w"]) == nan).all()
    assert got["w"][~nan].view(np.uint32).tolist() == want[~nan].view(np.uint32).tolist()


def test_reads_only_the_tensors_bytes(tmp_path):
    path = tmp_path / "three.safetensors"
    stnp.save_file({"a": np.zeros(100, np.float32), "b": np.arange(7, dtype=np.int16),
                    "c": np.ones(50, np.float64)}, str(path))
    with LocalFile(path) as inner:
        header = read_header(inner)
        src = CountingSource(inner)
        values = read_tensor(src, header, "b")
    info = header["b"]
    assert src.calls == [(info.abs_begin, 14)]
    assert values.tolist() == list(range(7))


def test_small_tensor_after_a_huge_sparse_one(tmp_path):
    big = 5 * 2**30
    entries = {
        "embed.weight": {"dtype": "BF16", "shape": [big // 2], "data_offsets": [0, big]},
        "hc_head_scale": {"dtype": "F32", "shape": [1], "data_offsets": [big, big + 4]},
    }
    text = json.dumps(entries).encode()
    path = tmp_path / "sparse.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(8 + len(text) + big)
        f.seek(0, 2)
        f.write(struct.pack("<f", 0.75))
    with LocalFile(path) as inner:
        src = CountingSource(inner)
        header = read_header(src)
        values = read_tensor(src, header, "hc_head_scale")
    assert values.tolist() == [0.75]
    assert sum(n for _, n in src.calls) == 8 + len(text) + 4


def test_unknown_tensor(tmp_path):
    path = tmp_path / "one.safetensors"
    stnp.save_file({"a": np.zeros(2, np.float32)}, str(path))
    with LocalFile(path) as src:
        header = read_header(src)
        with pytest.raises(TensorReadError) as exc:
            read_tensor(src, header, "layers.0.hc_ffn_fn")
    assert exc.value.code == "no_such_tensor" and isinstance(exc.value, HcError) and exc.value.exit_code == 2
    assert str(exc.value) == f"{path}: no tensor named 'layers.0.hc_ffn_fn' in this file"


def test_sub_byte_dtypes_are_raw_bytes_only():
    text = json.dumps({"f4": {"dtype": "F4", "shape": [2, 4], "data_offsets": [0, 4]},
                       "f6": {"dtype": "F6_E2M3", "shape": [4], "data_offsets": [4, 7]}}).encode()
    data = struct.pack("<Q", len(text)) + text + b"\x12\x34\x56\x78\x9a\xbc\xde"
    header = parse_header(data, len(data), "sub.safetensors")
    src = MemorySource(data, "sub.safetensors")
    assert read_tensor_bytes(src, header, "f4") == b"\x12\x34\x56\x78"
    assert read_tensor_bytes(src, header, "f6") == b"\x9a\xbc\xde"
    for name, dtype in (("f4", "F4"), ("f6", "F6_E2M3")):
        with pytest.raises(TensorReadError) as exc:
            read_tensor(src, header, name)
        assert exc.value.code == "unsupported_dtype"
        assert str(exc.value).startswith(f"sub.safetensors: tensor '{name}' is {dtype}")
    assert "F4" not in READABLE_DTYPES and "BF16" in READABLE_DTYPES


def _first_chunk(src, header, name):
    stream = tensor_stream(lambda: src, header, name)
    return next(stream.chunks(src, 1 << 20))


@pytest.mark.parametrize("read", [read_tensor, _first_chunk], ids=["whole", "chunks"])
def test_file_changed_since_the_header_was_read(tmp_path, read):
    path = tmp_path / "grows.safetensors"
    stnp.save_file({"a": np.zeros(2, np.float32)}, str(path))
    with LocalFile(path) as src:
        header = read_header(src)
    with open(path, "ab") as f:
        f.write(b"more")
    with LocalFile(path) as src, pytest.raises(TensorReadError) as exc:
        read(src, header, "a")
    assert exc.value.code == "file_changed" and str(path) in str(exc.value)


@pytest.mark.parametrize("dtype, step", [("F32", 3), ("F32", 5), ("BF16", 3), ("F64", 1), ("F8_E4M3", 7)])
@pytest.mark.parametrize("start, stop", [(0, None), (5, 29)])
def test_chunks_are_whole_elements_and_add_up_to_the_tensor(tmp_path, dtype, step, start, stop):
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, 37 * 8, dtype=np.uint8).tobytes()
    item = {"F32": 4, "BF16": 2, "F64": 8, "F8_E4M3": 1}[dtype]
    n = len(raw) // item
    text = json.dumps({"w": {"dtype": dtype, "shape": [n], "data_offsets": [0, len(raw)]}}).encode()
    data = struct.pack("<Q", len(text)) + text + raw
    src = MemorySource(data)
    header = read_header(src)
    src.calls.clear()
    stream = tensor_stream(lambda: src, header, "w")
    assert (stream.unit_values, stream.unit_bytes, stream.elements) == (1, item, n)
    # each chunk decoded before the next read overwrites the one buffer
    chunks = [stream.decode(c) for c in stream.chunks(src, step, start, stop)]
    whole = read_tensor(src, header, "w").reshape(-1)[start:stop]
    _same(np.concatenate(chunks), whole.astype(np.float64))
    assert all(c.dtype == np.float64 for c in chunks)
    end = n if stop is None else stop
    begin = header["w"].abs_begin
    want = [(begin + i * item, min(step, end - i) * item) for i in range(start, end, step)]
    assert src.calls[:len(chunks)] == want  # exactly the bytes of the values asked for, a step at a time


def test_chunks_are_views_of_one_buffer():
    raw = bytes(range(40))
    text = json.dumps({"w": {"dtype": "U8", "shape": [40], "data_offsets": [0, 40]}}).encode()
    data = struct.pack("<Q", len(text)) + text + raw
    src = MemorySource(data)
    stream = tensor_stream(lambda: src, read_header(src), "w")
    seen = [(c.obj, bytes(c)) for c in stream.chunks(src, 16)]
    assert [b for _, b in seen] == [raw[:16], raw[16:32], raw[32:]]
    assert len({id(o) for o, _ in seen}) == 1 and len(seen[0][0]) == 16  # one buffer, the size of one step


def test_a_tensor_that_fits_one_chunk_is_one_read(tmp_path):
    path = tmp_path / "three.safetensors"
    stnp.save_file({"a": np.zeros(100, np.float32), "b": np.arange(7, dtype=np.int16)}, str(path))
    with LocalFile(path) as inner:
        header = read_header(inner)
        src = CountingSource(inner)
        stream = tensor_stream(lambda: src, header, "b")
        (values,) = [stream.decode(c) for c in stream.chunks(src, 1 << 20)]
    assert src.calls == [(header["b"].abs_begin, 14)] and values.tolist() == list(range(7))


def test_chunks_check_the_dtype_first():
    text = json.dumps({"f4": {"dtype": "F4", "shape": [2, 4], "data_offsets": [0, 4]}}).encode()
    data = struct.pack("<Q", len(text)) + text + b"\x12\x34\x56\x78"
    with pytest.raises(TensorReadError) as exc:
        tensor_stream(lambda: MemorySource(data), parse_header(data, len(data), "m"), "f4")
    assert exc.value.code == "unsupported_dtype"


def test_read_into_fills_the_buffer_and_says_a_short_file(tmp_path):
    from hccli.base.bounded import SourceError

    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(256)) * 4)
    with LocalFile(path) as src:
        buf = memoryview(bytearray(300))
        src.read_into(700, buf[:200])
        assert bytes(buf[:200]) == (bytes(range(256)) * 4)[700:900] and bytes(buf[200:]) == bytes(100)
        with pytest.raises(SourceError) as exc:
            src.read_into(900, buf)  # past the end the file had when opened
        assert exc.value.code == "short_read"
        with open(path, "r+b") as f:
            f.truncate(800)  # shrinks after it was opened
        with pytest.raises(SourceError) as exc:
            src.read_into(700, buf[:200])
        assert exc.value.code == "short_read" and "file ended after 100" in str(exc.value)


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(
    st.text(min_size=1, max_size=8),
    st.sampled_from(sorted(NATIVE)).flatmap(
        lambda d: hnp.arrays(NATIVE[d], hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))),
    min_size=1, max_size=4))
def _roundtrip(tensors):
    data = stnp.save(tensors)
    expected = stnp.load(data)
    src = MemorySource(data)
    header = read_header(src)
    for name, array in expected.items():
        _same(read_tensor(src, header, name), array)
    CASES_RUN["roundtrip"] += 1


def test_random_arrays_round_trip():
    before = CASES_RUN["roundtrip"]
    _roundtrip()
    print(f"value round trips: {CASES_RUN['roundtrip'] - before} cases")
    assert CASES_RUN["roundtrip"] - before > 0


def test_readers_never_print_nor_import_torch():
    import hccli.checkpoint as pkg

    for module in ("safetensors/header", "source", "values"):
        tree = ast.parse((Path(pkg.__file__).parent / f"{module}.py").read_text())
        calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert "print" not in calls, module
    code = ("import sys, hccli.checkpoint.safetensors.header, hccli.checkpoint.source, hccli.checkpoint.values; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_nonfinite_count_of_float32_bytes_is_numpys():
    from hccli.checkpoint.values import count_nonfinite_f32

    rng = np.random.default_rng(7)
    special = np.array([np.nan, np.inf, -np.inf, np.finfo(np.float32).max, -np.finfo(np.float32).max,
                        np.finfo(np.float32).tiny, 0.0, -0.0, 2.0**127, 1.0], dtype="<f4")
    for values in (special, rng.standard_normal(1000).astype("<f4"),
                   np.frombuffer(rng.bytes(4 * 100_000), "<f4"),  # every bit pattern, NaNs of every payload
                   np.zeros(7, "<f4"), np.zeros(0, "<f4")):
        assert count_nonfinite_f32(values.tobytes()) == values.size - np.count_nonzero(np.isfinite(values))


# --- --verify's NaN/Inf scan of an fn's values, in bounded chunks


@pytest.fixture
def nan_fn(tmp_path):
    ck = tiny(tmp_path / "t")
    name = "layers.1.hc_ffn_fn"
    (_, dtype, shape, data) = next(e for e in read_entries(shard_of(ck, name)) if e[0] == name)
    bad = data[:40] + struct.pack("<f", math.inf) + data[44:]
    rewrite(shard_of(ck, name), replace={name: (dtype, shape, bad)})
    return ck


def test_the_scan_finds_an_inf_in_an_fn(nan_fn):
    found = verify.verify(open_checkpoint(nan_fn))
    assert [f.code for f in found] == ["hc_nonfinite"] and "layers.1.hc_ffn_fn' holds 1 NaN/Inf" in found[0].message


def test_a_large_fn_is_scanned_in_chunks_by_the_command(tmp_path):
    # 40 MB of fn (five 8 MiB chunks) with one NaN near its end, through `hc` as users run it
    n, cols = 24, 440_000
    f = write_sparse_shard(tmp_path / "m.safetensors",
                           [("layers.0.hc_attn_fn", "F32", (n, cols)), ("layers.0.hc_attn_base", "F32", (n,)),
                            ("layers.0.hc_attn_scale", "F32", (3,))],
                           [("layers.0.hc_attn_fn", n * cols * 4 - 8, struct.pack("<f", math.nan))])
    proc, _, _ = run_hc_process("inspect", f, "--verify", "--json")
    assert proc.returncode == 1, proc.stderr
    found = [x for x in json.loads(proc.stdout)["findings"] if x["code"] == "hc_nonfinite"]
    assert len(found) == 1 and "1 NaN/Inf" in found[0]["message"]
