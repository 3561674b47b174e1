"""GGUF files read through the gguf package's reader. The fixtures are written by
the gguf package's own writer (GGUFWriter) in llama.cpp's deepseek4 naming, with
the HC tensors laid out as its converter leaves them (no transpose; F32 unless
the file type pushes a 2-D tensor to F16 or a quant)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import numpy as np
import pytest
from gguf_fixtures import CFG, F16_SITE, Q8_SITE, hc_values, write_gguf

from hccli import dialects as D
from hccli.checkpoint.gguf_file import open_gguf, split_parts
from hccli.errors import HcError

gguf = pytest.importorskip("gguf")


@pytest.fixture
def one_file(tmp_path):
    values = hc_values()
    p = tmp_path / "tiny-v4.gguf"
    write_gguf(p, values)
    return p, values


def test_records_metadata_and_names(one_file):
    path, values = one_file
    with open_gguf(path) as g:
        assert g.architecture == "deepseek4"
        s = g.settings()
        assert s["block_count"] == CFG.n_layers and s["hyper_connection.count"] == CFG.hc_mult
        assert s["attention.compress_ratios"] == list(CFG.compress_ratios[:CFG.n_layers])
        hc = D.canonical_hc_names((t.name for t in g.tensors), D.GGUF)
        assert set(hc.values()) == set(values)  # every HC site, head mix included
        by = g.by_name()
        for name, canonical in hc.items():
            t = by[name]
            assert t.shape == values[canonical].shape  # canonical order, not ne
            assert t.ne == values[canonical].shape[::-1]
        types = {hc[n]: by[n].ggml_type for n in hc}
        assert types[F16_SITE] == "F16" and types[Q8_SITE] == "Q8_0" and types["layers.2.hc_attn_fn"] == "F32"
        t = by["blk.0.hc_attn_base.weight"]
        assert t.offset > 0 and t.nbytes == 24 * 4 and t.file == str(path)


def test_values_base_scale_exact_fn_within_storage_rounding(one_file):
    path, values = one_file
    with open_gguf(path) as g:
        for name, canonical in D.canonical_hc_names((t.name for t in g.tensors), D.GGUF).items():
            got, want = g.dequantize(name), values[canonical]
            assert got.dtype == np.float32 and got.shape == want.shape
            if canonical == F16_SITE:
                assert np.array_equal(got, want.astype(np.float16).astype(np.float32))
                assert not np.array_equal(got, want)
            elif canonical == Q8_SITE:
                blocks, gblocks = want.reshape(-1, 32), got.reshape(-1, 32)
                step = np.abs(blocks).max(axis=1, keepdims=True) / 127  # one Q8_0 level per block
                err = np.abs(gblocks - blocks)
                assert (err <= 0.6 * step).all() and err.max() > 0
            else:
                assert np.array_equal(got, want), canonical  # F32: bit-exact, base and scale included


def test_split_set_by_folder_or_first_part(tmp_path):
    values = hc_values(1)
    write_gguf(tmp_path / "m.gguf", values, split_max_tensors=10)
    parts = sorted(tmp_path.glob("m-*-of-*.gguf"))
    assert len(parts) > 2
    for where in (tmp_path, parts[0]):
        assert split_parts(where) == parts
        with open_gguf(where) as g:
            assert len({t.part for t in g.tensors}) == len(parts)
            assert set(D.canonical_hc_names((t.name for t in g.tensors), D.GGUF).values()) == set(values)
            assert np.array_equal(g.dequantize("output_hc_scale.weight"), values["hc_head_scale"])
    parts[1].unlink()
    with pytest.raises(HcError, match="missing part 2"):
        open_gguf(parts[0])


def test_dequantize_is_bounded(one_file):
    path, _ = one_file
    with open_gguf(path) as g:
        with pytest.raises(HcError, match="elements"):
            g.dequantize("blk.0.hc_attn_fn.weight", max_elements=1000)
        with pytest.raises(HcError, match="no tensor"):
            g.dequantize("blk.99.hc_attn_fn.weight")


def _header(n_tensors: int, kvs: bytes, n_kv: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + kvs


def _kv_string_array(key: bytes, count: int) -> bytes:
    return struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 8, count)


@pytest.mark.parametrize("make, message", [
    (lambda p: p.write_bytes(b"PK\x03\x04" + bytes(100)), "no GGUF magic"),
    (lambda p: p.write_bytes(_header(1 << 40, b"", 0)), "tensors"),
    (lambda p: p.write_bytes(_header(0, _kv_string_array(b"tokenizer.ggml.tokens", 1 << 40), 1)), "array of"),
    (lambda p: p.write_bytes(_header(0, _kv_string_array(b"a", 3), 1) + struct.pack("<Q", 1 << 40)), "string of"),
    (lambda p: p.write_bytes(_header(0, b"", 2)), "past the end"),
    (lambda p: p.write_bytes(struct.pack("<4sI", b"GGUF", 99) + bytes(16)), "version 99"),
])
def test_hostile_headers_end_in_one_error(tmp_path, make, message):
    p = tmp_path / "bad.gguf"
    make(p)
    with pytest.raises(HcError) as e:
        open_gguf(p)
    assert str(p) in str(e.value) and message in str(e.value)


def test_truncated_data_is_refused(one_file, tmp_path):
    path, _ = one_file
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:-4096])
    with pytest.raises(HcError, match="cut.gguf"):
        open_gguf(cut)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_non_regular_file_is_refused(tmp_path):
    p = tmp_path / "pipe.gguf"
    os.mkfifo(p)
    with pytest.raises(HcError, match="not a regular file"):
        open_gguf(p)


def test_folder_with_two_models_is_ambiguous(tmp_path):
    values = hc_values()
    write_gguf(tmp_path / "a.gguf", values)
    write_gguf(tmp_path / "b.gguf", values)
    with pytest.raises(HcError, match="expected one .gguf file"):
        open_gguf(tmp_path)


def test_gguf_is_imported_only_when_a_gguf_is_read():
    code = "import sys, hccli.checkpoint.gguf_file, hccli.dialects, hccli.config_hf; print('gguf' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "False"


def test_header_size_is_capped(one_file, monkeypatch):
    from hccli.checkpoint import gguf_file

    path, _ = one_file
    monkeypatch.setattr(gguf_file, "MAX_HEADER_BYTES", 64)
    with pytest.raises(HcError, match="header larger than 64 bytes"):
        open_gguf(path)
