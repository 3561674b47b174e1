"""`hc bench --op site-pre|site-write --host`: the host time of one eager call at small token counts. No printing.

Per implementation and n (bench/host.py's method and HostRow):
- raw: our compiled tilelang kernels called directly with every buffer given
  (tilelang's own launch path, the projection, finish and, for the own-site
  collapse, collapse launches in a row; nothing of ours in between);
- call: the public function with `out=`; alloc: the public function allocating;
- the eager chain and TileKernels: their plain call (call and alloc alike).
"""

from __future__ import annotations

from typing import Any

from hccli.bench.host import CALLS, HostRow, host_us
from hccli.bench.requests import SiteBenchRequest

HC = 4  # the site kernels' stream count
HOST_TOKENS = (1, 16, 128)
PEER = "tilekernels"  # DeepSeek's TileKernels, where it imports


def _pre_rows(torch: Any, dev: str, req: SiteBenchRequest, n: int, dtype: Any, gpu_ms: dict,
              peer: Any) -> list[HostRow]:
    from hccli.kernels import site_pre as P
    from hccli.kernels.registry import resolve_impl
    from hccli.kernels.site_eager import SitePre, site_pre_eager

    dim, stream, iters, eps, norm_eps, reps = req.dim, req.stream, req.sinkhorn_iters, req.eps, req.norm_eps, req.reps
    w = (2 + HC) * HC
    x = torch.randn(n, HC, dim, device=dev).to(dtype)
    fn = torch.randn(w, HC * dim, device=dev) / (HC * dim) ** 0.5
    scale = torch.rand(3, device=dev) + 0.5
    base = torch.randn(w, device=dev)
    pm = torch.rand(n, HC, device=dev)
    packed = P.pack_fn(fn, dim, stream)
    outs = SitePre(torch.empty(n, w, device=dev), torch.empty(n, HC, device=dev), torch.empty(n, HC, device=dev),
                   torch.empty(n, HC, HC, device=dev), torch.empty(n, dim, dtype=dtype, device=dev))
    split = resolve_impl("auto", dev, HC).run
    rows = []
    for collapse in ("own", "delayed"):
        mix = None if collapse == "own" else pm
        kw = dict(sinkhorn_iters=iters, eps=eps, norm_eps=norm_eps, pre_mix=mix)

        def eager() -> Any:
            return site_pre_eager(x, fn, scale, base, hc_mult=HC, split=split, **kw)

        eager_us = host_us(torch, True, eager, max(10, CALLS // 10), reps)
        rows.append(HostRow(f"eager ({collapse})", n, gpu_ms.get(("eager", collapse, n)), None, eager_us, eager_us,
                            None))
        if collapse == "own" and peer is not None and stream == "bfloat16":
            from hccli.bench.peers import SiteOp

            op = SiteOp(fn, scale, base, norm_eps, eps, iters)

            def tk() -> Any:
                return peer.pre(x, op)

            tk()
            tk_us = host_us(torch, True, tk, CALLS, reps)
            rows.append(HostRow(f"{PEER} (own)", n, gpu_ms.get((PEER, "own", n)), None, tk_us, tk_us, None))

        def call() -> Any:
            return P.site_pre(x, packed, scale, base, out=outs, **kw)

        def alloc() -> Any:
            return P.site_pre(x, packed, scale, base, **kw)

        call()  # compiles, and fills the fast path's cache
        tiling, splits = P.choose_launch(n, dim, stream, P._sms(torch, torch.device(dev).index))
        op = (iters, float(eps), float(norm_eps)) if splits == 1 else None
        proj = P.compiled_proj(dim, stream, collapse == "delayed", splits, op, tiling)
        finish = P.compiled_finish(dim, iters, eps, norm_eps, splits) if splits > 1 else None
        col = P.compiled_collapse(dim, stream)
        ws = torch.empty(splits, n, 32, device=dev)
        o = (outs.mixes, outs.pre, outs.post, outs.comb)

        def raw() -> None:
            if splits == 1 and collapse == "own":
                proj(x, packed.data, scale, base, *o)
            elif splits == 1:
                proj(x, packed.data, pm, scale, base, *o, outs.collapsed)
            elif collapse == "own":
                proj(x, packed.data, ws)
            else:
                proj(x, packed.data, pm, ws, outs.collapsed)
            if splits > 1:
                finish(ws, scale, base, *o)
            if collapse == "own":
                col(x, outs.pre, outs.collapsed)

        raw_us = host_us(torch, True, raw, CALLS, reps)
        call_us = host_us(torch, True, call, CALLS, reps)
        alloc_us = host_us(torch, True, alloc, CALLS, reps)
        rows.append(HostRow(f"site_pre ({collapse})", n, gpu_ms.get(("site_pre", collapse, n)), raw_us, call_us,
                            alloc_us, call_us / raw_us))
    return rows


def _write_rows(torch: Any, dev: str, req: SiteBenchRequest, n: int, dtype: Any, gpu_ms: dict,
                peer: Any) -> list[HostRow]:
    from hccli.kernels import site_write as Wr
    from hccli.kernels.site_eager import site_write_eager

    dim, stream, reps = req.dim, req.stream, req.reps
    f = torch.randn(n, dim, device=dev).to(dtype)
    res = torch.randn(n, HC, dim, device=dev).to(dtype)
    post = torch.rand(n, HC, device=dev) * 2
    comb = torch.rand(n, HC, HC, device=dev)
    out = torch.empty_like(res)
    rows = []
    eager_us = host_us(torch, True, lambda: site_write_eager(f, res, post, comb), max(10, CALLS // 10), reps)
    rows.append(HostRow("eager", n, gpu_ms.get(("eager", "", n)), None, eager_us, eager_us, None))
    if peer is not None and stream == "bfloat16":
        args = (f, res, post, comb, out.unsqueeze(0))
        peer.post(*args)
        tk_us = host_us(torch, True, lambda: peer.post(*args), CALLS, reps)
        rows.append(HostRow(PEER, n, gpu_ms.get((PEER, "", n)), None, tk_us, tk_us, None))
    Wr.site_write(f, res, post, comb, out=out)
    kernel = Wr.compiled_write(dim, stream)
    raw_us = host_us(torch, True, lambda: kernel(f, res, post, comb, out), CALLS, reps)
    call_us = host_us(torch, True, lambda: Wr.site_write(f, res, post, comb, out=out), CALLS, reps)
    alloc_us = host_us(torch, True, lambda: Wr.site_write(f, res, post, comb), CALLS, reps)
    rows.append(HostRow("site_write", n, gpu_ms.get(("site_write", "", n)), raw_us, call_us, alloc_us,
                        call_us / raw_us))
    return rows


def time_site_host(torch: Any, dev: str, req: SiteBenchRequest, dtype: Any, gpu_rows: list[Any],
                   peer: Any) -> tuple[HostRow, ...]:
    """req as run (bench/site.py fills in its defaults and the stream's torch name); dtype the streams'."""
    gpu_ms = {(r.impl, r.collapse, r.tokens): r.ms for r in gpu_rows}
    rows: list[HostRow] = []
    with torch.no_grad():
        for n in HOST_TOKENS:
            if req.op == "site-pre":
                rows += _pre_rows(torch, dev, req, n, dtype, gpu_ms, peer)
            else:
                rows += _write_rows(torch, dev, req, n, dtype, gpu_ms, peer)
    return tuple(rows)
