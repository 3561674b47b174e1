"""The torch reference of the split-Sinkhorn op against an independent float64 numpy version.

The float64 version below is written from the model's description (sigmoid via
logaddexp, the scales broadcast by repeat, the whole batch at once), not from
the torch code, so a slip in one is not mirrored in the other. Inputs are fresh
random numbers on every run; the seed is in every failure message.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hccli.base.errors import HcError  # noqa: E402
from f64_ref import split_sinkhorn_f64  # noqa: E402
from hccli.kernels.torch_ref import hc_split_sinkhorn_torch
from hccli.base.vocab import mix_width  # noqa: E402

TOL = 2e-6


class SeededRng:
    """numpy's Generator with its seed kept for failure messages."""

    def __init__(self, seed: int):
        self.seed_for_message = seed
        self._g = np.random.default_rng(seed)

    def __getattr__(self, name):
        return getattr(self._g, name)


@pytest.fixture
def rng():
    return SeededRng(int.from_bytes(os.urandom(4), "little"))


def _check_close(mixes, scale, base, hc, rng, iters=20, eps=1e-6, tol=TOL):
    got = hc_split_sinkhorn_torch(torch.from_numpy(mixes), torch.from_numpy(scale), torch.from_numpy(base), hc, iters, eps)
    want = split_sinkhorn_f64(mixes, scale, base, hc, iters, eps)
    for name, g, w in zip(("pre", "post", "comb"), got, want):
        assert g.dtype == torch.float32
        g = g.numpy().reshape(w.shape)
        diff = np.abs(g.astype(np.float64) - w)
        assert np.all(np.isfinite(g)), f"{name}: non-finite output (seed {rng.seed_for_message})"
        assert diff.max() <= tol, f"{name}: max |diff| {diff.max():.3g} > {tol} (seed {rng.seed_for_message})"
    return got


def _random_params(rng, hc):
    scale = rng.uniform(0.1, 2.0, 3).astype(np.float32)
    base = rng.normal(0.0, 1.0, mix_width(hc)).astype(np.float32)
    return scale, base


@pytest.mark.parametrize("hc", [1, 2, 3, 4, 8])
def test_matches_float64_on_random_inputs(hc, rng):
    mixes = rng.normal(0.0, 1.0, (257, mix_width(hc))).astype(np.float32)
    scale, base = _random_params(rng, hc)
    _check_close(mixes, scale, base, hc, rng)


@pytest.mark.parametrize("iters,eps", [(1, 1e-6), (3, 1e-4), (50, 1e-6), (20, 0.0)])
def test_matches_float64_for_other_iteration_counts_and_eps(iters, eps, rng):
    mixes = rng.normal(0.0, 1.0, (64, 24)).astype(np.float32)
    scale, base = _random_params(rng, 4)
    _check_close(mixes, scale, base, 4, rng, iters=iters, eps=eps)


# In the extreme cases below the mixes, scales and bases are picked on coarse
# binary grids so that the affine step mixes*scale + base is exact in float32:
# with logits near 1e3 an inexact affine step alone moves comb by ~1e-5, which
# says nothing about the op. Everything after it is compared as usual.


def test_large_magnitudes(rng):
    mixes = (rng.integers(-64_000, 64_000, (512, 24)) / 64).astype(np.float32)  # |mixes| up to 1e3
    scale = rng.choice([0.5, 1.0, 2.0], 3).astype(np.float32)
    base = (rng.integers(-32, 32, 24) / 8).astype(np.float32)
    _check_close(mixes, scale, base, 4, rng)


def test_huge_scale(rng):
    mixes = (rng.integers(-1024, 1025, (512, 24)) / 1024).astype(np.float32)
    scale = np.array([1e3, 1e3, 1e3], dtype=np.float32)  # 1000 = 125/128 * 1024: products stay exact
    base = (rng.integers(-128, 128, 24) / 128).astype(np.float32)
    _check_close(mixes, scale, base, 4, rng)


def test_tiny_scale(rng):
    mixes = rng.normal(0.0, 1.0, (512, 24)).astype(np.float32)
    scale = np.array([1e-6, 1e-6, 1e-6], dtype=np.float32)
    base = rng.normal(0.0, 1.0, 24).astype(np.float32)
    pre, post, comb = _check_close(mixes, scale, base, 4, rng)
    # the scale mutes the mixes: every token sees (almost) the base alone
    assert torch.allclose(comb, comb[0].expand_as(comb), atol=1e-5)


def test_peaked_softmax_row(rng):
    mixes = np.zeros((3, 24), dtype=np.float32)
    mixes[0, 8:12] = [60.0, 0.0, 0.0, 0.0]  # row 0 of token 0: one entry e^60 times the rest
    mixes[1, 8:24] = np.tile([0.0, 0.0, 0.0, 100.0], 4)  # every row peaks in column 3
    mixes[2] = (rng.integers(-200, 200, 24) / 4).astype(np.float32)
    scale = np.ones(3, dtype=np.float32)
    base = np.zeros(24, dtype=np.float32)
    _, _, comb = _check_close(mixes, scale, base, 4, rng)
    assert comb[0, 0, 0] > 0.9


def test_comb_rows_and_columns_sum_close_to_one(rng):
    mixes = rng.normal(0.0, 1.0, (1000, 24)).astype(np.float32)
    scale, base = _random_params(rng, 4)
    _, _, comb = hc_split_sinkhorn_torch(torch.from_numpy(mixes), torch.from_numpy(scale), torch.from_numpy(base))
    cols = comb.sum(dim=-2)
    rows = comb.sum(dim=-1)
    assert (cols - 1).abs().max() < 1e-5  # the last step normalises the columns
    # rows: 20 rounds bring most matrices to within float32 noise; a hard one (big
    # comb scale) may still be a percent off, which is what the model computes too
    row_err = (rows - 1).abs().amax(dim=-1)
    assert row_err.median() < 1e-3, f"seed {rng.seed_for_message}"
    assert row_err.max() < 0.1, f"seed {rng.seed_for_message}"
    assert bool((comb > 0).all())


def test_pre_and_post_ranges(rng):
    mixes = rng.normal(0.0, 30.0, (1000, 24)).astype(np.float32)
    pre, post, _ = hc_split_sinkhorn_torch(torch.from_numpy(mixes), torch.ones(3), torch.zeros(24))
    assert bool(((pre >= 1e-6) & (pre <= 1 + 1e-6)).all())
    assert bool(((post >= 0) & (post <= 2)).all())


def test_leading_dims_are_kept():
    g = torch.Generator().manual_seed(0)
    mixes = torch.randn(2, 3, 5, 24, generator=g)
    scale, base = torch.rand(3, generator=g), torch.randn(24, generator=g)
    pre, post, comb = hc_split_sinkhorn_torch(mixes, scale, base)
    assert pre.shape == (2, 3, 5, 4) and post.shape == (2, 3, 5, 4) and comb.shape == (2, 3, 5, 4, 4)
    flat = hc_split_sinkhorn_torch(mixes.reshape(-1, 24), scale, base)
    assert torch.equal(comb.reshape(-1, 4, 4), flat[2])
    one = hc_split_sinkhorn_torch(mixes[1, 2, 3], scale, base)  # a single token [24]
    assert one[2].shape == (4, 4) and torch.equal(one[2], comb[1, 2, 3])


def test_float64_input_is_computed_in_float64(rng):
    mixes = rng.normal(0.0, 1.0, (64, 24))
    scale, base = rng.uniform(0.1, 2.0, 3), rng.normal(0.0, 1.0, 24)
    got = hc_split_sinkhorn_torch(torch.from_numpy(mixes), torch.from_numpy(scale), torch.from_numpy(base))
    want = split_sinkhorn_f64(mixes, scale, base, 4)
    for g, w in zip(got, want):
        assert g.dtype == torch.float64
        np.testing.assert_allclose(g.numpy().reshape(w.shape), w, rtol=0, atol=1e-13)


def test_nan_stays_in_its_token():
    mixes = torch.zeros(3, 24)
    mixes[1, 10] = float("nan")
    pre, post, comb = hc_split_sinkhorn_torch(mixes, torch.ones(3), torch.zeros(24))
    assert bool(comb[1].isnan().all())
    assert bool(torch.isfinite(comb[0]).all() and torch.isfinite(comb[2]).all())
    assert bool(torch.isfinite(pre).all())


@pytest.mark.parametrize(
    "mixes_shape,scale_shape,base_shape,hc,needle",
    [
        ((4, 23), (3,), (24,), 4, "expected [..., 24]"),
        ((4, 24), (3,), (24,), 2, "expected [..., 8]"),
        ((), (3,), (24,), 4, "expected [..., 24]"),
        ((4, 24), (2,), (24,), 4, "hc_scale has shape [2], expected [3]"),
        ((4, 24), (3,), (23,), 4, "hc_base has shape [23], expected [24]"),
        ((4, 24), (1, 3), (24,), 4, "hc_scale"),
    ],
)
def test_bad_shapes_raise_one_line_errors(mixes_shape, scale_shape, base_shape, hc, needle):
    with pytest.raises(HcError) as info:
        hc_split_sinkhorn_torch(torch.zeros(mixes_shape), torch.zeros(scale_shape), torch.zeros(base_shape), hc)
    assert needle in info.value.message
    assert "\n" not in info.value.message
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"hc_mult": 0}, "hc_mult"),
        ({"sinkhorn_iters": 0}, "sinkhorn_iters"),
        ({"eps": -1.0}, "eps"),
        ({"eps": float("nan")}, "eps"),
    ],
)
def test_bad_op_parameters(kwargs, needle):
    with pytest.raises(HcError, match=needle):
        hc_split_sinkhorn_torch(torch.zeros(4, 24), torch.zeros(3), torch.zeros(24), **kwargs)


def test_integer_mixes_are_refused():
    with pytest.raises(HcError, match="floating-point"):
        hc_split_sinkhorn_torch(torch.zeros(4, 24, dtype=torch.int32), torch.zeros(3), torch.zeros(24))


def test_numpy_inputs_are_accepted():
    pre, post, comb = hc_split_sinkhorn_torch(np.zeros((2, 24), np.float32), np.ones(3, np.float32), np.zeros(24, np.float32))
    # all-zero logits: uniform softmax, already doubly stochastic up to eps
    assert torch.allclose(comb, torch.full((2, 4, 4), 0.25), atol=1e-5)
    assert torch.allclose(pre, torch.full((2, 4), 0.5 + 1e-6))
    assert torch.allclose(post, torch.ones(2, 4))


def test_against_float64_property():
    """A few hundred hypothesis-drawn batches, incl. wide ranges of scale and base."""
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.extra.numpy import arrays

    f = st.floats(-8.0, 8.0, width=32)

    @settings(max_examples=200, deadline=None)
    @given(
        mixes=arrays(np.float32, (3, 24), elements=f),
        scale=arrays(np.float32, (3,), elements=st.floats(float(np.float32(1e-6)), 4.0, width=32)),
        base=arrays(np.float32, (24,), elements=f),
    )
    def check(mixes, scale, base):
        got = hc_split_sinkhorn_torch(torch.from_numpy(mixes), torch.from_numpy(scale), torch.from_numpy(base))
        want = split_sinkhorn_f64(mixes, scale, base, 4)
        for g, w in zip(got, want):
            assert np.abs(g.numpy().reshape(w.shape) - w).max() <= TOL

    assert hypothesis is not None
    check()


# ---- choosing the implementation (registry) on a machine without a GPU -----------------

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="tests the choice made without a GPU")


@no_gpu
def test_auto_without_gpu_is_the_torch_reference_on_cpu():
    from hccli.kernels.registry import resolve_impl

    impl = resolve_impl("auto")
    assert (impl.name, impl.device) == ("torch", "cpu")
    assert impl.reason == "auto: no CUDA device, using the torch reference on cpu"
    pre, post, comb = impl.run(np.zeros((2, 24), np.float32), np.ones(3, np.float32), np.zeros(24, np.float32))
    assert comb.shape == (2, 4, 4) and comb.device.type == "cpu"
    assert resolve_impl("torch").device == "cpu" and resolve_impl("torch", "cpu").name == "torch"
    assert resolve_impl("auto", "cpu").reason.startswith("auto: device cpu")


@no_gpu
@pytest.mark.parametrize(
    "name,device,needle",
    [
        ("tilelang", None, "needs a CUDA GPU"),
        ("tilelang", "cpu", "CUDA devices only"),
        ("auto", "cuda", "no CUDA device"),
        ("torch", "cuda:1", "no CUDA device"),
        ("triton", None, "unknown"),
        ("auto", "meta", "not supported"),
        ("auto", "no such device", "not a device name"),
    ],
)
def test_impls_that_cannot_run_here_are_one_line_errors(name, device, needle):
    from hccli.kernels.registry import resolve_impl

    with pytest.raises(HcError) as info:
        resolve_impl(name, device)
    assert needle in info.value.message and "\n" not in info.value.message and info.value.exit_code == 2


def test_missing_torch_names_the_extra(monkeypatch):
    import sys

    from hccli.kernels.registry import resolve_impl

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    with pytest.raises(HcError, match=r"pip install 'hccli\[kernel\]'"):
        resolve_impl("auto")


def test_missing_tilelang_is_reported(monkeypatch):
    import sys

    from hccli.kernels import registry

    monkeypatch.setitem(sys.modules, "tilelang", None)
    assert "tilelang" in registry.tilelang_problem()
    if torch.cuda.is_available():
        assert "does not import" in registry.resolve_impl("auto").reason
        with pytest.raises(HcError, match=r"tilelang.*pip install 'hccli\[kernel\]'"):
            registry.resolve_impl("tilelang")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cpu_reference_makes_mkls_first_exp_a_small_one(dtype, monkeypatch):
    # torch_ref.mkl_exp_ready: MKL's VML picks its exp kernel on the first call, and a first call
    # split over threads can take a low-accuracy kernel for one chunk (pytorch/pytorch#188792; seen
    # here as `hc run-kernel --compare` of a file saved a moment earlier failing now and then), so
    # the reference warms exp of its dtype first, once per process
    from hccli.kernels import torch_ref

    seen = []
    for owner in (torch, torch.Tensor):  # torch.exp(t) for the warm-up, t.exp() in the reference
        real = owner.exp

        def exp(t, *args, real=real, **kwargs):
            seen.append(int(t.numel()))
            return real(t, *args, **kwargs)

        monkeypatch.setattr(owner, "exp", exp)
    torch_ref._first_exp.cache_clear()
    mixes = torch.zeros(4096, mix_width(4), dtype=getattr(torch, dtype))
    for _ in range(2):
        hc_split_sinkhorn_torch(mixes, torch.ones(3), torch.zeros(mix_width(4)), 4, 3, 1e-6)
    # one small exp first, then only the reference's large ones (pre, post, comb: three a call)
    assert seen[0] == 16 and len(seen) == 7 and min(seen[1:]) >= 4096 * 4
