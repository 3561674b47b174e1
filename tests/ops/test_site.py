"""The site's forward (hccli/ops/site.py): each step against a float64 oracle written here, the
narrow formats against torch's and TileKernels' own conversions, and the V4 and V4.1 chains
against an independent transcription of the published block forward (DeepSeek's
inference/model.py, in torch, below)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SAMPLES
from f64_ref import split_sinkhorn_f64

from hccli.ops import site as S
from hccli.base.floats import bf16_bits, to_bf16, to_f16, to_tf32
from hccli.runsite.source import open_model, sublayer_outputs

# ---- each step against float64 ------------------------------------------------------------------


def _inputs(seed=0, t=8, hc=4, dim=32):
    rng = np.random.default_rng(seed)
    x = to_bf16(rng.standard_normal((t, hc, dim)).astype(np.float32) * np.float32(3))
    fn = (rng.standard_normal(((2 + hc) * hc, hc * dim)) * 0.05).astype(np.float32)
    base = rng.normal(0, 0.5, (2 + hc) * hc).astype(np.float32)
    scale = rng.uniform(0.3, 1.5, 3).astype(np.float32)
    f = to_bf16(rng.standard_normal((t, dim)).astype(np.float32))
    return x, fn, base, scale, f


def test_mixes_are_the_projection_then_the_rms_factor():
    x, fn, *_ = _inputs()
    r, m = S.project(x, fn, 1e-6)
    flat = x.reshape(8, -1).astype(np.float64)
    r64 = 1 / np.sqrt((flat ** 2).mean(-1) + 1e-6)
    assert r.dtype == np.float32 and r.shape == (8,)
    np.testing.assert_allclose(r, r64, rtol=2e-6)
    np.testing.assert_allclose(m, (flat @ fn.astype(np.float64).T) * r64[:, None], rtol=1e-4, atol=1e-5)
    # norm_eps is the statistic's own: a token of tiny streams shows it
    tiny = x * np.float32(1e-4)
    r20, _ = S.project(tiny, fn, 1e-20)
    r6, _ = S.project(tiny, fn, 1e-6)
    assert r20[0] / r6[0] > 1.5


def test_split_is_the_one_split_op_and_matches_float64():
    x, fn, base, scale, f = _inputs()
    out = S.forward(S.SiteInputs("attn", x, fn, base, scale, f), S.SiteParams("v4", 4, 20, 1e-6, 1e-6))
    pre, post, comb = split_sinkhorn_f64(out["mixes"], scale, base, 4)
    np.testing.assert_allclose(out["pre"], pre, rtol=1e-6)
    np.testing.assert_allclose(out["post"], post, rtol=1e-6)
    np.testing.assert_allclose(out["comb"], comb, rtol=1e-5, atol=1e-7)


def test_collapse_and_write_back_against_float64():
    x, fn, base, scale, f = _inputs()
    rng = np.random.default_rng(3)
    w = rng.uniform(0, 1, (8, 4)).astype(np.float32)
    post = rng.uniform(0, 2, (8, 4)).astype(np.float32)
    comb = rng.uniform(0, 1, (8, 4, 4)).astype(np.float32)
    x64 = x.astype(np.float64)
    h64 = (w[:, :, None] * x64).sum(1)
    np.testing.assert_allclose(S.collapse(x, w), h64, rtol=1e-6, atol=1e-6)
    # write-back reads comb[j, k] for stream k: comb transposed against the streams
    y64 = post[:, :, None] * f[:, None, :] + np.einsum("tjk,tjd->tkd", comb.astype(np.float64), x64)
    np.testing.assert_allclose(S.write_back(f, x, post, comb), y64, rtol=1e-6, atol=1e-5)
    assert not np.allclose(S.write_back(f, x, post, np.swapaxes(comb, 1, 2)), y64, atol=1e-3)
    # the forward casts both to the streams' dtype
    out = S.forward(S.SiteInputs("attn", x, fn, base, scale, f), S.SiteParams("v4", 4, 20, 1e-6, 1e-6))
    assert np.array_equal(out["collapsed"], to_bf16(out["collapsed"]))
    h = (out["pre"].astype(np.float64)[:, :, None] * x64).sum(1)
    assert np.abs(out["collapsed"] - h).max() <= np.abs(h).max() * 2 ** -8


def test_head_mix_is_pre_only():
    x, _, _, _, _ = _inputs()
    rng = np.random.default_rng(1)
    fn, base, scale = (rng.standard_normal((4, 128)) * 0.05).astype(np.float32), np.zeros(4, np.float32), \
        np.ones(1, np.float32)
    out = S.forward(S.SiteInputs("head", x, fn, base, scale), S.SiteParams("v4", 4, 20, 1e-6, 1e-6))
    assert set(out) == {"rsqrt", "mixes", "pre", "collapsed"}
    m64 = out["mixes"].astype(np.float64)
    np.testing.assert_allclose(out["pre"], 1 / (1 + np.exp(-m64)) + 1e-6, rtol=1e-6)


def test_formats_round_as_their_producers():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.standard_normal(5000).astype(np.float32) * 10 ** rng.uniform(-8, 8, 5000),
                        np.array([0, -0.0, np.inf, -np.inf, 3.4e38, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1e-40],
                                 np.float32)]).astype(np.float32)
    t = torch.from_numpy(x)
    assert np.array_equal(to_bf16(x), t.to(torch.bfloat16).float().numpy())
    assert np.array_equal(bf16_bits(x), t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16))
    assert np.isnan(to_bf16(np.array([np.nan], np.float32)))[0]
    signalling = np.array([0x7F800001, 0xFF800100], np.uint32).view(np.float32)  # payload below bf16's bits
    decoded = (bf16_bits(signalling).astype(np.uint32) << np.uint32(16)).view(np.float32)
    assert np.isnan(decoded).all()  # a NaN, not an infinity (torch makes it 0x7FFF, we quiet it: both NaN)
    # TileKernels' round_to_tf32 adds 0x1000 to the bits; the tensor core keeps the top 19
    finite = x[np.isfinite(x) & (np.abs(x) < 3e38)]
    tk = ((finite.view(np.int32).astype(np.int64) + 0x1000) & ~0x1FFF).astype(np.int32).view(np.float32)
    assert np.array_equal(to_tf32(finite), tk)
    assert np.array_equal(to_f16(finite), torch.from_numpy(finite).half().float().numpy())


# ---- the chains against the published block forward -----------------------------------------

def _published(torch, model, params, streams, fs):
    """DeepSeek's inference/model.py, V4 and V4.1, transcribed in torch with stub sub-layers that
    return the given outputs: {site key: (collapsed, streams out or None)}."""
    F = torch.nn.functional
    hc, iters, eps, norm_eps = params.hc_mult, params.iters, params.hc_eps, params.norm_eps
    dtype = torch.bfloat16 if params.streams_dtype == "bf16" else torch.float32

    def hc_split_sinkhorn(mixes, scale, base):
        pre = torch.sigmoid(mixes[..., :hc] * scale[0] + base[:hc]) + eps
        post = 2 * torch.sigmoid(mixes[..., hc:2 * hc] * scale[1] + base[hc:2 * hc])
        comb = (mixes[..., 2 * hc:] * scale[2] + base[2 * hc:]).unflatten(-1, (hc, hc))
        comb = comb.softmax(-1) + eps
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
        for _ in range(iters - 1):
            comb = comb / (comb.sum(-1, keepdim=True) + eps)
            comb = comb / (comb.sum(-2, keepdim=True) + eps)
        return pre, post, comb

    def tensors(ref):
        return [torch.from_numpy(np.asarray(a)) for a in model.tensors(ref)]

    def hc_mixes(x, ref):  # V4.1 Block.hc_mixes
        fn, base, scale = tensors(ref)
        x = x.flatten(2).float()
        rsqrt = torch.rsqrt(x.square().mean(-1, keepdim=True) + norm_eps)
        return hc_split_sinkhorn(F.linear(x, fn) * rsqrt, scale, base)

    def hc_pre_41(x, pre_mix):  # V4.1 Block.hc_pre
        return torch.sum(pre_mix.unsqueeze(-1) * x.float(), dim=2).to(x.dtype)

    def hc_pre_4(x, ref):  # V4 Block.hc_pre
        fn, base, scale = tensors(ref)
        shape, dt = x.size(), x.dtype
        x = x.flatten(2).float()
        rsqrt = torch.rsqrt(x.square().mean(-1, keepdim=True) + norm_eps)
        pre, post, comb = hc_split_sinkhorn(F.linear(x, fn) * rsqrt, scale, base)
        return torch.sum(pre.unsqueeze(-1) * x.view(shape), dim=2).to(dt), post, comb

    def hc_head(x, ref):  # V4 ParallelHead.hc_head
        fn, base, scale = tensors(ref)
        shape, dt = x.size(), x.dtype
        x = x.flatten(2).float()
        rsqrt = torch.rsqrt(x.square().mean(-1, keepdim=True) + norm_eps)
        pre = torch.sigmoid((F.linear(x, fn) * rsqrt) * scale + base) + eps
        return torch.sum(pre.unsqueeze(-1) * x.view(shape), dim=2).to(dt)

    def hc_post(x, residual, post, comb):  # Block.hc_post, both
        y = post.unsqueeze(-1) * x.unsqueeze(-2) + torch.sum(comb.unsqueeze(-1) * residual.unsqueeze(-2), dim=2)
        return y.type_as(x)

    seen = {}

    def sublayer(ref, x):  # attn(attn_norm(x)) / ffn(ffn_norm(x)): records its input, returns f
        seen[ref.key] = [x[0].float().numpy()]
        return torch.from_numpy(fs[ref.key]).to(dtype)[None]

    def block(h, refs, pre_mix=None):
        a, f = refs
        if params.family == "v4.1":  # Block.forward with pre-mix shifting
            residual = h
            attn_pre, attn_post, attn_comb = hc_mixes(h, a)
            h = hc_post(sublayer(a, hc_pre_41(h, pre_mix)), residual, attn_post, attn_comb)
            seen[a.key].append(h[0].float().numpy())
            residual = h
            ffn_pre, ffn_post, ffn_comb = hc_mixes(h, f)
            h = hc_post(sublayer(f, hc_pre_41(h, attn_pre)), residual, ffn_post, ffn_comb)
            seen[f.key].append(h[0].float().numpy())
            return h, ffn_pre
        residual = h  # V4 Block.forward
        x, post, comb = hc_pre_4(h, a)
        h = hc_post(sublayer(a, x), residual, post, comb)
        seen[a.key].append(h[0].float().numpy())
        residual = h
        x, post, comb = hc_pre_4(h, f)
        h = hc_post(sublayer(f, x), residual, post, comb)
        seen[f.key].append(h[0].float().numpy())
        return h, None

    for stack in ("backbone", "stages"):
        refs = [r for r in model.plan if r.stack == stack]
        h = torch.from_numpy(streams).to(dtype)[None]
        pre_mix = torch.zeros(1, streams.shape[0], hc)  # make_identity_pre_mix: one-hot on copy 0
        pre_mix[:, :, 0] = 1.0
        body = [r for r in refs if r.site != "head"]
        for i in range(0, len(body), 2):
            h, pre_mix = block(h, body[i:i + 2], pre_mix)
        for r in refs:
            if r.site == "head":  # V4: hc_head; V4.1: h = layer.hc_pre(h, pre_mix) before the norm
                y = hc_head(h, r) if params.family == "v4" else hc_pre_41(h, pre_mix)
                seen[r.key] = [y[0].float().numpy(), None]
    return seen


@pytest.mark.parametrize("config", ["tiny-v4.1.json", "tiny-v4.hf.json"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_chain_matches_the_published_forward(config, dtype):
    torch = pytest.importorskip("torch")
    model = open_model(str(SAMPLES / config), seed=3)
    params = S.SiteParams(model.params.family, 4, model.params.iters, model.params.hc_eps, model.params.norm_eps,
                          dtype)
    x0 = S.cast(S.sample_streams(6, 1, 4, model.dim), dtype)
    f_of, _ = sublayer_outputs("random", model.plan, 1, x0, dtype)
    fs = {r.key: f_of(r) for r in model.plan if r.site != "head"}
    chain = list(S.run_chain(model.plan, params, x0, model.tensors, lambda r: fs[r.key]))
    assert [c.ref.key for c in chain] == [r.key for r in model.plan]
    want = _published(torch, model, params, x0, fs)
    # f32 streams: float32 rounding in another order; bf16: the same, rounded to bf16 at each site
    rtol = 2e-4 if dtype == "f32" else 2 ** -5
    for c in chain:
        h, y = want[c.ref.key]
        scale = np.abs(h).max(axis=-1, keepdims=True) + 1e-30
        assert (np.abs(c.steps["collapsed"] - h) <= rtol * scale).all(), c.ref.key
        if y is not None:
            scale = np.abs(y).max(axis=(-1, -2), keepdims=True) + 1e-30
            assert (np.abs(c.steps["streams_out"] - y) <= rtol * scale).all(), c.ref.key


def test_v41_hands_each_pre_to_the_next_site_and_seeds_each_stack():
    model = open_model(str(SAMPLES / "tiny-v4.1.json"))
    params = model.params
    x0 = S.cast(S.sample_streams(4, 0, 4, model.dim), "bf16")
    f_of, _ = sublayer_outputs("random", model.plan, 0, x0, "bf16")
    chain = list(S.run_chain(model.plan, params, x0, model.tensors, f_of))
    by = {c.ref.key: c for c in chain}
    assert np.array_equal(by["0.attn"].inputs.pre_mix, S.one_hot(4, 4))
    assert np.array_equal(by["0.attn"].steps["collapsed"], x0[:, 0])  # layer 0 reads copy 0
    assert np.array_equal(by["0.ffn"].inputs.pre_mix, by["0.attn"].steps["pre"])
    assert np.array_equal(by["1.attn"].inputs.pre_mix, by["0.ffn"].steps["pre"])
    last = f"{model.n_layers - 1}.ffn"
    end = by[f"{model.n_layers + model.n_stages}.head"]
    assert np.array_equal(end.inputs.pre_mix, by[last].steps["pre"]) and set(end.steps) == {"collapsed"}
    first_stage = by[f"{model.n_layers}.attn"]  # the DSpark stack: its own one-hot, then chained
    assert np.array_equal(first_stage.inputs.pre_mix, S.one_hot(4, 4))
    assert np.array_equal(first_stage.inputs.streams, x0)
    second = by[f"{model.n_layers + 1}.attn"]
    assert np.array_equal(second.inputs.pre_mix, by[f"{model.n_layers}.ffn"].steps["pre"])


def test_v4_collapses_with_its_own_pre():
    model = open_model(str(SAMPLES / "tiny-v4.hf.json"))
    x0 = S.cast(S.sample_streams(4, 0, 4, model.dim), "bf16")
    f_of, _ = sublayer_outputs("zero", model.plan, 0, x0, "bf16")
    chain = list(S.run_chain(model.plan, model.params, x0, model.tensors, f_of))
    for c in chain:
        assert c.inputs.pre_mix is None
        own = (c.steps["pre"].astype(np.float64)[:, :, None] * c.inputs.streams).sum(1)
        assert np.abs(c.steps["collapsed"] - own).max() <= np.abs(own).max() * 2 ** -7
    assert [c.ref.key for c in chain if c.ref.site == "head"] == [f"{model.n_layers + model.n_stages}.head",
                                                                    f"{model.n_layers + model.n_stages - 1}.head"]


def test_diff_and_run_kernel_project_through_the_site(monkeypatch):
    """`hc diff`'s effect and `run-kernel --hidden` use the site's projection: written once."""
    from hccli.diffing import effect as DF
    from hccli.runkernel import inputs

    calls = []
    real = S.project

    def counting(*a, **k):
        calls.append(a[0].shape)
        return real(*a, **k)
    monkeypatch.setattr(S, "project", counting)
    x, fn, *_ = _inputs(t=3)
    want = real(x, fn, 1e-6)[1]
    assert np.array_equal(DF.site_mixes(x, fn, 1e-6), want)
    got = inputs.mixes_from_hidden(x.reshape(1, 3, 4, 32), fn, 1e-6)
    assert got.shape == (1, 3, 24) and np.array_equal(got[0], want)
    assert calls == [(3, 4, 32), (3, 4, 32)]
