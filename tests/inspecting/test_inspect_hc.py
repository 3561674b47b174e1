"""`hc inspect`'s HC values: the plain-Python float32 split takes what a real model needs and is
numpy's op to the bit (every operation, order and rounding but exp, which numpy does not round
correctly); numpy's op takes the rest (wide stream counts, hc not a power of two). The work is
bounded whatever a file claims: sites past the values one inspect reads are left out and said
once. A real checkpoint's --json needs no numpy."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

import hccli.ops.split_f32 as sinkhorn_f32
import hccli.ops.split_np as sinkhorn_np
from ckpt_tools import tiny
from conftest import ROOT, run_hc
from hccli.inspecting import hc as inspect_hc
from hccli.ops.split_f32 import head_pre_zero, split_sinkhorn_zero, supports
from hccli.ops.split_np import split_sinkhorn


def _wide(tmp_path, n_layers: int = 4, hc: int = 64, iters: int = 1000):
    """A release-layout checkpoint (safetensors' serializer) of hc-`hc` sites, base and scale
    only, with a config that asks `iters` Sinkhorn iterations (and no stages, as it holds none)."""
    from safetensors.numpy import save_file

    cfg = json.loads((ROOT / "sample_configs" / "tiny-v4.hf.json").read_text())
    cfg.update(num_hidden_layers=n_layers, hc_mult=hc, hc_sinkhorn_iters=iters, compress_ratios=[0] * n_layers,
               num_nextn_predict_layers=0, dspark_target_layer_ids=[])
    out = tmp_path / "wide"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(cfg))
    rng = np.random.default_rng(0)
    tensors = {}
    for layer in range(n_layers):
        for site in ("attn", "ffn"):
            tensors[f"layers.{layer}.hc_{site}_base"] = rng.standard_normal((2 + hc) * hc).astype(np.float32)
            tensors[f"layers.{layer}.hc_{site}_scale"] = np.ones(3, np.float32)
    save_file(tensors, out / "model.safetensors")
    return out, tensors


def test_plain_python_split_does_what_a_real_model_needs_numpy_the_rest(tmp_path, monkeypatch):
    """8 sites of hc 64 at 1,000 iterations are 33M element-iterations: ~20 s in plain Python,
    ~0.2 s in numpy. The plain op's divisions are counted, and stopped once past its budget."""
    from hccli.inspecting.report import build_inspect

    path, tensors = _wide(tmp_path)
    divided = [0]
    real = sinkhorn_f32._divide

    def counted(values, dens):
        divided[0] += len(values)
        assert divided[0] <= 2 * 2 * (1 << 21), "the plain-Python op was asked for more than its budget"
        return real(values, dens)

    monkeypatch.setattr(sinkhorn_f32, "_divide", counted)
    report = build_inspect(path)
    assert len(report.hc) == 8 and report.notes == []
    want = split_sinkhorn(np.zeros((1, 66 * 64), np.float32), np.ones(3, np.float32),
                          tensors["layers.2.hc_ffn_base"], 64, 1000, 1e-6)[2][0]
    got = next(e for e in report.hc if e.layer == 2 and e.site == "ffn").comb_from_base
    assert np.array_equal(np.asarray(got, np.float32), want)


@pytest.mark.parametrize("hc", [32, 64])
def test_the_plain_op_and_numpys_agree_at_wide_stream_counts(hc):
    """What numpy computes past the plain budget is what the plain op would have: the same float32
    operations, but for numpy's own exp in the last place."""
    rng = np.random.default_rng(hc)
    bases = (rng.standard_normal((3, (2 + hc) * hc)) * 2).astype(np.float32)
    scales = rng.standard_normal((3, 3)).astype(np.float32)
    with np.errstate(all="ignore"):
        want = split_sinkhorn(np.zeros_like(bases), scales, bases, hc, 20, 1e-6)
    got = sinkhorn_f32.split_sinkhorn_zero(bases.tolist(), scales.tolist(), hc, 20, 1e-6)
    for w, g in zip(want, got):
        assert np.allclose(w, np.asarray(g, np.float32), rtol=1e-5, atol=1e-7)


def test_sites_past_the_values_inspect_reads_are_left_out_and_said(tmp_path, monkeypatch):
    path, _ = _wide(tmp_path, n_layers=2, hc=8, iters=20)
    monkeypatch.setattr(inspect_hc, "MAX_INSPECT_VALUES", 3 * 80)  # three of the four sites' bases
    r = run_hc("inspect", path, "--json")
    assert r.exit_code == 0 and len(r.json()["hc"]) == 3
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "1 of 4 HC sites left out" in lines[0] and "--hc --layers" in lines[0], r.stderr
    one = run_hc("inspect", path, "--json", "--layers", 1, "--hc")  # a site of the layer left out, picked
    assert one.exit_code == 0 and len(one.json()["hc"]) == 2 and one.stderr.strip() == ""


def test_a_real_checkpoint_takes_the_plain_op_alone(tmp_path, monkeypatch):
    ck = tiny(tmp_path / "tiny")
    monkeypatch.setattr(inspect_hc, "_split_sinkhorn_np", None)  # called, it would fail
    r = run_hc("inspect", ck, "--json")
    assert r.exit_code == 0 and r.json()["hc"] and r.stderr == ""


# --- the plain-Python float32 op against numpy's: every operation the same but exp


def _numpy_with(exp):
    """sinkhorn_np's functions with numpy's exp swapped for `exp` (the rest of numpy as is)."""
    fake = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
    fake.exp = exp
    return fake


def _exp_correctly_rounded(x):
    x = np.asarray(x)
    return np.exp(x.astype(np.float64)).astype(np.float32)


def _sites(rng, k: int, hc: int, spread: float):
    bases = (rng.standard_normal((k, (2 + hc) * hc)) * spread).astype(np.float32)
    scales = rng.standard_normal((k, 3)).astype(np.float32)
    return bases, scales


def _bits(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).view(np.int32)


@pytest.mark.parametrize("hc", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("spread", [0.05, 1.0, 8.0, 40.0])
def test_every_operation_is_numpys_float32_but_exp(monkeypatch, hc, spread):
    """With numpy's exp replaced by the correctly rounded one, the numpy op and the plain one agree
    to the bit: every other operation, order and rounding is the same."""
    rng = np.random.default_rng(hc * 100 + int(spread * 10))
    bases, scales = _sites(rng, 9, hc, spread)
    monkeypatch.setattr(sinkhorn_np, "np", _numpy_with(_exp_correctly_rounded))
    with np.errstate(all="ignore"):
        want = sinkhorn_np.split_sinkhorn(np.zeros_like(bases), scales, bases, hc, 20, 1e-6)
    got = split_sinkhorn_zero(bases.tolist(), scales.tolist(), hc, 20, 1e-6)
    for w, g in zip(want, got):
        assert np.array_equal(_bits(w), _bits(g))


@pytest.mark.parametrize("hc", [2, 4])
def test_within_a_few_units_of_numpys_own_exp(hc):
    """numpy's float32 exp is not correctly rounded (its SIMD path differs by CPU); twenty
    Sinkhorn rounds carry that last-place difference a little further, never more than this."""
    rng = np.random.default_rng(5)
    bases, scales = _sites(rng, 200, hc, 3.0)
    with np.errstate(all="ignore"):
        want = sinkhorn_np.split_sinkhorn(np.zeros_like(bases), scales, bases, hc, 20, 1e-6)
    got = split_sinkhorn_zero(bases.tolist(), scales.tolist(), hc, 20, 1e-6)
    for w, g in zip(want, got):
        assert np.abs(_bits(w).astype(np.int64) - _bits(g)).max() <= 32
        assert np.allclose(w, np.asarray(g, dtype=np.float32), rtol=1e-5, atol=1e-7)


def test_non_finite_values_come_out_as_numpys(monkeypatch):
    bases = np.zeros((5, 24), np.float32)
    scales = np.ones((5, 3), np.float32)
    bases[0, 8] = np.nan  # a NaN comb offset: its row's max is NaN
    bases[1, 9] = np.inf
    bases[2, 10] = -np.inf
    scales[3, 2] = np.inf  # 0 x inf: NaN
    bases[4, :4] = 1e30  # pre saturates
    monkeypatch.setattr(sinkhorn_np, "np", _numpy_with(_exp_correctly_rounded))
    with np.errstate(all="ignore"):
        want = sinkhorn_np.split_sinkhorn(np.zeros_like(bases), scales, bases, 4, 20, 1e-6)
    got = split_sinkhorn_zero(bases.tolist(), scales.tolist(), 4, 20, 1e-6)
    for w, g in zip(want, got):
        assert np.array_equal(np.asarray(w), np.asarray(g, dtype=np.float32), equal_nan=True)


def test_eps_rounding_to_zero_divides_as_ieee():
    """A column of zeros with eps below float32's range: 0 / 0 is NaN, not a ZeroDivisionError."""
    bases = np.zeros((1, 24), np.float32)
    bases[0, 8:] = [0, -1e4, -1e4, -1e4] * 4  # every row puts all its weight on column 0
    with np.errstate(all="ignore"):
        want = sinkhorn_np.split_sinkhorn(np.zeros_like(bases), np.ones((1, 3)), bases, 4, 3, 1e-60)
    got = split_sinkhorn_zero(bases.tolist(), [[1.0, 1.0, 1.0]], 4, 3, 1e-60)
    assert np.array_equal(np.asarray(want[2]), np.asarray(got[2], dtype=np.float32), equal_nan=True)
    assert np.isnan(np.asarray(got[2])).any()


def test_head_mix_and_supported_counts():
    rng = np.random.default_rng(3)
    b, s = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((6, 1)).astype(np.float32)
    want = sinkhorn_np.head_pre(np.zeros_like(b), s, b, 1e-6)
    assert np.allclose(want, np.asarray(head_pre_zero(b.tolist(), s.tolist(), 1e-6), dtype=np.float32), rtol=1e-6)
    assert [h for h in range(1, 20) if supports(h)] == [1, 2, 4, 8, 16]
    with pytest.raises(ValueError):
        split_sinkhorn_zero([[0.0] * 15], [[1.0] * 3], 3, 20, 1e-6)


def test_inspect_of_a_non_power_of_two_site_uses_numpy(tmp_path):
    """hc = 3 has no pure halving tree: the report still holds its comb (numpy's op)."""
    from conftest import run_hc

    cfg = json.loads((ROOT / "sample_configs" / "tiny-v4.1.json").read_text())
    cfg["hc_mult"] = 3
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    ck = tiny(tmp_path / "ck", str(tmp_path / "c.json"))
    doc = run_hc("inspect", ck, "--json").json()
    split = [e for e in doc["hc"] if "comb_from_base" in e]
    assert split and all(len(e["comb_from_base"]) == 3 for e in split)
    comb = np.array(split[0]["comb_from_base"])
    assert np.allclose(comb.sum(0), 1, atol=1e-4) and np.allclose(comb.sum(1), 1, atol=1e-4)
