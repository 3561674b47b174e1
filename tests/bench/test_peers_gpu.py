"""The serving engines' kernels, as hc bench calls them (bench/peers.py), against the float64 chain on a GPU.

For each engine that loads (TileKernels where `tile_kernels` imports; vLLM's saved files
from .device/peers, or HC_PEERS) and each of its callables (pre, post, fused, and the
delayed twins where it has them), at token counts that take each of vLLM's branches (the
FMA kernel up to 16 tokens, its prenorm GEMMs below 128, below 1,024 and above): every
output within a TF32-class tolerance of the float64 chain (bench/site_chain.ChainCase's
oracle: the write-back, then the next pre on the streams as stored). These are the
peers' accuracy, not ours: the bounds say the bench compares like with like (the same op,
the same argument order), not that they are exact. Run with `pytest -m gpu`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

ROOT = Path(__file__).resolve().parents[2]
PEERS = Path(os.environ.get("HC_PEERS", ROOT / ".device" / "peers"))
TOKENS = (1, 16, 17, 300, 1100)
# TF32-class: mixes within ~1e-3 relative move a sigmoid or a Sinkhorn entry by a few 1e-3 (vLLM's fused
# FMA path at 16 tokens: post 3.7e-3 in run 26); a call wired wrong is off by O(1)
POST_COMB_ATOL = 1e-2


@pytest.fixture(scope="module")
def peers():
    pytest.importorskip("tilelang")
    from hccli.bench import peers as P

    got, skipped = P.load(PEERS if PEERS.is_dir() else None, (P.TILEKERNELS, P.VLLM))
    if not got:
        pytest.skip(f"no peer loads here: {skipped}")
    return got


def _case(n: int, seed: int):
    from hccli.bench.requests import SiteBenchRequest
    from hccli.bench.site_chain import ChainCase

    req = SiteBenchRequest("site-chain", dim=5120, norm_eps=1e-20)
    g = torch.Generator(device="cuda").manual_seed(seed)
    return ChainCase(torch, req, n, torch.bfloat16, "cuda", g, 1)


def _check(named: dict, oracle: dict, what: str) -> None:
    from hccli.bench.site_oracle import max_err

    for k, got in named.items():
        want = oracle[k]
        err = max_err(got, want)
        if k in ("post", "comb"):
            bound = POST_COMB_ATOL
        else:  # bf16 outputs: one rounding at the largest magnitude (streams); a few for the collapse's sum
            bound = float(want.abs().max()) * (2.0 ** -8 if k == "streams" else 2.0 ** -6)
        assert err <= bound, f"{what}: {k} max |error| {err:.3g} > {bound:.3g}"


@pytest.mark.parametrize("n", TOKENS)
def test_each_peer_callable_agrees_with_the_float64_chain(peers, n):
    from hccli.bench import peers as P

    c = _case(n, 1000 + n)
    f, res, post, comb, pm = c.sets[0]
    stored = c.oracle["own"]["streams"].to(torch.bfloat16)
    checked = 0
    for engine, peer in peers.items():
        tag = f"{engine}, {n} tokens (seed {1000 + n})"
        if peer.post:
            _check(P.outputs("post", peer.post(f, res, post, comb)), c.oracle["own"], f"{tag}, post")
            checked += 1
        if peer.pre:
            _check(P.outputs("pre", peer.pre(stored, c.op)), c.oracle["own"], f"{tag}, pre")
            checked += 1
        if peer.pre_delayed:
            _check(P.outputs("pre", peer.pre_delayed(stored, c.op, pm)), c.oracle["delayed"], f"{tag}, pre_delayed")
            checked += 1
        if peer.fused:
            _check(P.outputs("fused", peer.fused(f, res, post, comb, c.op)), c.oracle["own"], f"{tag}, fused")
            checked += 1
        if peer.fused_delayed:
            _check(P.outputs("fused", peer.fused_delayed(f, res, post, comb, c.op, pm)), c.oracle["delayed"],
                   f"{tag}, fused_delayed")
            checked += 1
    assert checked >= 2


def test_the_chain_bench_times_every_loaded_peer_and_ours(peers):
    pytest.importorskip("tilelang")
    from hccli.bench.requests import SiteBenchRequest
    from hccli.bench.site_chain import PAIR, run_chain_bench

    result = run_chain_bench(SiteBenchRequest("site-chain", tokens=(16, 1100), reps=2, warmup=1, norm_eps=1e-20,
                                              peers=str(PEERS) if PEERS.is_dir() else None))
    impls = {r.impl for r in result.rows}
    assert PAIR in impls and set(peers) <= impls, (impls, result.skipped)
    for r in result.rows:
        assert r.ms > 0 and r.max_err["streams"] <= 0.05 and (r.impl != PAIR or r.x_ours == 1.0)
