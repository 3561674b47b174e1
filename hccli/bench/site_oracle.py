"""What the site benches share: their inputs and float64 oracle, the error measures, the timed loop. No printing.

SiteCase: one token count's inputs of site-pre or site-write (several sets, to rotate past
the L2 cache) and the float64 chain on set 0; max_err / roundings / equal: an output
against the oracle (max |error|, in roundings, bit for bit); measure: the median per-call
time of back-to-back calls (bench/op.py's CUDA-event samples).
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable

from hccli.bench import op as bench
from hccli.bench.requests import SiteBenchRequest
from hccli.bench.site_host import HC


def max_err(got: Any, want: Any) -> float:
    g, w = got.double(), want.double()
    both = g.isnan() & w.isnan()
    d = (g - w).abs().masked_fill(both, 0.0)
    return float(d.max()) if d.numel() else 0.0  # NaN where only one side is NaN


def roundings(torch: Any, got: Any, want: Any, scale: Any, sums: int) -> float:
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


def worst(values: list[float]) -> float:
    return float("nan") if any(math.isnan(v) for v in values) else max(values, default=0.0)


def equal(a: Any, b: Any) -> bool:
    import torch

    return bool(torch.equal(a.isnan(), b.isnan())) and bool(torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))) \
        and bool(torch.equal(torch.signbit(a), torch.signbit(b)))


class SiteCase:
    """One token count's inputs (several sets for rotation) and the float64 oracle on set 0."""

    def __init__(self, torch: Any, req: SiteBenchRequest, n: int, dtype: Any, dev: str, g: Any, nsets: int) -> None:
        from hccli.kernels.torch_ref import hc_split_sinkhorn_torch

        op, dim, iters, eps = req.op, req.dim, req.sinkhorn_iters, req.eps
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
        self.oracle = self._oracle(torch, op, iters, eps, req.norm_eps)

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
        """roundings of the streams' output against the float64 sum of its terms from the inputs and
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
                found.append(roundings(torch, got["out"][s], ref, scale, 4))
            return worst(found)
        x, pm = self.sets[0]
        w = got.get("pre", self.oracle["own"]["pre"]) if collapse == "own" else pm
        for lo in range(0, x.shape[0], step):
            s = slice(lo, lo + step)
            terms = w[s].to(d).unsqueeze(-1) * x[s].to(d)
            found.append(roundings(torch, got["collapsed"][s], terms.sum(1), terms.abs().sum(1), 3))
        return worst(found)


def warm(torch: Any, call: Callable[[int], Any], warmup: int) -> None:
    """max(1, warmup) untimed calls (the first compiles), then wait for them."""
    for i in range(max(1, warmup)):
        call(i)
    torch.cuda.synchronize()


def measure(samples: Callable[..., list[float]], call: Callable[[int], Any], reps: int) -> tuple[float, float, int]:
    """(median ms, min ms, calls per sample): samples of back-to-back calls, enough calls a sample to fill
    bench.SAMPLE_MS (at most 1,000), reps samples."""
    est = statistics.median(samples(call, 1, 3))
    calls = max(1, min(1000, int(bench.SAMPLE_MS / max(est, 1e-4))))
    times = samples(call, calls, reps)
    return statistics.median(times), min(times), calls


def time_impls(torch: Any, dev: str, req: SiteBenchRequest, impl_list: list, bpt: int, new_case: Callable[..., Any],
               base: str, judge: Callable[..., tuple], progress: Callable[[int, int, str], None] | None = None
               ) -> tuple[list[tuple], float]:
    """The site benches' one timing loop: every (impl, collapse, make) of `impl_list` at each token count of
    `req`, on `new_case(n, nsets, generator)`'s inputs rotated past the L2 cache. Per run it returns
    (impl, collapse, tokens, ms, ms_min, calls, reps, tokens/s, GB/s, % of copy, the `base` impl's ms
    (same collapse) / this ms, *judge(impl, collapse, case, outputs)), and the copy bandwidth."""
    samples = bench.timer(torch, True)
    copy_gbps = bench.copy_bandwidth(torch, dev, 1 << 30)
    g = torch.Generator(device=dev).manual_seed(req.seed % (1 << 64))  # any seed: torch takes 64 bits
    rows: list[tuple] = []
    total, done = len(req.tokens) * len(impl_list), 0
    with torch.no_grad():
        for n in req.tokens:
            case = new_case(n, max(1, min(8, math.ceil(bench.ROTATE_BYTES / (n * bpt)))), g)
            base_ms: dict[str, float] = {}
            for impl, collapse, make in impl_list:
                if progress:
                    progress(done, total, f"{impl} {collapse} n={n:,}".replace("  ", " "))
                call, outputs = make(case)
                warm(torch, call, req.warmup)
                judged = judge(impl, collapse, case, outputs())
                ms, ms_min, calls = measure(samples, call, req.reps)
                if impl == base:
                    base_ms[collapse] = ms
                gbps = n * bpt / (ms * 1e-3) / 1e9
                vs = base_ms.get(collapse)
                rows.append((impl, collapse, n, ms, ms_min, calls, req.reps, n / (ms * 1e-3), gbps,
                             100.0 * gbps / copy_gbps, vs / ms if vs else None, *judged))
                done += 1
            del case
            torch.cuda.empty_cache()
    if progress:
        progress(total, total, "done")
    return rows, copy_gbps


def statistic(req: SiteBenchRequest) -> str:
    """How the site benches' times and errors are taken, in the result's words."""
    return (f"median over {req.reps} samples of the per-call time of back-to-back calls as people call each "
            f"(CUDA events), after {max(1, req.warmup)} warm-up calls; inputs rotated over sets of >= "
            f"{bench.ROTATE_BYTES >> 20} MiB in all; errors against the float64 chain on the first set")
