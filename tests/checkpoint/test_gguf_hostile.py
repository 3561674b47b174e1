"""Hostile GGUFs (issue #21): a header's metadata walked in bounded memory, its model
settings held to a config's bounds with one error in every command, HC sites and findings
bounded, split sets read as one model (locally and over the hub), and every type the gguf
package dequantises (IQ4_NL...) read. The files are made in tmp_path by GGUFWriter and,
where it would refuse, by struct."""

from __future__ import annotations

import os
import shutil
import struct
import tracemalloc

import numpy as np
import pytest
from conftest import run_hc, run_hc_process
from gguf_fixtures import CFG, hc_values, kv_u32, struct_gguf, write_gguf

from hccli.names import dialects as D
from hccli.checkpoint import hc as H
from hccli.checkpoint.opening import open_checkpoint
from hccli.base.errors import HcError

gguf = pytest.importorskip("gguf")


def _site(layer: int, hc: int = 1, site: str = "attn", fn_cols: int | None = None) -> dict:
    """One site's tensors by GGUF name (fn only when fn_cols is given)."""
    w = (2 + hc) * hc
    out = {f"blk.{layer}.hc_{site}_base.weight": np.linspace(-1, 1, w, dtype=np.float32),
           f"blk.{layer}.hc_{site}_scale.weight": np.ones(3, np.float32)}
    if fn_cols is not None:
        out[f"blk.{layer}.hc_{site}_fn.weight"] = np.zeros((w, fn_cols), np.float32)
    return out


def _writer_gguf(path, tensors: dict, **u32) -> str:
    """GGUFWriter's deepseek4 file of `tensors` (GGUF names), with `deepseek4.KEY` u32 metadata."""
    w = gguf.GGUFWriter(path, "deepseek4")
    for key, value in u32.items():
        w.add_uint32(f"deepseek4.{key.replace('__', '.')}", value)
    for name, x in tensors.items():
        w.add_tensor(name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _one_error(r, *words) -> str:
    assert r.exit_code == 2, (r.exit_code, r.stderr, r.stdout[-500:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# --- metadata: walked, never held whole --------------------------------------------------------

def _big_metadata(path, n_ints: int = 16 << 20, n_strings: int = 400_000) -> None:
    """A header holding a UINT32 array of n_ints (64 MiB) and n_strings strings of 24 bytes (a
    tokenizer's shapes), then one HC site."""
    strings = (struct.pack("<Q", 24) + b"t" * 24) * n_strings
    kvs = [b"".join([struct.pack("<Q", 25), b"tokenizer.ggml.token_type", struct.pack("<IIQ", 9, 4, n_ints),
                     bytes(4 * n_ints)]),
           b"".join([struct.pack("<Q", 21), b"tokenizer.ggml.tokens", struct.pack("<IIQ", 9, 8, n_strings), strings]),
           kv_u32("deepseek4.block_count", 1)]
    tensors = [(n, x.shape[::-1], 0, x.tobytes()) for n, x in _site(0).items()]
    struct_gguf(path, tensors, kvs)


def test_metadata_arrays_are_passed_over_in_bounded_memory(tmp_path):
    from hccli.checkpoint.gguf.store import read_gguf_header
    from hccli.checkpoint.source import LocalFile

    p = tmp_path / "big.gguf"
    _big_metadata(p)
    tracemalloc.start()
    try:
        with LocalFile(p) as src:
            h = read_gguf_header(src)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert p.stat().st_size > 70 << 20 and peak < 40 << 20, peak  # a window, never the header whole
    assert h.kv["tokenizer.ggml.token_type"] == {"array_of": 16 << 20, "type": "UINT32"}
    assert h.kv["tokenizer.ggml.tokens"] == {"array_of": 400_000, "type": "STRING"}
    assert h.kv["deepseek4.block_count"] == 1 and h.architecture == "deepseek4"
    assert [t.name for t in h.tensors] == list(_site(0)) and h.tensors[1].abs_begin % 32 == 0


def test_a_small_window_reads_what_gguf_reader_reads(tmp_path, monkeypatch):
    """Windows of 16 to 64 bytes: every string, array and tensor record runs across their ends."""
    from hccli.checkpoint.gguf.prescan import HeaderScan
    from hccli.checkpoint.gguf.store import read_gguf_header
    from hccli.checkpoint.source import LocalFile

    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(path, "deepseek4")
    w.add_array("tokenizer.ggml.tokens", ["", "a", "tok" * 40, "\u00e9t\u00e9"] * 50)
    w.add_array("deepseek4.attention.compress_ratios", [0, 4, 128])
    w.add_string("tokenizer.chat_template", "x" * 300)
    for name, x in (_site(0, 4, fn_cols=32) | _site(1, 4, "ffn", fn_cols=32)).items():
        w.add_tensor(name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    monkeypatch.setattr(HeaderScan, "FIRST", 16)
    monkeypatch.setattr(HeaderScan, "MAX_READ", 64)
    with LocalFile(path) as src:
        h = read_gguf_header(src)
    r = gguf.GGUFReader(path, "r")
    want = {t.name: (int(t.data_offset), int(t.n_bytes)) for t in r.tensors}
    r.data._mmap.close()
    assert {t.name: (t.abs_begin, t.nbytes) for t in h.tensors} == want
    assert h.kv["tokenizer.ggml.tokens"] == {"array_of": 200, "type": "STRING"}
    assert h.kv["deepseek4.attention.compress_ratios"] == [0, 4, 128] and h.kv["tokenizer.chat_template"] == "x" * 300


def test_metadata_arrays_are_not_fetched_over_the_hub(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    from hub_server import Hub

    repo = tmp_path / "repo"
    repo.mkdir()
    _big_metadata(repo / "m.gguf")
    with Hub({"org/g": repo}) as h:
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        monkeypatch.setenv("HC_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        r = run_hc("inspect", "hf://org/g", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert len(doc["hc"]) == 1 and doc["gguf"]["settings"]["block_count"] == 1
    # the 64 MiB array is skipped by its length, the strings walked (~13 MB): never the whole header
    assert doc["transferred_bytes"] < 24 << 20, doc["transferred_bytes"]


# --- model settings: a config's bounds, one error in every command ------------------------------

def _every_command(path):
    return [run_hc("inspect", path, "--json"), run_hc("inspect", path, "--verify", "--json"),
            run_hc("run-kernel", "--checkpoint", path, "--layers", 0, "--impl", "torch", "--json"),
            run_hc("diff", path, path)]


@pytest.mark.parametrize("iters, bound", [(0, ">= 1"), (1001, "at most 1,000"), (5000, "at most 1,000"),
                                          (10_001, "at most 1,000")])
def test_sinkhorn_iterations_out_of_range_is_one_error_everywhere(tmp_path, iters, bound):
    pytest.importorskip("torch")
    path = _writer_gguf(tmp_path / "m.gguf", _site(0, 4, fn_cols=4 * 8), block_count=1, embedding_length=8,
                        hyper_connection__count=4, hyper_connection__sinkhorn_iterations=iters)
    lines = {_one_error(r, str(path), "'deepseek4.hyper_connection.sinkhorn_iterations'", bound, str(iters))
             for r in _every_command(path)}
    assert len(lines) == 1, lines  # the same line from inspect, --verify, run-kernel and diff


def test_block_count_is_held_to_the_layer_bound(tmp_path):
    pytest.importorskip("torch")
    path = _writer_gguf(tmp_path / "m.gguf", _site(0, 4, fn_cols=4 * 8), block_count=5000)
    lines = {_one_error(r, str(path), "'deepseek4.block_count'", "at most 1,024") for r in _every_command(path)}
    assert len(lines) == 1, lines


# --- sites and findings: bounded -----------------------------------------------------------------

def test_hc_sites_past_the_bound_are_refused(tmp_path):
    from hccli.model.config.bounds import MAX_LAYERS, MAX_STAGES

    bound = 2 * MAX_LAYERS + 3 * MAX_STAGES + 1  # two a layer, three a stage, the head mix
    tensors = {}
    for layer in range(bound // 2 + 1):  # two sites a layer: one past the bound
        tensors.update(_site(layer) | _site(layer, site="ffn"))
    path = _writer_gguf(tmp_path / "m.gguf", tensors)
    _one_error(run_hc("inspect", path, "--json"), str(path), f"more than {bound:,} HC sites")
    assert bound == H.MAX_HC_SITES


def test_findings_of_one_code_are_capped_with_a_count(tmp_path):
    from hccli.checkpoint.verify.findings import MAX_FINDINGS_PER_CODE

    path = _writer_gguf(tmp_path / "m.gguf", _site(0, fn_cols=1) | _site(0, site="ffn", fn_cols=1), block_count=1024)
    r = run_hc("inspect", path, "--verify", "--json")
    assert r.exit_code == 1, r.stderr
    missing = [f for f in r.json()["findings"] if f["code"] == "hc_missing_site"]
    implied = 2 * 1024 + 1 - 2  # attn and ffn of every block and the head mix; layer 0's two are there
    assert len(missing) == MAX_FINDINGS_PER_CODE + 1 and missing[-1]["severity"] == "error"
    assert f"{implied - MAX_FINDINGS_PER_CODE:,} more hc_missing_site findings" in missing[-1]["message"]
    shown = run_hc("inspect", path, "--verify").stdout
    assert f"{implied:,} errors" in shown and f"--json lists the first {MAX_FINDINGS_PER_CODE:,}" in shown


def test_a_split_set_past_the_tensor_bound_is_refused_before_its_headers(tmp_path, monkeypatch):
    from hccli.checkpoint.gguf import store as gguf_store

    values = hc_values(2)
    write_gguf(tmp_path / "m.gguf", values, split_max_tensors=10)
    parts = sorted(tmp_path.glob("m-*-of-*.gguf"))
    monkeypatch.setattr(gguf_store, "MAX_TENSORS", 12)  # more than any one part holds, less than all
    with pytest.raises(HcError, match=f"{len(parts)} parts holding {len(values) + 1:,} tensors in all"):
        open_checkpoint(parts[0])


# --- split sets: one model ----------------------------------------------------------------------

@pytest.fixture
def split_set(tmp_path):
    write_gguf(tmp_path / "m.gguf", hc_values(1), split_max_tensors=10)
    parts = sorted(tmp_path.glob("m-*-of-*.gguf"))
    assert len(parts) > 2
    return parts


def _kernel(path, *extra):
    return run_hc("run-kernel", "--checkpoint", path, "--layers", 0, "--impl", "torch", "--json", *extra)


def test_a_missing_part_warns_in_inspect_and_stops_run_kernel(split_set):
    pytest.importorskip("torch")
    first, gone = split_set[0], split_set[1]
    assert _kernel(first).exit_code == 0
    gone.unlink()
    r = run_hc("inspect", first, "--json")
    assert r.exit_code == 0 and "warning" in r.stderr and gone.name in r.stderr and "missing" in r.stderr
    v = run_hc("inspect", first, "--verify", "--json")
    assert v.exit_code == 1 and any(f["code"] == "missing_shard" and gone.name in f["message"]
                                    for f in v.json()["findings"])
    _one_error(_kernel(first), gone.name, "missing")
    _one_error(run_hc("diff", first, first), gone.name, "missing")
    _one_error(run_hc("run-site", first, "--tokens", 2), gone.name, "missing")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_part_is_refused_by_name_without_waiting(split_set):
    pytest.importorskip("torch")
    first, fifo = split_set[0], split_set[1]
    fifo.unlink()
    os.mkfifo(fifo)
    proc, seconds, _ = run_hc_process("inspect", first, "--json", timeout=120)
    assert proc.returncode == 0 and fifo.name in proc.stderr and "not a regular file" in proc.stderr
    proc, seconds, _ = run_hc_process("run-kernel", "--checkpoint", first, "--layers", 0, "--impl", "torch",
                                      timeout=120)
    assert proc.returncode == 2 and fifo.name in proc.stderr and "expected a .gguf file" in proc.stderr


def _two_parts_sharing(tmp_path, shared: str = "blk.0.hc_attn_base.weight"):
    """A split set of two GGUFWriter files, both holding `shared`."""
    by_gguf = {D.spell_hc(D.parse_hc_name(k), D.GGUF): v for k, v in hc_values(4).items()}
    names = sorted(by_gguf)
    one = {n: by_gguf[n] for n in names[: len(names) // 2]}
    two = {n: by_gguf[n] for n in names[len(names) // 2:]} | {shared: by_gguf[shared]}
    assert shared in one
    first = _writer_gguf(tmp_path / "m-00001-of-00002.gguf", one, block_count=CFG.n_layers)
    _writer_gguf(tmp_path / "m-00002-of-00002.gguf", two)
    return first


def test_a_tensor_in_two_parts_is_an_error(tmp_path):
    pytest.importorskip("torch")
    first = _two_parts_sharing(tmp_path)
    r = run_hc("inspect", first, "--json")
    assert r.exit_code == 0 and "blk.0.hc_attn_base.weight" in r.stderr and "2 parts" in r.stderr
    v = run_hc("inspect", first, "--verify", "--json")
    assert v.exit_code == 1 and any(f["code"] == "duplicate_tensor" and f["severity"] == "error"
                                    for f in v.json()["findings"])
    _one_error(_kernel(first), "blk.0.hc_attn_base.weight", "m-00002-of-00002.gguf", "expected each tensor in one part")
    _one_error(run_hc("diff", first, first), "blk.0.hc_attn_base.weight")


def test_a_split_set_over_the_hub_is_read_as_locally(split_set, tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    pytest.importorskip("torch")
    from hub_server import Hub

    repo = tmp_path / "repo"
    repo.mkdir()
    for p in split_set[:1] + split_set[2:]:  # the second part missing
        shutil.copy(p, repo / p.name)
    with Hub({"org/g": repo}) as h:
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        monkeypatch.setenv("HC_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        r = run_hc("inspect", "hf://org/g", "--json")
        assert r.exit_code == 0 and split_set[1].name in r.stderr and "missing" in r.stderr
        _one_error(_kernel("hf://org/g"), split_set[1].name, "missing")


# --- IQ* quants: what the gguf package dequantises is read -------------------------------------

IQ4_NL_LEVELS = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)  # ggml's kvalues_iq4nl


def _iq4_nl(rows: int, cols: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(raw IQ4_NL blocks of a [rows, cols] tensor, its values): per 32 values an F16 scale and 16
    bytes whose low nibbles index values 0-15, high nibbles 16-31, into the level table."""
    rng = np.random.default_rng(seed)
    blocks = rows * cols // 32
    d = rng.uniform(0.001, 0.01, blocks).astype(np.float16)
    nibbles = rng.integers(0, 16, (blocks, 32), dtype=np.uint8)
    qs = nibbles[:, :16] | (nibbles[:, 16:] << 4)
    raw = np.concatenate([d.view(np.uint8).reshape(blocks, 2), qs], axis=1)
    values = d.astype(np.float32)[:, None] * np.array(IQ4_NL_LEVELS, np.float32)[nibbles]
    return raw.reshape(rows, cols // 32 * 18), values.reshape(rows, cols)


def test_an_iq4_nl_hc_tensor_is_read(tmp_path):
    pytest.importorskip("torch")
    q = gguf.GGMLQuantizationType.IQ4_NL
    raw, fn = _iq4_nl(24, 4 * 64)
    values = hc_values(5)
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(path, "deepseek4")
    w.add_tensor("blk.0.hc_attn_fn.weight", raw, raw_dtype=q)
    for name, x in values.items():
        if name != "layers.0.hc_attn_fn":
            w.add_tensor(D.spell_hc(D.parse_hc_name(name), D.GGUF), x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ckpt = open_checkpoint(path)
    site = H.select_site(ckpt, 0, "attn")
    assert site.parts["fn"][1].dtype == "IQ4_NL"
    assert np.array_equal(H.read_part(ckpt, site, "fn"), fn)  # d x level, exact in float32
    doc = run_hc("inspect", path, "--verify", "--json").json()
    by = {f["code"]: f["message"] for f in doc["findings"]}
    assert "IQ4_NL" in by["hc_quantised"] and "hc_unchecked" not in by
    r = _kernel(path, "--site", "attn", "--hidden", "--tokens", 2)
    assert r.exit_code == 0 and len(r.json()["comb"]) == 2, r.stderr  # the IQ4_NL fn projected the tokens


def test_other_types_the_package_cannot_decode_are_named():
    from hccli.checkpoint.gguf.store import dequantize

    with pytest.raises(HcError, match="cannot dequantise I32"):
        dequantize(bytes(16), "I32", (4,), "m.gguf: tensor 'x'")
