"""`hc bench --op site-pre|site-write`'s core: the eager chain, TileKernels and ours, side by side. No printing.

Per token count and implementation, as people call each one:
- eager: site_eager's chain (the split through the exact kernel), allocating as it goes;
- tilekernels: DeepSeek's TileKernels (`mhc_pre_big_fuse` with post multiplier 2 and
  20 iterations, which computes V4's own-site op; `mhc_post_fwd`), where `tile_kernels`
  imports: optional, never a dependency, and said so when absent;
- ours: site_pre (own-site and delayed collapse) / site_write, public call with `out=`.
Timing, rotation of inputs past the L2 cache and the copy bandwidth are bench.py's.
Every output's max |error| against the float64 chain on the first input set; for
the streams' output also in roundings (_roundings: one rounding to the streams'
dtype plus float32's rounding of the sum, against the float64 sum with the
implementation's own pre mix); and, for ours, whether pre/post/comb equal the
exact kernel's on our mixes and the stream outputs the eager chain's on the same
inputs, bit for bit.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

from hccli.base.errors import HcError
from hccli.base.jsonable import INLINE
from hccli.bench import op as bench
from hccli.bench.site_host import HC, PEER, time_site_host
from hccli.base.limits import MAX_BENCH_REPS, MAX_BENCH_WARMUP, MAX_SITE_BENCH_BYTES
from hccli.base.vocab import DEFAULT_HC_EPS, DEFAULT_NORM_EPS, DEFAULT_SINKHORN_ITERS

SITE_OPS = ("site-pre", "site-write")
SITE_TOKENS = (1, 16, 128, 1024, 8192, 65536)


def impl_names(op: str) -> tuple[str, ...]:
    return ("eager", PEER, "site_pre" if op == "site-pre" else "site_write")


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
    ulps: dict[str, float]  # the streams' output: max error in roundings (_roundings), against its own pre mix
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


def tilekernels() -> tuple[Any, str | None]:
    """(module namespace with mhc_pre_big_fuse and mhc_post_fwd, None) or (None, why not)."""
    try:
        from tile_kernels.modeling.mhc.ops import pre_big_fuse, post
    except Exception as exc:  # noqa: BLE001 - absent or broken: the row is skipped and the reason shown
        text = str(exc).strip().splitlines()
        return None, f"tile_kernels does not import ({type(exc).__name__}: {text[0] if text else 'no message'})"
    return (pre_big_fuse.mhc_pre_big_fuse, post.mhc_post_fwd), None


def _err(got: Any, want: Any) -> float:
    g, w = got.double(), want.double()
    both = g.isnan() & w.isnan()
    d = (g - w).abs().masked_fill(both, 0.0)
    return float(d.max()) if d.numel() else 0.0  # NaN where only one side is NaN


def _roundings(torch: Any, got: Any, want: Any, scale: Any, sums: int) -> float:
    """max |got - want| in units of one rounding to got's dtype at want plus float32's rounding of a
    sum of `sums` + 1 products (sums * 2 + 1 roundings of 2^-24 relative to scale = sum |terms|):
    the error of the float32 chain cast once; <= 1 is within one rounding of the float64 value."""
    g, w = got.double(), want.double()
    bad = ~w.isfinite()
    w = w.masked_fill(bad, 1.0)
    bits = 8 if got.dtype == torch.bfloat16 else 24
    _, e = torch.frexp(w)
    unit = torch.ldexp(torch.ones_like(w), (e - bits).clamp(min=-149)) + scale * ((2 * sums + 1) * 2.0 ** -24)
    d = (g - w).abs().masked_fill(bad & g.isnan(), 0.0).masked_fill(bad & ~g.isnan(), float("inf"))
    return float((d / unit).max()) if d.numel() else 0.0


def _worst(values: list[float]) -> float:
    return float("nan") if any(math.isnan(v) for v in values) else max(values, default=0.0)


def _equal(a: Any, b: Any) -> bool:
    import torch

    return bool(torch.equal(a.isnan(), b.isnan())) and bool(torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))) \
        and bool(torch.equal(torch.signbit(a), torch.signbit(b)))


class _Case:
    """One token count's inputs (several sets for rotation) and the float64 oracle on set 0."""

    def __init__(self, torch: Any, op: str, n: int, dim: int, dtype: Any, dev: str, g: Any, nsets: int,
                 iters: int, eps: float, norm_eps: float) -> None:
        from hccli.kernels.torch_ref import hc_split_sinkhorn_torch

        self.sets = []
        w = (2 + HC) * HC
        self.scale = (torch.rand(3, device=dev, generator=g) * 1.9 + 0.1).contiguous()
        self.base = torch.randn(w, device=dev, generator=g).contiguous()
        self.fn = (torch.randn(w, HC * dim, device=dev, generator=g) / math.sqrt(HC * dim)).contiguous()
        for _ in range(nsets):
            if op == "site-pre":
                x = torch.randn(n, HC, dim, device=dev, generator=g).to(dtype)
                pm = torch.rand(n, HC, device=dev, generator=g) + 1e-6
                self.sets.append((x, pm))
            else:
                f = torch.randn(n, dim, device=dev, generator=g).to(dtype)
                res = torch.randn(n, HC, dim, device=dev, generator=g).to(dtype)
                _, post, comb = hc_split_sinkhorn_torch(torch.randn(n, w, device=dev, generator=g), self.scale,
                                                        self.base, HC, iters, eps)
                self.sets.append((f, res, post.contiguous(), comb.contiguous()))
        self.oracle = self._oracle(torch, op, iters, eps, norm_eps)

    def _oracle(self, torch: Any, op: str, iters: int, eps: float, norm_eps: float) -> dict[str, Any]:
        from hccli.kernels.site_eager import site_pre_eager, site_write_eager

        d = torch.float64
        if op == "site-write":
            f, res, post, comb = self.sets[0]
            return {"": {"out": site_write_eager(f.to(d), res.to(d), post.to(d), comb.to(d))}}
        x, pm = self.sets[0]
        out = {}
        for collapse, mix in (("own", None), ("delayed", pm.to(d))):
            r = site_pre_eager(x.to(d), self.fn.to(d), self.scale.to(d), self.base.to(d), hc_mult=HC,
                               sinkhorn_iters=iters, eps=eps, norm_eps=norm_eps, pre_mix=mix)
            out[collapse] = dict(r.items())
        return out

    def stream_roundings(self, torch: Any, op: str, got: dict[str, Any], collapse: str) -> float:
        """_roundings of the streams' output against the float64 sum of its terms from the inputs and
        the implementation's own pre mix (own collapse; the oracle's where it gives none), by chunks."""
        d, found, step = torch.float64, [], 4096
        if op == "site-write":
            f, res, post, comb = self.sets[0]
            for lo in range(0, f.shape[0], step):
                s = slice(lo, lo + step)
                ref = post[s].to(d).unsqueeze(-1) * f[s].to(d).unsqueeze(-2)
                scale = ref.abs()
                for i in range(res.shape[1]):
                    term = comb[s, i].to(d).unsqueeze(-1) * res[s, i].to(d).unsqueeze(-2)
                    ref, scale = ref + term, scale + term.abs()
                found.append(_roundings(torch, got["out"][s], ref, scale, 4))
            return _worst(found)
        x, pm = self.sets[0]
        w = got.get("pre", self.oracle["own"]["pre"]) if collapse == "own" else pm
        for lo in range(0, x.shape[0], step):
            s = slice(lo, lo + step)
            terms = w[s].to(d).unsqueeze(-1) * x[s].to(d)
            found.append(_roundings(torch, got["collapsed"][s], terms.sum(1), terms.abs().sum(1), 3))
        return _worst(found)


def _pre_impls(torch: Any, dev: str, names: tuple[str, ...], dim: int, stream: str, iters: int, eps: float,
               norm_eps: float, skipped: dict[str, str], peer: Any) -> list[tuple[str, str, Callable[..., Any]]]:
    """(impl, collapse, make(case) -> (call(i), outputs on set 0 as {name: tensor}))."""
    from hccli.kernels.registry import resolve_impl
    from hccli.kernels.site_eager import SitePre, site_pre_eager

    split = resolve_impl("auto", dev, HC)
    impls: list[tuple[str, str, Callable[..., Any]]] = []
    for collapse in ("own", "delayed"):
        if "eager" in names:
            def make_eager(c: _Case, collapse: str = collapse) -> Any:
                def call(i: int) -> Any:
                    x, pm = c.sets[i % len(c.sets)]
                    return site_pre_eager(x, c.fn, c.scale, c.base, hc_mult=HC, sinkhorn_iters=iters, eps=eps,
                                          norm_eps=norm_eps, pre_mix=None if collapse == "own" else pm,
                                          split=split.run)
                return call, lambda: dict(call(0).items())
            impls.append(("eager", collapse, make_eager))
        if collapse == "own" and PEER in names and peer is not None:
            if stream != "bfloat16":
                skipped[PEER] = "TileKernels' pre kernel takes bfloat16 streams only"
            else:
                def make_peer(c: _Case) -> Any:
                    def call(i: int) -> Any:
                        x = c.sets[i % len(c.sets)][0]
                        return peer[0](x, c.fn, c.scale, c.base, norm_eps, eps, eps, 2.0, iters)
                    def outputs() -> dict[str, Any]:
                        post, comb, h = call(0)
                        return {"post": post.reshape(-1, HC), "comb": comb.reshape(-1, HC, HC), "collapsed": h}
                    return call, outputs
                impls.append((PEER, "own", make_peer))
        if "site_pre" in names:
            def make_ours(c: _Case, collapse: str = collapse) -> Any:
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


def _write_impls(torch: Any, names: tuple[str, ...], skipped: dict[str, str], peer: Any,
                 stream: str) -> list[tuple[str, str, Callable[..., Any]]]:
    from hccli.kernels.site_eager import site_write_eager

    impls: list[tuple[str, str, Callable[..., Any]]] = []
    if "eager" in names:
        def make_eager(c: _Case) -> Any:
            def call(i: int) -> Any:
                return site_write_eager(*c.sets[i % len(c.sets)])
            return call, lambda: {"out": call(0)}
        impls.append(("eager", "", make_eager))
    if PEER in names and peer is not None:
        if stream != "bfloat16":
            skipped[PEER] = "TileKernels' post kernel takes bfloat16 streams only"
        else:
            def make_peer(c: _Case) -> Any:
                outs = [torch.empty_like(s[1]).unsqueeze(0) for s in c.sets]

                def call(i: int) -> Any:
                    f, res, post, comb = c.sets[i % len(c.sets)]
                    return peer[1](f.unsqueeze(0), res.unsqueeze(0), post.unsqueeze(0).unsqueeze(-1),
                                   comb.unsqueeze(0), outs[i % len(c.sets)])
                return call, lambda: {"out": call(0)[0].clone()}
            impls.append((PEER, "", make_peer))
    if "site_write" in names:
        def make_ours(c: _Case) -> Any:
            from hccli.kernels.site_write import site_write

            outs = [torch.empty_like(s[1]) for s in c.sets]

            def call(i: int) -> Any:
                return site_write(*c.sets[i % len(c.sets)], out=outs[i % len(c.sets)])
            return call, lambda: {"out": call(0).clone()}
        impls.append(("site_write", "", make_ours))
    return impls


def _identical(torch: Any, op: str, impl: str, collapse: str, got: dict[str, Any], c: _Case, iters: int,
               eps: float) -> dict[str, bool]:
    from hccli.kernels.exact import hc_split_sinkhorn_exact
    from hccli.kernels.site_eager import collapse_eager, site_write_eager

    if impl in ("eager", PEER):
        return {}
    if op == "site-write":
        return {"out": _equal(got["out"], site_write_eager(*c.sets[0]))}
    x, pm = c.sets[0]
    want = hc_split_sinkhorn_exact(got["mixes"], c.scale, c.base, HC, iters, eps)
    flags = {k: _equal(got[k], w) for k, w in zip(("pre", "post", "comb"), want)}
    flags["collapsed"] = _equal(got["collapsed"], collapse_eager(x, got["pre"] if collapse == "own" else pm))
    return flags


def run_site_bench(op: str, tokens: tuple[int, ...] | None = None, impls: tuple[str, ...] | None = None, *,
                   dim: int = 5120, stream: str = "bfloat16", sinkhorn_iters: int = DEFAULT_SINKHORN_ITERS,
                   eps: float = DEFAULT_HC_EPS, norm_eps: float = DEFAULT_NORM_EPS, reps: int = 15,
                   warmup: int = 3, seed: int = 0, host: bool = False, device: str | None = None,
                   progress: Callable[[int, int, str], None] | None = None) -> SiteBenchResult:
    """Time the site op on a CUDA GPU (default the first); HcError without one."""
    from hccli.kernels.registry import import_torch, normalise_device

    if op not in SITE_OPS:
        raise HcError(f"site op {op!r} is unknown; expected one of {', '.join(SITE_OPS)}")
    names = impls or impl_names(op)
    for name in names:
        if name not in impl_names(op):
            raise HcError(f"implementation {name!r} is unknown to hc bench --op {op}; expected some of "
                          f"{', '.join(impl_names(op))}")
    if not (1 <= reps <= MAX_BENCH_REPS and 0 <= warmup <= MAX_BENCH_WARMUP):
        raise HcError(f"reps {reps} / warmup {warmup}: expected reps 1 to {MAX_BENCH_REPS:,} and warmup 0 to "
                      f"{MAX_BENCH_WARMUP:,}")
    torch = import_torch()
    dev = normalise_device(torch, device)
    if dev == "cpu" or not torch.cuda.is_available():
        raise HcError(f"hc bench --op {op} times GPU kernels, and " +
                      ("device cpu was asked for" if dev == "cpu" else "torch sees no CUDA device here"))
    dev = dev or "cuda:0"
    from hccli.kernels.site_pre import stream_name
    from hccli.kernels.site_tl import check_site

    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}.get(stream)
    if dtype is None:
        raise HcError(f"stream dtype {stream!r}: expected bfloat16 or float32")
    stream = stream_name(torch, dtype)
    check_site(HC, dim, stream)
    tokens = tuple(tokens or SITE_TOKENS)
    elem = dtype.itemsize
    for n in tokens:
        if n < 1 or n * (HC + 1) * dim * elem > MAX_SITE_BENCH_BYTES:
            raise HcError(f"--tokens {n}: expected 1 to {MAX_SITE_BENCH_BYTES // ((HC + 1) * dim * elem):,} tokens at dim "
                          f"{dim} ({stream}): the streams of one count are at most {MAX_SITE_BENCH_BYTES:,} bytes")
    torch.cuda.set_device(dev)
    skipped: dict[str, str] = {}
    peer, why = tilekernels() if PEER in names else (None, None)
    if why:
        skipped[PEER] = why
    impl_list = (_pre_impls(torch, dev, names, dim, stream, sinkhorn_iters, eps, norm_eps, skipped, peer)
                 if op == "site-pre" else _write_impls(torch, names, skipped, peer, stream))
    bpt = bytes_per_token(op, dim, elem)
    samples = bench.timer(torch, True)
    copy_gbps = bench.copy_bandwidth(torch, dev, 1 << 30)
    g = torch.Generator(device=dev).manual_seed(seed % (1 << 64))  # any seed: torch takes 64 bits
    rows: list[SiteBenchRow] = []
    total, done = len(tokens) * len(impl_list), 0
    with torch.no_grad():
        for n in tokens:
            nsets = max(1, min(8, math.ceil(bench.ROTATE_BYTES / (n * bpt))))
            case = _Case(torch, op, n, dim, dtype, dev, g, nsets, sinkhorn_iters, eps, norm_eps)
            eager_ms: dict[str, float] = {}
            for impl, collapse, make in impl_list:
                if progress:
                    progress(done, total, f"{impl} {collapse} n={n:,}".replace("  ", " "))
                call, outputs = make(case)
                for i in range(max(1, warmup)):
                    call(i)
                torch.cuda.synchronize()
                got = outputs()
                oracle = case.oracle[collapse]
                errs = {k: _err(v, oracle[k]) for k, v in got.items()}
                name = "collapsed" if op == "site-pre" else "out"
                ulps = {name: case.stream_roundings(torch, op, got, collapse)}
                flags = _identical(torch, op, impl, collapse, got, case, sinkhorn_iters, eps)
                est = statistics.median(samples(call, 1, 3))
                calls = max(1, min(1000, int(bench.SAMPLE_MS / max(est, 1e-4))))
                times = samples(call, calls, reps)
                ms = statistics.median(times)
                if impl == "eager":
                    eager_ms[collapse] = ms
                gbps = n * bpt / (ms * 1e-3) / 1e9
                base_ms = eager_ms.get(collapse)
                rows.append(SiteBenchRow(impl, collapse, n, ms, min(times), calls, reps, n / (ms * 1e-3), gbps,
                                    100.0 * gbps / copy_gbps, base_ms / ms if base_ms else None, errs, ulps, flags))
                done += 1
            del case
            torch.cuda.empty_cache()
    if progress:
        progress(total, total, "done")
    host_rows: tuple[Any, ...] = ()
    if host:
        host_rows = time_site_host(torch, dev, op, dim, dtype, stream, sinkhorn_iters, eps, norm_eps, rows, reps, peer)
    statistic = (f"median over {reps} samples of the per-call time of back-to-back calls as people call each "
                 f"(CUDA events), after {max(1, warmup)} warm-up calls; inputs rotated over sets of >= "
                 f"{bench.ROTATE_BYTES >> 20} MiB in all; errors against the float64 chain on the first set")
    return SiteBenchResult(op, bench.machine(torch, dev), HC, dim, stream, sinkhorn_iters, float(eps), float(norm_eps),
                           bpt, copy_gbps, statistic, tuple(rows), skipped, host_rows)
