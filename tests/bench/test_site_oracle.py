"""The site benches' float64 oracle and measures on the CPU (the benches themselves need a GPU): the
eager chain's own outputs sit within one rounding of it, so a slip in the oracle's bookkeeping (a
name, a term, a chunk) fails here rather than on the device machine."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _case(op, n=300, dim=64, seed=3):
    from hccli.bench.requests import SiteBenchRequest
    from hccli.bench.site_oracle import SiteCase

    req = SiteBenchRequest(op, dim=dim, norm_eps=1e-6)
    return SiteCase(torch, req, n, torch.bfloat16, "cpu", torch.Generator().manual_seed(seed), 2), req


@pytest.mark.parametrize("collapse", ["own", "delayed"])
def test_the_eager_pre_is_within_one_rounding_of_the_oracle(collapse):
    from hccli.bench.site_oracle import max_err
    from hccli.kernels.site_eager import site_pre_eager

    case, req = _case("site-pre")
    x, pm = case.sets[0]
    got = dict(site_pre_eager(x, case.fn, case.scale, case.base, hc_mult=4, sinkhorn_iters=req.sinkhorn_iters,
                              eps=req.eps, norm_eps=req.norm_eps, pre_mix=None if collapse == "own" else pm).items())
    assert set(got) == set(case.oracle[collapse])
    assert max(max_err(v, case.oracle[collapse][k]) for k, v in got.items() if k != "collapsed") < 1e-4
    r = case.stream_roundings(torch, "site-pre", got, collapse)
    assert 0 < r <= 1.0
    got["collapsed"] = got["collapsed"] + 0.5  # far off: many roundings
    assert case.stream_roundings(torch, "site-pre", got, collapse) > 10


def test_the_eager_write_back_is_within_one_rounding_of_the_oracle():
    from hccli.kernels.site_eager import site_write_eager

    case, _ = _case("site-write")
    out = site_write_eager(*case.sets[0])
    assert 0 < case.stream_roundings(torch, "site-write", {"out": out}, "") <= 1.0
    assert case.stream_roundings(torch, "site-write", {"out": out * 1.5}, "") > 10
