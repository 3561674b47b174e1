"""`hc bench --op site-pre|site-write`'s core: the eager chain, TileKernels and ours, side by side. No printing.

Per token count and implementation, as people call each one:
- eager: site_eager's chain (the split through the exact kernel), allocating as it goes;
- tilekernels: DeepSeek's TileKernels (`mhc_pre_big_fuse` with post multiplier 2 and
  20 iterations, which computes V4's own-site op; `mhc_post_fwd`), where `tile_kernels`
  imports: optional, never a dependency, and said so when absent;
- vllm (site-pre): vLLM's `mhc_pre_tilelang` (V4) and its delayed pre where its saved files
  have one, loaded from `--peers DIR` (bench/peers.py; without DIR: skipped, and said so);
- ours: site_pre (own-site and delayed collapse) / site_write, public call with `out=`.
Timing, rotation of inputs past the L2 cache and the copy bandwidth are bench/op.py's; the
inputs, oracle and error measures site_oracle.py's.
Every output's max |error| against the float64 chain on the first input set; for
the streams' output also in roundings (site_oracle.roundings: one rounding to the streams'
dtype plus float32's rounding of the sum, against the float64 sum with the
implementation's own pre mix); and, for ours, whether pre/post/comb equal the
exact kernel's on our mixes and the stream outputs the eager chain's on the same
inputs, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from hccli.base.errors import HcError
from hccli.base.jsonable import INLINE
from hccli.bench import op as bench
from hccli.bench import peers as P
from hccli.bench.requests import SiteBenchRequest
from hccli.bench.site_host import HC, PEER, time_site_host
from hccli.bench.site_oracle import SiteCase, equal, max_err, statistic, time_impls
from hccli.base.limits import MAX_BENCH_REPS, MAX_BENCH_WARMUP, MAX_SITE_BENCH_BYTES

SITE_OPS = ("site-pre", "site-write")
SITE_TOKENS = (1, 16, 128, 1024, 8192, 65536)


def impl_names(op: str) -> tuple[str, ...]:
    return ("eager", PEER, P.VLLM, "site_pre") if op == "site-pre" else ("eager", PEER, "site_write")


def bytes_per_token(op: str, dim: int, elem: int) -> int:
    """Fewest bytes of the op as TileKernels computes it: site-pre reads x and writes collapsed, post
    and comb; site-write reads f, residual, post and comb and writes the streams."""
    mixes = 4 * (HC + HC * HC)
    return (HC + 1) * dim * elem + mixes if op == "site-pre" else (2 * HC + 1) * dim * elem + mixes


@dataclass(frozen=True)
class SiteBenchRow:
    impl: str
    collapse: str  # "own" (V4), "delayed" (V4.1) or "" (write-back)
    tokens: int
    ms: float
    ms_min: float
    calls: int
    samples: int
    tokens_per_s: float
    gbps: float
    pct_copy: float
    vs_eager: float | None  # eager's ms (same collapse) / this ms
    max_err: dict[str, float]  # output -> max |this - float64| (NaN: NaN where the oracle has none)
    ulps: dict[str, float]  # the streams' output: max error in roundings (site_oracle.roundings), against its own pre mix
    identical: dict[str, bool]  # ours: bit-identity checks (see the module docstring)


@dataclass(frozen=True)
class SiteBenchResult:
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
    rows: tuple[SiteBenchRow, ...]
    skipped: dict[str, str]
    host: tuple[Any, ...] = ()


def _peer_pre(pre: Callable[..., Any], collapse: str, norm_eps: float, eps: float, iters: int) -> Callable[..., Any]:
    """An engine's pre as its model code calls it, on the case's inputs."""
    def make(c: SiteCase) -> Any:
        o = P.SiteOp(c.fn, c.scale, c.base, norm_eps, eps, iters)

        def call(i: int) -> Any:
            x, pm = c.sets[i % len(c.sets)]
            return pre(x, o) if collapse == "own" else pre(x, o, pm)
        return call, lambda: P.outputs("pre", call(0))
    return make


def _pre_impls(torch: Any, dev: str, req: SiteBenchRequest, skipped: dict[str, str],
               peers: dict[str, Any]) -> list[tuple[str, str, Callable[..., Any]]]:
    """(impl, collapse, make(case) -> (call(i), outputs on set 0 as {name: tensor})) for req.impls."""
    from hccli.kernels.registry import resolve_impl
    from hccli.kernels.site_eager import SitePre, site_pre_eager

    names, dim, stream, iters, eps, norm_eps = req.impls, req.dim, req.stream, req.sinkhorn_iters, req.eps, req.norm_eps
    split = resolve_impl("auto", dev, HC)
    impls: list[tuple[str, str, Callable[..., Any]]] = []
    for collapse in ("own", "delayed"):
        if "eager" in names:
            def make_eager(c: SiteCase, collapse: str = collapse) -> Any:
                def call(i: int) -> Any:
                    x, pm = c.sets[i % len(c.sets)]
                    return site_pre_eager(x, c.fn, c.scale, c.base, hc_mult=HC, sinkhorn_iters=iters, eps=eps,
                                          norm_eps=norm_eps, pre_mix=None if collapse == "own" else pm,
                                          split=split.run)
                return call, lambda: dict(call(0).items())
            impls.append(("eager", collapse, make_eager))
        for engine in (e for e in (PEER, P.VLLM) if e in names and e in peers):
            pre = peers[engine].pre if collapse == "own" else peers[engine].pre_delayed
            if stream != "bfloat16":
                skipped[engine] = f"{engine}'s pre kernels take bfloat16 streams only"
            elif pre is None:
                skipped[f"{engine} ({collapse})"] = f"{engine}'s saved files have no {collapse} pre"
            else:
                impls.append((engine, collapse, _peer_pre(pre, collapse, norm_eps, eps, iters)))
        if "site_pre" in names:
            def make_ours(c: SiteCase, collapse: str = collapse) -> Any:
                from hccli.kernels.site_pre import pack_fn, site_pre

                packed = pack_fn(c.fn, dim, stream)
                n = c.sets[0][0].shape[0]
                outs = [SitePre(torch.empty(n, 24, device=c.fn.device), torch.empty(n, HC, device=c.fn.device),
                                torch.empty(n, HC, device=c.fn.device), torch.empty(n, HC, HC, device=c.fn.device),
                                torch.empty(n, dim, dtype=c.sets[0][0].dtype, device=c.fn.device))
                        for _ in c.sets]

                def call(i: int) -> Any:
                    x, pm = c.sets[i % len(c.sets)]
                    return site_pre(x, packed, c.scale, c.base, sinkhorn_iters=iters, eps=eps, norm_eps=norm_eps,
                                    pre_mix=None if collapse == "own" else pm, out=outs[i % len(c.sets)])
                return call, lambda: {k: v.clone() for k, v in call(0).items()}
            impls.append(("site_pre", collapse, make_ours))
    return impls


def _write_impls(torch: Any, names: tuple[str, ...], skipped: dict[str, str], peer: P.Peer | None,
                 stream: str) -> list[tuple[str, str, Callable[..., Any]]]:
    from hccli.kernels.site_eager import site_write_eager

    impls: list[tuple[str, str, Callable[..., Any]]] = []
    if "eager" in names:
        def make_eager(c: SiteCase) -> Any:
            def call(i: int) -> Any:
                return site_write_eager(*c.sets[i % len(c.sets)])
            return call, lambda: {"out": call(0)}
        impls.append(("eager", "", make_eager))
    if PEER in names and peer is not None:
        if stream != "bfloat16":
            skipped[PEER] = "TileKernels' post kernel takes bfloat16 streams only"
        else:
            def make_peer(c: SiteCase) -> Any:
                outs = [torch.empty_like(s[1]).unsqueeze(0) for s in c.sets]

                def call(i: int) -> Any:
                    f, res, post, comb = c.sets[i % len(c.sets)]
                    return peer.post(f, res, post, comb, outs[i % len(c.sets)])
                return call, lambda: {"out": call(0)[0].clone()}
            impls.append((PEER, "", make_peer))
    if "site_write" in names:
        def make_ours(c: SiteCase) -> Any:
            from hccli.kernels.site_write import site_write

            outs = [torch.empty_like(s[1]) for s in c.sets]

            def call(i: int) -> Any:
                return site_write(*c.sets[i % len(c.sets)], out=outs[i % len(c.sets)])
            return call, lambda: {"out": call(0).clone()}
        impls.append(("site_write", "", make_ours))
    return impls


def _identical(torch: Any, op: str, impl: str, collapse: str, got: dict[str, Any], c: SiteCase, iters: int,
               eps: float) -> dict[str, bool]:
    from hccli.kernels.exact import hc_split_sinkhorn_exact
    from hccli.kernels.site_eager import collapse_eager, site_write_eager

    if impl not in ("site_pre", "site_write"):
        return {}
    if op == "site-write":
        return {"out": equal(got["out"], site_write_eager(*c.sets[0]))}
    x, pm = c.sets[0]
    want = hc_split_sinkhorn_exact(got["mixes"], c.scale, c.base, HC, iters, eps)
    flags = {k: equal(got[k], w) for k, w in zip(("pre", "post", "comb"), want)}
    flags["collapsed"] = equal(got["collapsed"], collapse_eager(x, got["pre"] if collapse == "own" else pm))
    return flags


def prepare(request: SiteBenchRequest, known: tuple[str, ...]) -> tuple[Any, str, Any, SiteBenchRequest]:
    """(torch, device, the streams' torch dtype, the request as run: every default filled in) for a site
    bench whose implementations are `known`; HcError (one line) for what it cannot run, a CPU among it."""
    from hccli.kernels.registry import import_torch, normalise_device

    op, reps, warmup = request.op, request.reps, request.warmup
    names = request.impls or known
    for name in names:
        if name not in known:
            raise HcError(f"implementation {name!r} is unknown to hc bench --op {op}; expected some of "
                          f"{', '.join(known)}")
    if not (1 <= reps <= MAX_BENCH_REPS and 0 <= warmup <= MAX_BENCH_WARMUP):
        raise HcError(f"reps {reps} / warmup {warmup}: expected reps 1 to {MAX_BENCH_REPS:,} and warmup 0 to "
                      f"{MAX_BENCH_WARMUP:,}")
    if request.peers is not None:
        P.check_dir(request.peers)  # first: a bad --peers is one line wherever it runs, not a skipped row
    torch = import_torch()
    dev = normalise_device(torch, request.device)
    if dev == "cpu" or not torch.cuda.is_available():
        raise HcError(f"hc bench --op {op} times GPU kernels, and " +
                      ("device cpu was asked for" if dev == "cpu" else "torch sees no CUDA device here"))
    dev = dev or "cuda:0"
    from hccli.kernels.site_pre import stream_name
    from hccli.kernels.site_tl import check_site

    dim = request.dim
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}.get(request.stream)
    if dtype is None:
        raise HcError(f"stream dtype {request.stream!r}: expected bfloat16 or float32")
    stream = stream_name(torch, dtype)
    check_site(HC, dim, stream)
    tokens = tuple(request.tokens or SITE_TOKENS)
    elem = dtype.itemsize
    for n in tokens:
        if n < 1 or n * (HC + 1) * dim * elem > MAX_SITE_BENCH_BYTES:
            raise HcError(f"--tokens {n}: expected 1 to {MAX_SITE_BENCH_BYTES // ((HC + 1) * dim * elem):,} tokens at dim "
                          f"{dim} ({stream}): the streams of one count are at most {MAX_SITE_BENCH_BYTES:,} bytes")
    torch.cuda.set_device(dev)
    return torch, dev, dtype, replace(request, tokens=tokens, impls=tuple(names), stream=stream)


def run_site_bench(request: SiteBenchRequest,
                   progress: Callable[[int, int, str], None] | None = None) -> SiteBenchResult:
    """Time the site op on a CUDA GPU (default the first); HcError without one."""
    op = request.op
    if op not in SITE_OPS:
        raise HcError(f"site op {op!r} is unknown; expected one of {', '.join(SITE_OPS)}")
    torch, dev, dtype, req = prepare(request, impl_names(op))
    names, dim, stream, elem = req.impls, req.dim, req.stream, dtype.itemsize
    skipped: dict[str, str] = {}
    peers, why_not = P.load(req.peers, tuple(e for e in P.ENGINES if e in names))
    skipped.update(why_not)
    impl_list = (_pre_impls(torch, dev, req, skipped, peers)
                 if op == "site-pre" else _write_impls(torch, req.impls, skipped, peers.get(PEER), stream))
    bpt = bytes_per_token(op, dim, elem)
    ulps_of = "collapsed" if op == "site-pre" else "out"

    def judge(impl: str, collapse: str, case: SiteCase, got: dict[str, Any]) -> tuple:
        oracle = case.oracle[collapse]
        return ({k: max_err(v, oracle[k]) for k, v in got.items()},
                {ulps_of: case.stream_roundings(torch, op, got, collapse)},
                _identical(torch, op, impl, collapse, got, case, req.sinkhorn_iters, req.eps))

    rows, copy_gbps = time_impls(torch, dev, req, impl_list, bpt,
                                 lambda n, nsets, g: SiteCase(torch, req, n, dtype, dev, g, nsets),
                                 "eager", judge, progress)
    site_rows = [SiteBenchRow(*r) for r in rows]
    host_rows: tuple[Any, ...] = ()
    if req.host:
        host_rows = time_site_host(torch, dev, req, dtype, site_rows, peers.get(PEER))
    return SiteBenchResult(op, bench.machine(torch, dev), HC, dim, stream, req.sinkhorn_iters, float(req.eps),
                           float(req.norm_eps), bpt, copy_gbps, statistic(req), tuple(site_rows), skipped, host_rows)
