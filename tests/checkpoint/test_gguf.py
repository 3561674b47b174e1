"""GGUF files through the checkpoint core (checkpoint/gguf/store.py over the store,
hc.py for sites and values), the one GGUF reader. The fixtures are written by the
gguf package's own writer (GGUFWriter) in llama.cpp's deepseek4 naming, with the
HC tensors laid out as its converter leaves them (no transpose; F32 unless the
file type pushes a 2-D tensor to F16 or a quant)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import numpy as np
import pytest
from conftest import run_hc
from gguf_fixtures import CFG, F16_SITE, Q8_SITE, hc_values, write_gguf

from hccli.names import dialects as D
from hccli.checkpoint import hc as H
from hccli.checkpoint.opening import open_checkpoint
from hccli.base.errors import HcError

gguf = pytest.importorskip("gguf")


@pytest.fixture
def one_file(tmp_path):
    values = hc_values()
    p = tmp_path / "tiny-v4.gguf"
    write_gguf(p, values)
    return p, values


def _parts(ckpt) -> dict[str, tuple]:
    """canonical HC name -> (site, part)."""
    return {s.tensor_name(p): (s, p) for s in ckpt.hc_sites for p in s.parts}


def test_records_metadata_and_names(one_file):
    path, values = one_file
    ckpt = open_checkpoint(path)
    assert ckpt.dialect.dialect == D.GGUF and H.gguf_architecture(ckpt) == "deepseek4"
    s = H.gguf_settings(ckpt)
    assert s["block_count"] == CFG.n_layers and s["hyper_connection.count"] == CFG.hc_mult
    assert s["attention.compress_ratios"] == list(CFG.compress_ratios[:CFG.n_layers])
    parts = _parts(ckpt)
    assert set(parts) == set(values)  # every HC site, head mix included
    for canonical, (site, part) in parts.items():
        info = site.parts[part][1]
        assert info.shape == values[canonical].shape  # canonical order, not ne
        assert info.name == D.spell_hc(D.parse_hc_name(canonical), D.GGUF)
    types = {n: site.parts[p][1].dtype for n, (site, p) in parts.items()}
    assert types[F16_SITE] == "F16" and types[Q8_SITE] == "Q8_0" and types["layers.2.hc_attn_fn"] == "F32"
    site, _ = parts["layers.0.hc_attn_base"]
    shard, info = site.parts["base"]
    assert info.abs_begin > 0 and info.nbytes == 24 * 4 and shard.path == path


def test_values_base_scale_exact_fn_within_storage_rounding(one_file):
    path, values = one_file
    ckpt = open_checkpoint(path)
    for canonical, (site, part) in _parts(ckpt).items():
        got, want = H.read_part(ckpt, site, part), values[canonical]
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
        ckpt = open_checkpoint(where)
        assert [s.path for s in ckpt.shards] == parts and ckpt.missing == []
        found = _parts(ckpt)
        assert set(found) == set(values)
        assert len({found[n][0].parts[found[n][1]][0].file for n in found}) == len(parts)
        assert np.array_equal(H.read_part(ckpt, *found["hc_head_scale"]), values["hc_head_scale"])
    parts[1].unlink()
    assert open_checkpoint(parts[0]).missing == [parts[1].name]  # inspect --verify reports it
    r = run_hc("diff", parts[0], parts[0])  # diff compares whole models only
    assert r.exit_code == 2 and parts[1].name in r.stderr and "missing" in r.stderr


def test_decoding_is_bounded(one_file, monkeypatch):
    path, _ = one_file
    ckpt = open_checkpoint(path)
    parts = _parts(ckpt)
    monkeypatch.setattr(H, "MAX_HC_ELEMENTS", 1000)
    with pytest.raises(HcError, match="elements"):
        H.read_part(ckpt, *parts[F16_SITE])
    site, _ = parts["layers.0.hc_attn_base"]
    with pytest.raises(HcError, match="not in the checkpoint"):
        H.read_part(ckpt, site, "nope")


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
        open_checkpoint(p)
    assert str(p) in str(e.value) and message in str(e.value)
    r = run_hc("diff", p, p)
    assert r.exit_code == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_truncated_data_is_refused(one_file, tmp_path):
    path, _ = one_file
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:-4096])
    with pytest.raises(HcError, match="cut.gguf"):
        open_checkpoint(cut)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_non_regular_file_is_refused(tmp_path):
    p = tmp_path / "pipe.gguf"
    os.mkfifo(p)
    with pytest.raises(HcError, match="not a regular file"):
        open_checkpoint(p)


def test_folder_with_two_models_is_ambiguous(tmp_path):
    values = hc_values()
    write_gguf(tmp_path / "a.gguf", values)
    write_gguf(tmp_path / "b.gguf", values)
    with pytest.raises(HcError, match="expected one .gguf file"):
        open_checkpoint(tmp_path)


def test_gguf_is_imported_only_when_a_gguf_is_read():
    code = ("import sys, hccli.checkpoint.gguf.prescan, hccli.checkpoint.gguf.store, hccli.checkpoint.view, hccli.diffing.diff, "
            "hccli.names.dialects, hccli.model.config.hf; print('gguf' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "False"


def test_header_size_is_capped(one_file, monkeypatch):
    from hccli.checkpoint.gguf import store as gguf_store

    path, _ = one_file
    monkeypatch.setattr(gguf_store, "MAX_HEADER_BYTES", 64)
    with pytest.raises(HcError, match="header larger than 64 bytes"):
        open_checkpoint(path)


def test_run_kernel_takes_iterations_and_eps_from_the_gguf_metadata(tmp_path):
    pytest.importorskip("torch")
    base = np.zeros(24, np.float32)
    base[8:] = np.random.default_rng(3).standard_normal(16)  # a comb far from doubly stochastic
    fn = np.random.default_rng(4).standard_normal((24, 4 * 8)).astype(np.float32)
    docs = {}
    for iters, eps in ((3, 0.25), (None, None)):
        path = tmp_path / f"k{iters}.gguf"
        w = gguf.GGUFWriter(path, "deepseek4")
        if iters is not None:
            w.add_uint32("deepseek4.hyper_connection.sinkhorn_iterations", iters)
            w.add_float32("deepseek4.hyper_connection.epsilon", eps)
        for part, x in (("fn", fn), ("base", base), ("scale", np.ones(3, np.float32))):
            w.add_tensor(f"blk.0.hc_attn_{part}.weight", x)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        r = run_hc("run-kernel", "--checkpoint", path, "--layer", 0, "--impl", "torch", "--json")
        assert r.exit_code == 0, r.stderr
        docs[iters] = r.json()
    p = docs[3]["params"]
    assert p["sinkhorn_iters"] == 3 and p["eps"] == 0.25 and "GGUF metadata (3 iterations, eps 0.25)" in p["origin"]
    d = docs[None]["params"]  # keys absent: the defaults, said so
    assert (d["sinkhorn_iters"], d["eps"]) == (20, 1e-6) and "iterations (reference default)" in d["origin"]
    assert docs[3]["comb"] != docs[None]["comb"]  # the settings reached the op
