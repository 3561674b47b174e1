"""Golden files read as hostile input, both formats (run-site's hc-site-golden/1, run-kernel's
hc-split-sinkhorn-golden/1): metadata numbers are ASCII decimals only (Python's int() and
float() would take `1_0e-7`, fullwidth and Arabic-Indic digits), and every tensor is F32 (a
BF16 or F64 tensor is exit 2 naming it, never "differs", exit 1).

Goldens are made by `hc run-site --save` and `hc run-kernel --save`, then edited with
safetensors' own writer."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SAMPLES
from safetensors import safe_open
from safetensors.numpy import save_file
from site_fixtures import make_golden

from hccli.base.floats import bf16_bits

FULLWIDTH = str.maketrans("0123456789", "０１２３４５６７８９")
ARABIC_INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")


@pytest.fixture(scope="module")
def site_golden(tmp_path_factory):
    d = tmp_path_factory.mktemp("site-golden")
    return make_golden(SAMPLES / "tiny-v4.1.json", d / "golden.safetensors", "--layers", "0", "--tokens", "3")


def _edit(src, dst, *, meta=None, tensors=None):
    with safe_open(str(src), framework="numpy") as f:
        got = {k: f.get_tensor(k) for k in f.keys()}
        m = dict(f.metadata())
    m.update(meta or {})
    got.update(tensors or {})
    save_file(got, str(dst), metadata=m)
    return dst


def _as_bf16(a: np.ndarray) -> np.ndarray:
    # safetensors.numpy has no bfloat16: raw bits, dtype fixed in the header below
    return bf16_bits(a)


def _retype(path, name: str, dtype: str) -> None:
    """Rewrite one F32 tensor of a file as BF16 or F64 (the header names the dtype)."""
    import json
    import struct

    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    order = sorted((k for k in head if k != "__metadata__"), key=lambda k: head[k]["data_offsets"][0])
    out, at = b"", 0
    for k in order:
        a, b = head[k]["data_offsets"]
        chunk = data[a:b]
        if k == name:
            values = np.frombuffer(chunk, "<f4")
            chunk = values.astype("<f8").tobytes() if dtype == "F64" else _as_bf16(values).tobytes()
            head[k]["dtype"] = dtype
        head[k]["data_offsets"] = [at, at + len(chunk)]
        out += chunk
        at += len(chunk)
    text = json.dumps(head).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + out)


SITE_META = {
    "hc_eps 1_0e-7": ("hc_eps", "1_0e-7"),
    "hc_eps fullwidth": ("hc_eps", "1e-06".translate(FULLWIDTH)),
    "norm_eps Arabic-Indic": ("norm_eps", "1e-20".translate(ARABIC_INDIC)),
    "hc_eps with a newline": ("hc_eps", "1e-06\n"),
    "sinkhorn_iters 2_0": ("sinkhorn_iters", "2_0"),
    "sinkhorn_iters fullwidth": ("sinkhorn_iters", "20".translate(FULLWIDTH)),
    "hc_mult Arabic-Indic": ("hc_mult", "4".translate(ARABIC_INDIC)),
    "n_layers Arabic-Indic": ("n_layers", "8".translate(ARABIC_INDIC)),
    "stacks Arabic-Indic": ("stacks", "2,0".translate(ARABIC_INDIC)),
    "sites Arabic-Indic": ("sites", "0.attn,0.ffn".translate(ARABIC_INDIC)),
}


@pytest.mark.parametrize("case", SITE_META)
def test_site_golden_metadata_is_ascii_decimal(hc, site_golden, tmp_path, case):
    key, value = SITE_META[case]
    bad = _edit(site_golden, tmp_path / "bad.safetensors", meta={key: value})
    for args in (("run-site", "--compare", str(bad)), ("check-port", str(site_golden), "--golden", str(bad))):
        r = hc(*args)
        lines = r.stderr.strip().splitlines()
        assert r.exit_code == 2 and len(lines) == 1, (args, r.stderr)
        assert lines[0].startswith(f"hc: error: {bad}: metadata '{key}' is "), lines[0]


def test_the_unedited_site_golden_reads(hc, site_golden, tmp_path):
    same = _edit(site_golden, tmp_path / "same.safetensors")
    assert hc("run-site", "--compare", str(same)).exit_code == 0
    assert hc("check-port", str(site_golden), "--golden", str(same)).exit_code == 0


@pytest.mark.parametrize("dtype", ["BF16", "F64"])
def test_a_site_golden_tensor_that_is_not_f32(hc, site_golden, tmp_path, dtype):
    for name in ("0.attn.comb", "0.ffn.fn"):
        bad = tmp_path / f"{dtype}.safetensors"
        bad.write_bytes(site_golden.read_bytes())
        _retype(bad, name, dtype)
        for args in (("run-site", "--compare", str(bad)), ("check-port", str(site_golden), "--golden", str(bad))):
            r = hc(*args)
            assert r.exit_code == 2, (args, r.exit_code, r.stdout[-300:])
            assert r.stderr.strip() == (f"hc: error: {bad}: tensor `{name}` has dtype {dtype}; expected F32 "
                                        "(every tensor of a golden file is F32)"), r.stderr


@pytest.fixture(scope="module")
def kernel_golden(tmp_path_factory):
    pytest.importorskip("torch")
    from conftest import run_hc

    path = tmp_path_factory.mktemp("kernel-golden") / "golden.safetensors"
    r = run_hc("run-kernel", "--impl", "torch", "--tokens", "5", "--save", str(path))
    assert r.exit_code == 0, r.stderr
    return path


@pytest.mark.parametrize("case,key,value", [
    ("eps 1_0e-7", "eps", "1_0e-7"),
    ("eps fullwidth", "eps", "1e-06".translate(FULLWIDTH)),
    ("eps Arabic-Indic", "eps", "1e-06".translate(ARABIC_INDIC)),
    ("sinkhorn_iters fullwidth", "sinkhorn_iters", "20".translate(FULLWIDTH)),
    ("hc_mult 4_0", "hc_mult", "4_0"),
])
def test_kernel_golden_metadata_is_ascii_decimal(hc, kernel_golden, tmp_path, case, key, value):
    bad = _edit(kernel_golden, tmp_path / "bad.safetensors", meta={key: value})
    r = hc("run-kernel", "--compare", str(bad))
    assert r.exit_code == 2 and r.stderr.startswith(f"hc: error: {bad}: metadata '{key}' is "), r.stderr


@pytest.mark.parametrize("dtype", ["BF16", "F64"])
def test_a_kernel_golden_tensor_that_is_not_f32(hc, kernel_golden, tmp_path, dtype):
    assert hc("run-kernel", "--compare", str(kernel_golden)).exit_code == 0
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(kernel_golden.read_bytes())
    _retype(bad, "comb", dtype)
    r = hc("run-kernel", "--compare", str(bad))
    assert r.exit_code == 2 and r.stderr.strip() == (f"hc: error: {bad}: tensor `comb` has dtype {dtype}; expected "
                                                     "F32 (every tensor of a golden file is F32)"), r.stderr
