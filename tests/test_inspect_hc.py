"""The work `hc inspect` does on HC values is bounded whatever a file claims (issue #21): the
plain-Python split takes what a real model needs and numpy's op, which computes the same
float32 operations, the rest; sites past the values one inspect reads are left out and
said once. A real checkpoint's --json stays as it was, without numpy."""

from __future__ import annotations

import json

import numpy as np
import pytest

import hccli.kernels.split_f32 as sinkhorn_f32
from ckpt_tools import tiny
from conftest import ROOT, run_hc
from hccli import inspect_hc
from hccli.kernels.split_np import split_sinkhorn


def _wide(tmp_path, n_layers: int = 4, hc: int = 64, iters: int = 1000):
    """A release-layout checkpoint (safetensors' serializer) of hc-`hc` sites, base and scale
    only, with a config that asks `iters` Sinkhorn iterations."""
    from safetensors.numpy import save_file

    cfg = json.loads((ROOT / "sample_configs" / "tiny-v4.hf.json").read_text())
    cfg.update(num_hidden_layers=n_layers, hc_mult=hc, hc_sinkhorn_iters=iters, compress_ratios=[0] * (n_layers + 2),
               dspark_target_layer_ids=[0, 1])
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
    from hccli.inspect_report import build_inspect

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
    assert len(lines) == 1 and "1 of 4 HC sites left out" in lines[0] and "--hc-layer" in lines[0], r.stderr
    one = run_hc("inspect", path, "--json", "--hc-layer", 1)  # a site of the layer left out, picked
    assert one.exit_code == 0 and len(one.json()["hc"]) == 2 and one.stderr.strip() == ""


def test_a_real_checkpoint_takes_the_plain_op_alone(tmp_path, monkeypatch):
    ck = tiny(tmp_path / "tiny")
    monkeypatch.setattr(inspect_hc, "_split_sinkhorn_np", None)  # called, it would fail
    r = run_hc("inspect", ck, "--json")
    assert r.exit_code == 0 and r.json()["hc"] and r.stderr == ""
