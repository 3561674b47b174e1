"""The sources of mixes: bundled sample, random, files, hidden state. Fixtures built in tmp_path."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from hccli.base.errors import HcError
from hccli.runkernel.inputs import (
    MixesInput,
    hidden_mixes,
    load_mixes,
    mixes_from_hidden,
    random_mixes,
    sample_mixes,
    sample_params,
)


def _one_line(exc: HcError) -> str:
    assert "\n" not in exc.message and exc.exit_code == 2
    return exc.message


def write_safetensors(path, tensors, dtypes=None):
    """A minimal safetensors writer: {name: ndarray}, dtype strings by name (default from the array)."""
    codes = {"float16": "F16", "float32": "F32", "float64": "F64", "int32": "I32", "int64": "I64", "uint16": "BF16"}
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        raw = arr.tobytes()
        dtype = (dtypes or {}).get(name) or codes[arr.dtype.name]
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    return path


# ---- (a) bundled sample ----


def test_sample_is_fixed_finite_and_comes_with_parameters():
    a, b = sample_mixes(), sample_mixes()
    assert isinstance(a, MixesInput)
    assert a.mixes.shape == (4, 24) and a.mixes.dtype == np.float32 and a.tokens == 4
    assert np.array_equal(a.mixes, b.mixes)
    assert np.isfinite(a.mixes).all() and a.nonfinite_tokens == ()
    assert 0.5 < a.mixes.std() < 2.0  # unit-variance mixes, as the model's projection gives
    assert "\n" not in a.provenance and "bundled sample" in a.provenance
    scale, base = sample_params()
    assert np.array_equal(a.hc_scale, scale) and np.array_equal(a.hc_base, base)
    assert scale.shape == (3,) and base.shape == (24,)


def test_sample_gives_a_non_trivial_comb():
    torch = pytest.importorskip("torch")
    from hccli.kernels.torch_ref import hc_split_sinkhorn_torch

    s = sample_mixes()
    pre, post, comb = hc_split_sinkhorn_torch(s.mixes, s.hc_scale, s.hc_base)
    eye = torch.eye(4).expand_as(comb)
    assert (comb - eye).abs().max() > 0.2  # not the identity ...
    assert (comb - 0.25).abs().max() > 0.2  # ... nor uniform
    assert comb.diagonal(dim1=-2, dim2=-1).mean() > 0.4  # leaning to the diagonal, as the base says
    assert not torch.allclose(comb[0], comb[1], atol=1e-2)  # tokens differ


@pytest.mark.parametrize("hc", [2, 8])
def test_sample_for_other_hc(hc):
    s = sample_mixes(hc)
    assert s.mixes.shape == (4, (2 + hc) * hc) and s.hc_base.shape == ((2 + hc) * hc,)


# ---- (b) random ----


def test_random_mixes_follow_the_seed():
    a, b, c = random_mixes(7, seed=3), random_mixes(7, seed=3), random_mixes(7, seed=4)
    assert a.mixes.shape == (7, 24) and a.mixes.dtype == np.float32
    assert np.array_equal(a.mixes, b.mixes) and not np.array_equal(a.mixes, c.mixes)
    assert a.provenance == "random: 7 tokens, seed 3, N(0, 1^2)"
    assert random_mixes(2, hc_mult=2).mixes.shape == (2, 8)
    assert abs(random_mixes(4000, std=5.0).mixes.std() - 5.0) < 0.2


@pytest.mark.parametrize("kwargs", [{"tokens": 0}, {"tokens": -1}, {"tokens": 2, "seed": -1}, {"tokens": 2.5}])
def test_random_mixes_refuse_bad_counts(kwargs):
    with pytest.raises(HcError) as info:
        random_mixes(**kwargs)
    _one_line(info.value)


# ---- (c) files ----


def test_safetensors_float32(tmp_path):
    data = np.random.default_rng(0).normal(size=(2, 3, 24)).astype(np.float32)
    p = write_safetensors(tmp_path / "m.safetensors", {"other": np.zeros(2, np.float32), "mixes": data})
    got = load_mixes(p)
    assert np.array_equal(got.mixes, data) and got.tokens == 6
    assert str(p) in got.provenance and "F32" in got.provenance and "[2, 3, 24]" in got.provenance


def test_safetensors_half_types(tmp_path):
    data = np.random.default_rng(1).normal(size=(3, 24)).astype(np.float32)
    half = write_safetensors(tmp_path / "h.safetensors", {"mixes": data.astype(np.float16)})
    assert np.allclose(load_mixes(half).mixes, data, atol=1e-2)
    bf16_bits = (data.view(np.uint32) >> 16).astype(np.uint16)  # truncation is a valid bf16 value
    bf = write_safetensors(tmp_path / "b.safetensors", {"mixes": bf16_bits}, {"mixes": "BF16"})
    want = (bf16_bits.astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(load_mixes(bf).mixes, want)


def test_npy_and_json(tmp_path):
    data = np.random.default_rng(2).normal(size=(5, 24))
    np.save(tmp_path / "m.npy", data)
    assert np.array_equal(load_mixes(tmp_path / "m.npy").mixes, data.astype(np.float32))
    (tmp_path / "m.json").write_text(json.dumps(data.tolist()))
    assert np.array_equal(load_mixes(tmp_path / "m.json").mixes, data.astype(np.float32))
    (tmp_path / "one.json").write_text(json.dumps(list(range(24))))  # one token, integers
    one = load_mixes(tmp_path / "one.json")
    assert one.mixes.shape == (24,) and one.tokens == 1
    (tmp_path / "hc2.json").write_text(json.dumps([[0.5] * 8]))
    assert load_mixes(tmp_path / "hc2.json", hc_mult=2).mixes.shape == (1, 8)


def test_nonfinite_values_pass_through_and_are_reported(tmp_path):
    data = np.zeros((2, 3, 24), np.float32)
    data[0, 1, 5] = np.nan
    data[1, 2, 23] = -np.inf
    np.save(tmp_path / "m.npy", data)
    got = load_mixes(tmp_path / "m.npy")
    assert got.nonfinite_tokens == (1, 5)  # flat token indices
    assert np.isnan(got.mixes[0, 1, 5])
    (tmp_path / "m.json").write_text("[" + ",".join(["[" + ",".join(["NaN"] + ["0"] * 23) + "]", "[" + ",".join(["0"] * 24) + "]"]) + "]")
    assert load_mixes(tmp_path / "m.json").nonfinite_tokens == (0,)


def _error(path, **kw) -> str:
    with pytest.raises(HcError) as info:
        load_mixes(path, **kw)
    return _one_line(info.value)


def test_file_errors_name_the_file_and_what_was_expected(tmp_path):
    msg = _error(tmp_path / "absent.npy")
    assert "absent.npy" in msg and "no such file" in msg

    np.save(tmp_path / "w.npy", np.zeros((4, 23), np.float32))
    msg = _error(tmp_path / "w.npy")
    assert "w.npy" in msg and "[4, 23]" in msg and "[..., 24]" in msg
    assert "[..., 8]" in _error(tmp_path / "w.npy", hc_mult=2)

    np.save(tmp_path / "i.npy", np.zeros((4, 24), np.int64))
    msg = _error(tmp_path / "i.npy")
    assert "i.npy" in msg and "int64" in msg and "float" in msg

    p = write_safetensors(tmp_path / "i.safetensors", {"mixes": np.zeros((4, 24), np.int32)})
    msg = _error(p)
    assert "i.safetensors" in msg and "I32" in msg and "float" in msg

    p = write_safetensors(tmp_path / "n.safetensors", {"weights": np.zeros((4, 24), np.float32)})
    msg = _error(p)
    assert "n.safetensors" in msg and "no tensor `mixes`" in msg and "weights" in msg

    np.save(tmp_path / "e.npy", np.zeros((0, 24), np.float32))
    assert "no tokens" in _error(tmp_path / "e.npy")

    (tmp_path / "m.txt").write_text("1 2 3")
    assert "expected .safetensors, .npy or .json" in _error(tmp_path / "m.txt")
    assert "a directory" in _error(tmp_path)


def test_malformed_files(tmp_path):
    (tmp_path / "bad.json").write_text("[[1, 2,")
    assert "not valid JSON" in _error(tmp_path / "bad.json")
    (tmp_path / "ragged.json").write_text("[[1, 2], [3]]")
    assert "not rectangular" in _error(tmp_path / "ragged.json")
    (tmp_path / "words.json").write_text('[["a", "b"]]')
    assert "numbers" in _error(tmp_path / "words.json")
    (tmp_path / "bools.json").write_text("[[true, false]]")
    assert "numbers" in _error(tmp_path / "bools.json")

    # safetensors go through the project's hardened header reader, and get its verdicts
    (tmp_path / "short.safetensors").write_bytes(b"\x01\x02")
    assert "expected at least 8" in _error(tmp_path / "short.safetensors")
    (tmp_path / "long.safetensors").write_bytes(struct.pack("<Q", 10**9) + b"{}")
    assert "header length field says" in _error(tmp_path / "long.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(struct.pack("<Q", 4) + b"\xff\xfe{[")
    assert "not valid UTF-8" in _error(tmp_path / "junk.safetensors")
    p = write_safetensors(tmp_path / "trunc.safetensors", {"mixes": np.zeros((4, 24), np.float32)})
    p.write_bytes(p.read_bytes()[:-8])
    assert "trunc.safetensors" in _error(p)

    (tmp_path / "bad.npy").write_bytes(b"not an npy file at all")
    assert "bad.npy" in _error(tmp_path / "bad.npy")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert "obj.npy" in _error(tmp_path / "obj.npy")


# ---- (d) hidden state ----


def _model_mixes(h, fn, norm_eps):
    """The model's projection in float64 numpy, for comparison."""
    x = h.reshape(*h.shape[:-2], -1).astype(np.float64)
    return (x @ fn.astype(np.float64).T) / np.sqrt((x * x).mean(-1, keepdims=True) + norm_eps)


def test_mixes_from_hidden_is_the_models_projection():
    pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    h = rng.normal(size=(2, 3, 4, 16)).astype(np.float32)
    fn = rng.normal(size=(24, 64)).astype(np.float32) / 8
    got = mixes_from_hidden(h, fn, norm_eps=1e-6)
    assert got.shape == (2, 3, 24) and got.dtype == np.float32
    np.testing.assert_allclose(got, _model_mixes(h, fn, 1e-6), rtol=1e-5, atol=1e-5)
    with pytest.raises(HcError, match=r"hc_fn has shape \[24, 63\], expected \[24, 64\]"):
        mixes_from_hidden(h, fn[:, :63])
    with pytest.raises(HcError, match="expected"):
        mixes_from_hidden(np.zeros(5, np.float32), fn)


def test_seeded_hidden_state():
    pytest.importorskip("torch")
    a, b = hidden_mixes(tokens=3, dim=32, seed=1), hidden_mixes(tokens=3, dim=32, seed=1)
    assert a.mixes.shape == (3, 24) and np.array_equal(a.mixes, b.mixes)
    assert not np.array_equal(a.mixes, hidden_mixes(tokens=3, dim=32, seed=2).mixes)
    assert "hidden state" in a.provenance and "seed 1" in a.provenance and "\n" not in a.provenance
    assert 0.5 < hidden_mixes(tokens=200, dim=64).mixes.std() < 1.5
    assert hidden_mixes(tokens=2, dim=8, hc_mult=2).mixes.shape == (2, 8)


def test_hidden_state_from_files(tmp_path):
    pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    h = rng.normal(size=(5, 4, 16)).astype(np.float32)
    fn = (rng.normal(size=(24, 64)) / 8).astype(np.float32)

    p = write_safetensors(tmp_path / "h.safetensors", {"hidden": h, "hc_fn": fn})
    got = hidden_mixes(path=p, norm_eps=1e-6)
    np.testing.assert_allclose(got.mixes, _model_mixes(h, fn, 1e-6), rtol=1e-5, atol=1e-5)
    assert "hc_fn from the file" in got.provenance and "h.safetensors" in got.provenance

    np.save(tmp_path / "h.npy", h)
    seeded = hidden_mixes(path=tmp_path / "h.npy", seed=9)
    assert seeded.mixes.shape == (5, 24) and "seeded" in seeded.provenance
    assert np.array_equal(seeded.mixes, hidden_mixes(path=tmp_path / "h.npy", seed=9).mixes)

    with pytest.raises(HcError) as info:
        hidden_mixes(path=tmp_path / "h.npy", hc_mult=2)
    assert "h.npy" in _one_line(info.value) and "[..., 2, dim]" in info.value.message

    p = write_safetensors(tmp_path / "nohidden.safetensors", {"mixes": np.zeros((2, 24), np.float32)})
    with pytest.raises(HcError, match="no tensor `hidden`"):
        hidden_mixes(path=p)

    p = write_safetensors(tmp_path / "badfn.safetensors", {"hidden": h, "hc_fn": fn[:, :60]})
    with pytest.raises(HcError, match=r"`hc_fn` has shape \[24, 60\]"):
        hidden_mixes(path=p)
