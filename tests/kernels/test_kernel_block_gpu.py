"""The block kernel on a real GPU against the torch reference and a float64 version.

Outputs are filled with NaN before every launch, so an element the kernel fails
to write shows up. Inputs are fresh random numbers; the seed is in every failure
message. Run with `pytest -m gpu`; skipped without a CUDA device. (No hypothesis
here: the GPU machine does not have it.)
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

from hccli.base.errors import HcError  # noqa: E402
from hccli.kernels.torch_ref import hc_split_sinkhorn_torch
from hccli.base.vocab import mix_width  # noqa: E402

REF_TOL = 1e-6  # against the float32 torch reference
F64_TOL = 2e-6  # against float64


@pytest.fixture(scope="module")
def kernel():
    pytest.importorskip("tilelang")
    from hccli.kernels.block import hc_split_sinkhorn_block

    return hc_split_sinkhorn_block


def split_sinkhorn_f64(mixes, scale, base, hc, iters, eps):
    """float64 on the GPU, written with torch's own sigmoid and softmax (not the reference's code)."""
    m, s, b = mixes.double(), scale.double(), base.double()
    z = m * s.repeat_interleave(torch.tensor([hc, hc, hc * hc], device=s.device)) + b
    pre = torch.sigmoid(z[..., :hc]) + eps
    post = 2 * torch.sigmoid(z[..., hc : 2 * hc])
    c = torch.softmax(z[..., 2 * hc :].reshape(*z.shape[:-1], hc, hc), dim=-1) + eps
    c = c / (c.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        c = c / (c.sum(-1, keepdim=True) + eps)
        c = c / (c.sum(-2, keepdim=True) + eps)
    return pre, post, c


def _inputs(n, hc, seed, std=1.0, lead=None):
    g = torch.Generator(device="cuda").manual_seed(seed)
    shape = (n,) if lead is None else lead
    mixes = torch.randn(*shape, mix_width(hc), device="cuda", generator=g) * std
    scale = torch.rand(3, device="cuda", generator=g) * 1.9 + 0.1
    base = torch.randn(mix_width(hc), device="cuda", generator=g)
    return mixes, scale, base


def _poisoned(lead, hc):
    nan = float("nan")
    return (
        torch.full((*lead, hc), nan, device="cuda"),
        torch.full((*lead, hc), nan, device="cuda"),
        torch.full((*lead, hc, hc), nan, device="cuda"),
    )


def _fresh_seed():
    return int.from_bytes(os.urandom(4), "little")


def _check(kernel, n, hc=4, iters=20, eps=1e-6, std=1.0):
    seed = _fresh_seed()
    mixes, scale, base = _inputs(n, hc, seed, std)
    out = _poisoned((n,), hc)
    got = kernel(mixes, scale, base, hc, iters, eps, out=out)
    assert all(g is o for g, o in zip(got, out))
    ref = hc_split_sinkhorn_torch(mixes, scale, base, hc, iters, eps)
    f64 = split_sinkhorn_f64(mixes, scale, base, hc, iters, eps)
    stats = {}
    for name, g, r, w in zip(("pre", "post", "comb"), got, ref, f64):
        assert not bool(g.isnan().any()), f"{name}: unwritten (NaN) elements, n={n} seed={seed}"
        d_ref = (g - r).abs().max().item()
        d_f64 = (g.double() - w).abs().max().item()
        assert d_ref <= REF_TOL, f"{name}: max |kernel - reference| {d_ref:.3g}, n={n} seed={seed}"
        assert d_f64 <= F64_TOL, f"{name}: max |kernel - float64| {d_f64:.3g}, n={n} seed={seed}"
        stats[name] = (d_ref, d_f64)
    return stats


@pytest.mark.parametrize("n", [1, 7, 4096, 1 << 20])
def test_matches_reference_and_float64(kernel, n):
    _check(kernel, n)


@pytest.mark.parametrize("hc,iters,eps", [(2, 20, 1e-6), (8, 20, 1e-6), (16, 20, 1e-6), (1, 20, 1e-6), (4, 1, 1e-6), (4, 7, 1e-4)])
def test_other_hc_iters_and_eps(kernel, hc, iters, eps):
    _check(kernel, 4099, hc, iters, eps)


def test_large_mixes(kernel):
    # logits in the hundreds: softmax rows close to one-hot
    seed = _fresh_seed()
    mixes, scale, base = _inputs(4096, 4, seed, std=300.0)
    got = kernel(mixes, scale, base, out=_poisoned((4096,), 4))
    ref = hc_split_sinkhorn_torch(mixes, scale, base)
    for g, r in zip(got, ref):
        assert not bool(g.isnan().any())
        # an ulp of a logit near 1e3 is 6e-5, and the kernel's fused multiply-add
        # rounds it differently from torch's multiply then add: compare loosely
        assert (g - r).abs().max().item() < 1e-3, f"seed={seed}"


def test_leading_dims_and_determinism(kernel):
    mixes, scale, base = _inputs(0, 4, _fresh_seed(), lead=(3, 5, 7))
    pre, post, comb = kernel(mixes, scale, base)
    assert pre.shape == (3, 5, 7, 4) and post.shape == (3, 5, 7, 4) and comb.shape == (3, 5, 7, 4, 4)
    flat = kernel(mixes.reshape(-1, 24), scale, base)
    assert torch.equal(comb.reshape(-1, 4, 4), flat[2]) and torch.equal(pre.reshape(-1, 4), flat[0])
    again = kernel(mixes, scale, base)
    assert all(torch.equal(a, b) for a, b in zip((pre, post, comb), again))


def test_no_tokens(kernel):
    pre, post, comb = kernel(torch.empty(0, 24, device="cuda"), torch.ones(3, device="cuda"), torch.zeros(24, device="cuda"))
    assert pre.shape == (0, 4) and comb.shape == (0, 4, 4)


def test_nan_stays_in_its_token(kernel):
    mixes, scale, base = _inputs(5, 4, _fresh_seed())
    mixes[2, 12] = float("nan")
    pre, post, comb = kernel(mixes, scale, base)
    assert bool(comb[2].isnan().all())
    keep = [0, 1, 3, 4]
    assert bool(torch.isfinite(comb[keep]).all() and torch.isfinite(pre).all() and torch.isfinite(post).all())


def test_refuses_what_it_cannot_run(kernel):
    with pytest.raises(HcError, match="CUDA tensor"):
        kernel(torch.zeros(2, 24), torch.ones(3), torch.zeros(24))
    with pytest.raises(HcError, match="float32"):
        kernel(torch.zeros(2, 24, device="cuda", dtype=torch.float64), torch.ones(3), torch.zeros(24))
    with pytest.raises(HcError, match=r"expected \[\.\.\., 24\]"):
        kernel(torch.zeros(2, 23, device="cuda"), torch.ones(3), torch.zeros(24))
    with pytest.raises(HcError, match="power of two"):
        kernel(torch.zeros(2, 15, device="cuda"), torch.ones(3), torch.zeros(15), 3)


def test_registry_picks_and_runs_the_kernel(kernel):
    from hccli.runkernel.inputs import sample_mixes
    from hccli.kernels.registry import resolve_impl

    impl = resolve_impl("auto")
    assert (impl.name, impl.device) == ("exact", "cuda:0") and "exact" in impl.reason
    assert resolve_impl("auto", hc_mult=3).name == "torch"
    sample = sample_mixes()
    pre, post, comb = impl.run(sample.mixes, sample.hc_scale, sample.hc_base)
    ref = resolve_impl("torch", "cpu").run(sample.mixes, sample.hc_scale, sample.hc_base)
    assert comb.is_cuda and ref[2].device.type == "cpu"
    np.testing.assert_allclose(comb.cpu().numpy(), ref[2].numpy(), rtol=0, atol=REF_TOL)
    np.testing.assert_allclose(pre.cpu().numpy(), ref[0].numpy(), rtol=0, atol=REF_TOL)
