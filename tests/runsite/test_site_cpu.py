"""The site kernels' CPU-side parts: the eager chain, fn's split into bfloat16 parts, the split count,
the registry's fallbacks and `hc bench --op site-*` without a GPU. No GPU, no tilelang needed."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import run_hc  # noqa: E402

from hccli.base.errors import HcError  # noqa: E402


def _f64_forward(x, fn, scale, base, iters, eps, norm_eps, pre_mix):
    """Issue 24's forward in float64 numpy, written out here."""
    x = np.asarray(x, dtype=np.float64)
    t = x.shape[0]
    flat = x.reshape(t, -1)
    mixes = flat @ np.asarray(fn, np.float64).T / np.sqrt((flat ** 2).mean(-1, keepdims=True) + norm_eps)
    s, b = np.asarray(scale, np.float64), np.asarray(base, np.float64)
    pre = 1 / (1 + np.exp(-(mixes[:, :4] * s[0] + b[:4]))) + eps
    post = 2 / (1 + np.exp(-(mixes[:, 4:8] * s[1] + b[4:8])))
    c = (mixes[:, 8:] * s[2] + b[8:]).reshape(t, 4, 4)
    c = np.exp(c - c.max(-1, keepdims=True))
    c = c / c.sum(-1, keepdims=True) + eps
    c = c / (c.sum(-2, keepdims=True) + eps)
    for _ in range(iters - 1):
        c = c / (c.sum(-1, keepdims=True) + eps)
        c = c / (c.sum(-2, keepdims=True) + eps)
    w = pre if pre_mix is None else np.asarray(pre_mix, np.float64)
    return mixes, pre, post, c, (w[:, :, None] * x).sum(1)


@pytest.mark.parametrize("own", [True, False])
def test_eager_chain_in_float64_is_the_forward(own):
    from hccli.kernels.site_eager import site_pre_eager

    g = torch.Generator().manual_seed(3)
    x = torch.randn(7, 4, 64, generator=g, dtype=torch.float64)
    fn = torch.randn(24, 256, generator=g, dtype=torch.float64) / 16
    scale, base = torch.rand(3, generator=g, dtype=torch.float64) + 0.1, torch.randn(24, generator=g, dtype=torch.float64)
    pm = None if own else torch.rand(7, 4, generator=g, dtype=torch.float64)
    got = site_pre_eager(x, fn, scale, base, sinkhorn_iters=20, eps=1e-6, norm_eps=1e-20, pre_mix=pm)
    want = _f64_forward(x, fn, scale, base, 20, 1e-6, 1e-20, None if own else pm)
    for (name, g_), w in zip(got.items(), want):
        assert g_.dtype == torch.float64, name
        np.testing.assert_allclose(g_.numpy(), w, rtol=1e-12, atol=1e-14, err_msg=name)


def test_eager_sums_over_streams_left_to_right_each_op_rounded():
    from hccli.kernels.site_eager import collapse_eager, site_write_eager

    g = torch.Generator().manual_seed(5)
    x = torch.randn(50, 4, 96, generator=g).bfloat16()
    pm = torch.rand(50, 4, generator=g)
    xs = x.float().numpy()
    w = pm.numpy()
    acc = w[:, 0:1] * xs[:, 0]
    for i in range(1, 4):
        acc = (acc + (w[:, i:i + 1] * xs[:, i]).astype(np.float32)).astype(np.float32)
    assert torch.equal(collapse_eager(x, pm), torch.from_numpy(acc).bfloat16())
    f = torch.randn(50, 96, generator=g).bfloat16()
    post, comb = torch.rand(50, 4, generator=g) * 2, torch.rand(50, 4, 4, generator=g)
    p, c, fs = post.numpy(), comb.numpy(), f.float().numpy()
    out = np.empty((50, 4, 96), np.float32)
    for j in range(4):
        s = c[:, 0, j, None] * xs[:, 0]
        for i in range(1, 4):
            s = (s + (c[:, i, j, None] * xs[:, i]).astype(np.float32)).astype(np.float32)
        out[:, j] = ((p[:, j, None] * fs).astype(np.float32) + s).astype(np.float32)
    assert torch.equal(site_write_eager(f, x, post, comb), torch.from_numpy(out).bfloat16())


@pytest.mark.parametrize("stream", ["bfloat16", "float32"])
def test_fn_splits_into_three_exact_bfloat16_parts(stream):
    from hccli.kernels.site_pre import pack_fn
    from hccli.kernels.site_tl import DEFAULT_PROJ

    g = torch.Generator().manual_seed(7)
    fn = torch.randn(24, 4 * 128, generator=g) * torch.logspace(-30, 30, 4 * 128).float()
    packed = pack_fn(fn, 128, stream)
    bd = DEFAULT_PROJ.dim_step(stream)
    assert packed.data.dtype == torch.bfloat16 and tuple(packed.data.shape) == (128 // bd, 80, 4 * bd)
    rows = packed.data.reshape(128 // bd, 80, 4, bd).permute(1, 2, 0, 3).reshape(80, 4 * 128).double()
    assert torch.equal(rows[0:24] + rows[24:48] + rows[48:72], fn.double())  # exact, in any order
    assert bool((rows[72:] == 0).all())
    with pytest.raises(HcError, match=r"expected float \[24, 512\]"):
        pack_fn(fn[:, :100], 128, stream)


def test_split_count_and_block_fill_the_gpu():
    from hccli.kernels.site_pre import choose_launch
    from hccli.kernels.site_tl import DEFAULT_PROJ, WIDE_PROJ, splits_for

    assert splits_for(5120, "bfloat16") == (1, 8, 16) and splits_for(64, "bfloat16") == (1,)
    assert splits_for(7168, "bfloat16") == (1, 8, 16) and splits_for(7168, "float32") == (1, 8, 16)
    counts = (1, 128, 1024, 8192, 16000, 16001, 65536)
    got = [choose_launch(n, 5120, "bfloat16", 132) for n in counts]
    assert [s for _, s in got] == [16, 16, 8, 1, 1, 1, 1]
    # 128-token blocks where at least 95% of the 132 SMs get one (126 tiles from 16,001 tokens)
    assert [t.block_tokens for t, _ in got] == [64, 64, 64, 64, 64, 128, 128]
    assert choose_launch(65536, 5120, "float32", 132) == (DEFAULT_PROJ, 1)  # measured for bfloat16 only
    assert choose_launch(8192, 64, "bfloat16", 132) == (DEFAULT_PROJ, 1)
    # one packed fn serves both: the same features a step
    assert WIDE_PROJ.dim_step("bfloat16") == DEFAULT_PROJ.dim_step("bfloat16")
    assert WIDE_PROJ.threads == 2 * DEFAULT_PROJ.threads == 2 * WIDE_PROJ.block_tokens


def test_registry_falls_back_to_the_eager_chain_without_a_gpu(monkeypatch):
    from hccli.kernels.registry import resolve_site

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    impl = resolve_site("site_pre", dim=5120)
    assert impl.name == "eager" and impl.device == "cpu" and "no CUDA device" in impl.reason
    assert impl.function().__name__ == "site_pre_eager"
    with pytest.raises(HcError, match="unknown"):
        resolve_site("site_post")


@pytest.mark.parametrize("args,message", [
    (("--op", "site-mix"), "--op 'site-mix' is unknown"),
    (("--op", "site-pre", "--stream-dtype", "f16"), "--stream-dtype 'f16'"),
    (("--op", "site-pre", "--hc-mult", "3"), "hc 4 only"),
    (("--op", "site-write", "--device", "cpu"), "device cpu"),
])
def test_bench_site_ops_refuse_in_one_line(args, message):
    r = run_hc("bench", *args)
    assert r.exit_code == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_bench_site_op_bounds_the_token_count(monkeypatch):
    from hccli.bench import site as bench_site
    from hccli.bench.requests import SiteBenchRequest
    from hccli.base.limits import MAX_SITE_BENCH_BYTES

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    most = MAX_SITE_BENCH_BYTES // (5 * 5120 * 2)
    with pytest.raises(HcError, match=f"expected 1 to {most:,} tokens"):
        bench_site.run_site_bench(SiteBenchRequest("site-pre", (most + 1,)))


def test_tilekernels_is_optional_and_its_absence_is_said():
    import importlib.util

    from hccli.bench.peers import tilekernels

    peer, why = tilekernels()
    if importlib.util.find_spec("tile_kernels") is None:
        assert peer is None and why.startswith("tile_kernels does not import (ModuleNotFoundError")
    else:
        assert (peer is None) == (why is not None)


def test_site_bench_renders_rows_errors_and_what_was_skipped():
    from rich.console import Console

    from hccli.cli.render import bench_site as render_bench_site
    from hccli.bench.op import Machine
    from hccli.bench.site import SiteBenchResult, SiteBenchRow

    row = SiteBenchRow("site_pre", "delayed", 8192, 0.134, 0.13, 10, 15, 61e6, 3130.0, 74.7, 21.1,
                  {"mixes": 2.1e-6, "collapsed": 0.023}, {"collapsed": 0.5}, {"pre": True, "collapsed": False})
    result = SiteBenchResult("site-pre", Machine("cuda:0", "NVIDIA [bold]H200", "580", {"torch": "2"}, "now"), 4, 5120,
                             "bfloat16", 20, 1e-6, 1e-20, 51280, 4191.0, "median", (row,),
                             {"tilekernels": "tile_kernels does not import (ModuleNotFoundError: x)"})
    console = Console(record=True, width=250)
    for r in render_bench_site.renderables(result):
        console.print(r)
    text = console.export_text()
    assert "61.0 M" in text and "74.7" in text and "collapsed 0.023 (0.5 roundings)" in text
    assert "no: collapsed" in text and "NVIDIA [bold]H200" in text
    assert "tilekernels: not timed (tile_kernels does not import" in text
