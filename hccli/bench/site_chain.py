"""`hc bench --op site-chain`: site k's write-back then site k+1's pre, ours beside the engines'. No printing.

Per token count and collapse (V4's own-site pre, V4.1's delayed pre mix), as people call each:
- site_write+site_pre: ours as a pair, site_write into the new streams, then site_pre on
  them (public calls with `out=`);
- tilekernels (own): TileKernels' mhc_post_fwd, then mhc_pre_big_fuse on its output;
- vllm / sglang: the engine's fused post-pre wrapper (bench/peers.py, from --peers DIR),
  and its delayed twin where its saved files have one.
Every output's max |error| against the float64 chain on the first input set: the new
streams (the write-back in float64), then the next site's pre in float64 on those streams
as the model stores them (rounded once to the streams' dtype) -> post, comb, collapsed.
Inputs rotate past the L2 cache and times are site_oracle.measure's, as for the other
site ops; x ours: our pair's time over this one's (above 1: faster than our pair).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from hccli.base.jsonable import INLINE
from hccli.bench import op as bench
from hccli.bench import peers as P
from hccli.bench.requests import SiteBenchRequest
from hccli.bench.site import prepare
from hccli.bench.site_host import HC
from hccli.bench.site_oracle import max_err, statistic, time_impls

CHAIN_OP = "site-chain"
PAIR = "site_write+site_pre"
CHAIN_IMPLS = (PAIR, P.TILEKERNELS, P.VLLM, P.SGLANG)
OUTPUTS = ("streams", "post", "comb", "collapsed")


def bytes_per_token(dim: int, elem: int) -> int:
    """Fewest bytes of the fused chain: f and the residual read, the new streams and the collapse
    written (the pair reads the streams once more); post, comb in and out, the pre mix for V4.1."""
    return (2 * HC + 2) * dim * elem + 4 * (2 * (HC + HC * HC) + HC)


@dataclass(frozen=True)
class ChainBenchRow:
    impl: str
    collapse: str  # "own" (V4) or "delayed" (V4.1)
    tokens: int
    ms: float
    ms_min: float
    calls: int
    samples: int
    tokens_per_s: float
    gbps: float
    pct_copy: float
    x_ours: float | None  # our pair's ms (same collapse and count) / this ms
    max_err: dict[str, float]  # output -> max |this - float64| (NaN: NaN where the oracle has none)


@dataclass(frozen=True)
class ChainBenchResult:
    op: str
    machine: bench.Machine = field(metadata=INLINE)
    hc_mult: int
    dim: int
    stream: str
    sinkhorn_iters: int
    eps: float
    norm_eps: float
    bytes_per_token: int
    copy_gbps: float
    statistic: str
    rows: tuple[ChainBenchRow, ...]
    skipped: dict[str, str]


class ChainCase:
    """One token count's inputs (sets of f, residual, post, comb, pre_mix; the next site's weights) and
    the float64 chain on set 0, per collapse."""

    def __init__(self, torch: Any, req: SiteBenchRequest, n: int, dtype: Any, dev: str, g: Any, nsets: int) -> None:
        from hccli.kernels.torch_ref import hc_split_sinkhorn_torch

        dim, w = req.dim, (2 + HC) * HC
        self.scale = (torch.rand(3, device=dev, generator=g) * 1.9 + 0.1).contiguous()
        self.base = torch.randn(w, device=dev, generator=g).contiguous()
        self.fn = (torch.randn(w, HC * dim, device=dev, generator=g) / math.sqrt(HC * dim)).contiguous()
        self.op = P.SiteOp(self.fn, self.scale, self.base, req.norm_eps, req.eps, req.sinkhorn_iters)
        self.sets = []
        for _ in range(nsets):
            f = torch.randn(n, dim, device=dev, generator=g).to(dtype)
            res = torch.randn(n, HC, dim, device=dev, generator=g).to(dtype)
            _, post, comb = hc_split_sinkhorn_torch(torch.randn(n, w, device=dev, generator=g), self.scale,
                                                    self.base, HC, req.sinkhorn_iters, req.eps)
            pm = torch.rand(n, HC, device=dev, generator=g) + 1e-6
            self.sets.append((f, res, post.contiguous(), comb.contiguous(), pm))
        self.oracle = self._oracle(torch, req, dtype)

    def _oracle(self, torch: Any, req: SiteBenchRequest, dtype: Any) -> dict[str, dict[str, Any]]:
        from hccli.kernels.site_eager import site_pre_eager, site_write_eager

        d, step = torch.float64, 8192  # by chunks of tokens: float64 temporaries of 64K tokens would not fit
        fn, scale, base = self.fn.to(d), self.scale.to(d), self.base.to(d)
        parts: dict[str, dict[str, list[Any]]] = {c: {k: [] for k in OUTPUTS[1:]} for c in ("own", "delayed")}
        new_streams = []
        for lo in range(0, self.sets[0][0].shape[0], step):
            f, res, post, comb, pm = (t[lo:lo + step].to(d) for t in self.sets[0])
            streams = site_write_eager(f, res, post, comb)
            new_streams.append(streams)
            stored = streams.to(dtype).to(d)  # what the model keeps between sites, and the next pre reads
            for collapse, mix in (("own", None), ("delayed", pm)):
                r = site_pre_eager(stored, fn, scale, base, hc_mult=HC, sinkhorn_iters=req.sinkhorn_iters,
                                   eps=req.eps, norm_eps=req.norm_eps, pre_mix=mix)
                for k, v in zip(OUTPUTS[1:], (r.post, r.comb, r.collapsed)):
                    parts[collapse][k].append(v)
        streams = torch.cat(new_streams)  # one tensor for both collapses
        return {c: {"streams": streams, **{k: torch.cat(v) for k, v in got.items()}} for c, got in parts.items()}


Make = Callable[[ChainCase], tuple[Callable[[int], Any], Callable[[], dict[str, Any]]]]


def _ours(torch: Any, req: SiteBenchRequest, collapse: str) -> Make:
    from hccli.kernels.site_eager import SitePre
    from hccli.kernels.site_pre import pack_fn, site_pre
    from hccli.kernels.site_write import site_write

    iters, eps, norm_eps = req.sinkhorn_iters, req.eps, req.norm_eps

    def make(c: ChainCase) -> Any:
        packed = pack_fn(c.fn, req.dim, req.stream)
        n, dev, dt = c.sets[0][0].shape[0], c.fn.device, c.sets[0][0].dtype
        outs = [(torch.empty_like(s[1]), SitePre(
            torch.empty(n, 24, device=dev), torch.empty(n, HC, device=dev), torch.empty(n, HC, device=dev),
            torch.empty(n, HC, HC, device=dev), torch.empty(n, req.dim, dtype=dt, device=dev))) for s in c.sets]

        def call(i: int) -> Any:
            f, res, post, comb, pm = c.sets[i % len(c.sets)]
            streams, pre_out = outs[i % len(c.sets)]
            site_write(f, res, post, comb, out=streams)
            return streams, site_pre(streams, packed, c.scale, c.base, sinkhorn_iters=iters, eps=eps,
                                     norm_eps=norm_eps, pre_mix=None if collapse == "own" else pm, out=pre_out)
        return call, lambda: _named(call(0))
    return make


def _named(got: tuple[Any, Any]) -> dict[str, Any]:
    streams, pre = got
    return {"streams": streams.clone(), "post": pre.post.clone(), "comb": pre.comb.clone(),
            "collapsed": pre.collapsed.clone()}


def _tk_pair(peer: P.Peer) -> Make:
    def make(c: ChainCase) -> Any:
        def call(i: int) -> Any:
            f, res, post, comb, _ = c.sets[i % len(c.sets)]
            new = peer.post(f, res, post, comb)
            return new, peer.pre(new, c.op)

        def outputs() -> dict[str, Any]:
            new, pre = call(0)
            return {**P.outputs("pre", pre), **P.outputs("post", new)}
        return call, outputs
    return make


def _engine_fused(fused: Callable[..., Any], collapse: str) -> Make:
    def make(c: ChainCase) -> Any:
        def call(i: int) -> Any:
            f, res, post, comb, pm = c.sets[i % len(c.sets)]
            return fused(f, res, post, comb, c.op) if collapse == "own" else fused(f, res, post, comb, c.op, pm)
        return call, lambda: P.outputs("fused", call(0))
    return make


def impls(torch: Any, req: SiteBenchRequest, peers: dict[str, P.Peer],
          skipped: dict[str, str]) -> list[tuple[str, str, Make]]:
    """(impl, collapse, make) of req.impls that can run here; what cannot, in skipped with why."""
    names = req.impls
    out: list[tuple[str, str, Make]] = []
    for collapse in ("own", "delayed"):
        if PAIR in names:
            out.append((PAIR, collapse, _ours(torch, req, collapse)))
        for engine in (e for e in CHAIN_IMPLS[1:] if e in names and e in peers):
            peer = peers[engine]
            fused = peer.fused if collapse == "own" else peer.fused_delayed
            if req.stream != "bfloat16":
                skipped[engine] = f"{engine}'s kernels take bfloat16 streams only"
            elif engine == P.TILEKERNELS and collapse == "own":
                out.append((engine, collapse, _tk_pair(peer)))
            elif engine == P.TILEKERNELS:
                skipped[f"{engine} (delayed)"] = "TileKernels has no delayed pre"
            elif fused is None:
                skipped[f"{engine} ({collapse})"] = f"{engine}'s saved files have no fused post-pre of this collapse"
            else:
                out.append((engine, collapse, _engine_fused(fused, collapse)))
    return out


def run_chain_bench(request: SiteBenchRequest,
                    progress: Callable[[int, int, str], None] | None = None) -> ChainBenchResult:
    """Time the chain on a CUDA GPU (default the first); HcError (one line) without one."""
    torch, dev, dtype, req = prepare(request, CHAIN_IMPLS)
    skipped: dict[str, str] = {}
    peers, why_not = P.load(req.peers, tuple(e for e in P.ENGINES if e in req.impls))
    skipped.update(why_not)
    impl_list = impls(torch, req, peers, skipped)
    bpt = bytes_per_token(req.dim, dtype.itemsize)

    def judge(impl: str, collapse: str, case: ChainCase, got: dict[str, Any]) -> tuple:
        oracle = case.oracle[collapse]
        return ({k: max_err(v, oracle[k]) for k, v in got.items() if k in OUTPUTS},)

    rows, copy_gbps = time_impls(torch, dev, req, impl_list, bpt,
                                 lambda n, nsets, g: ChainCase(torch, req, n, dtype, dev, g, nsets),
                                 PAIR, judge, progress)
    return ChainBenchResult(CHAIN_OP, bench.machine(torch, dev), HC, req.dim, req.stream, req.sinkhorn_iters,
                            float(req.eps), float(req.norm_eps), bpt, copy_gbps, statistic(req),
                            tuple(ChainBenchRow(*r) for r in rows), skipped)
