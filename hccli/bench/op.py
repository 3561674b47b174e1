"""`hc bench`'s core: time every available implementation of the split-Sinkhorn op. No printing.

What is timed, per implementation and token count n:
- the launch path with preallocated outputs: for the tilelang kernels the compiled
  kernel itself (the Python wrappers' argument checks left out, the same for all),
  for torch the reference function;
- with CUDA events around `calls` back-to-back calls (enough to fill ~2 ms, so
  that small n measure launches, not the event resolution), after warm-up (which
  also builds the kernels); the median over `reps` samples, per call;
- inputs and outputs rotated over enough sets that together they are several
  times the L2 cache, so that the cache is not what is measured;
- the device's copy bandwidth measured in the same run (a large device-to-device
  copy, bytes read plus written), against which GB/s is put.

The max difference of each implementation's outputs from the block kernel's
(from torch's on the CPU) is taken on the first input set, with a count of the
elements whose float32 bits differ (0 for the exact kernel).

With `host=True`, bench_host.py also times the host side of one eager call at a
few small token counts (where the launch, not the GPU, bounds an engine).
"""

from __future__ import annotations

import datetime
import math
import statistics
import subprocess
from dataclasses import dataclass, field
from typing import Any, Callable

from hccli.base.errors import HcError
from hccli.base.jsonable import INLINE
from hccli.base.vocab import DEFAULT_HC_EPS, DEFAULT_HC_MULT, DEFAULT_SINKHORN_ITERS, mix_width
from hccli.base.limits import (MAX_BENCH_BYTES, MAX_BENCH_POINTS, MAX_BENCH_REPS, MAX_BENCH_WARMUP,
                               MAX_CPU_BENCH_BYTES, MAX_CPU_BENCH_WORK, MAX_GPU_BENCH_WORK)

GPU_TOKENS = (1, 64, 4096, 65536, 1 << 20, 1 << 24)
CPU_TOKENS = (1, 64, 4096, 65536)
ROTATE_BYTES = 256 << 20  # inputs + outputs rotated per (impl, n): 5x the H200's 50 MB L2
SAMPLE_MS = 2.0  # aim of one timed sample (calls back to back)
NO_GPU = ("no CUDA GPU here: hc bench times the tilelang kernels on a GPU; "
          "--device cpu times the torch reference on the CPU")


def bytes_per_token(hc: int) -> int:
    """Fewest bytes one token moves: its mix row read, pre, post and comb written (float32)."""
    return 4 * (mix_width(hc) + 2 * hc + hc * hc)


# Output-sized arrays alive at the peak of one token count, beside its input sets: the reference's
# temporaries, the outputs kept for the comparison and its float64 copies, with a margin.
PEAK_OUTPUTS = 16


def peak_bytes(n: int, hc: int) -> int:
    """An upper estimate of what one token count holds at once: the rotated sets (at most the
    rotation's bytes and one set more) and PEAK_OUTPUTS arrays of pre, post and comb."""
    return ROTATE_BYTES + n * bytes_per_token(hc) + PEAK_OUTPUTS * n * 4 * (2 * hc + hc * hc)


def calls_per_point(reps: int, warmup: int) -> int:
    """Calls of one implementation at one token count, a sample of one call each (more calls a
    sample only where a call is short): warm-up, the compared output, the estimate, the samples."""
    return max(1, warmup) + 1 + 3 + reps


def work(tokens: tuple[int, ...], hc: int, iters: int, calls: int) -> int:
    """The reference's work for every call of one implementation: tokens x hc^2 x iterations."""
    return sum(tokens) * hc * hc * iters * calls


def check_size(tokens: tuple[int, ...], hc: int, iters: int, reps: int, warmup: int, impls: int,
               cuda: bool, default: bool = False) -> None:
    """Refuse, before anything is built, a run that would not fit this device's memory or would run
    for far longer than a benchmark needs (limits.py), naming --tokens and the most it allows."""
    where = "a GPU" if cuda else "the CPU"
    cap = MAX_BENCH_BYTES if cuda else MAX_CPU_BENCH_BYTES
    most = max(0, (cap - ROTATE_BYTES) // (peak_bytes(1, hc) - ROTATE_BYTES))
    for n in tokens:
        if peak_bytes(n, hc) > cap:
            raise HcError(f"--tokens {n}: at hc {hc} one token count would hold about {peak_bytes(n, hc):,} bytes "
                          f"at once; on {where} hc bench builds at most {cap:,} (at most {most:,} tokens)")
    calls = calls_per_point(reps, warmup) * impls
    budget = MAX_GPU_BENCH_WORK if cuda else MAX_CPU_BENCH_WORK
    total = work(tokens, hc, iters, calls)
    if total > budget:
        most = budget // (hc * hc * iters * calls)
        given = f"the default --tokens {', '.join(map(str, tokens))}" if default else \
            f"--tokens {', '.join(map(str, tokens))}"
        raise HcError(f"{given}: {calls:,} calls a token count (--reps {reps}, --warmup {warmup}) at hc {hc} "
                      f"and {iters} iterations would take {total:,} steps (tokens x hc^2 x iterations); on {where} "
                      f"hc bench runs at most {budget:,}, here at most {most:,} tokens in all")


@dataclass(frozen=True)
class BenchRow:
    impl: str
    tokens: int
    ms: float  # median per call
    ms_min: float
    calls: int  # calls per timed sample
    samples: int
    tokens_per_s: float
    gbps: float
    pct_copy: float
    speedup: float | None  # the compared-against implementation's ms / this ms
    max_diff: dict[str, float]  # pre, post, comb: max |this - compared-against|
    differing: int  # elements whose float32 bits differ from the compared-against ones (NaN = NaN)


@dataclass(frozen=True)
class Machine:
    """Where and when a benchmark ran: the head of the split op's and the site's results alike (in
    their JSON, its keys stand where it does: field(metadata=INLINE))."""

    device: str
    device_name: str
    driver: str | None
    versions: dict[str, str | None]
    date: str


@dataclass(frozen=True)
class BenchResult:
    mode: str  # "gpu" or "cpu"
    machine: Machine = field(metadata=INLINE)
    hc_mult: int
    sinkhorn_iters: int
    eps: float
    bytes_per_token: int
    copy_gbps: float
    reference: str  # what the differences are taken against
    statistic: str
    rows: tuple[BenchRow, ...]
    skipped: dict[str, str]  # impl -> why it was not timed
    host: tuple[Any, ...] = ()  # bench_host.HostRow, when asked for


def machine(torch: Any, device: str) -> Machine:
    """The machine a benchmark ran on, now (its date is the end of the run)."""
    cuda = device.startswith("cuda")
    return Machine(device, torch.cuda.get_device_name(device) if cuda else "cpu", driver() if cuda else None,
                   versions(torch), datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


def driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def versions(torch: Any) -> dict[str, str | None]:
    from hccli import __version__

    found = {"hccli": __version__, "torch": torch.__version__, "cuda": torch.version.cuda, "tilelang": None}
    try:
        import tilelang

        found["tilelang"] = getattr(tilelang, "__version__", "?")
    except Exception:  # noqa: BLE001 - absent or broken: reported as None
        pass
    return found


def timer(torch: Any, cuda: bool) -> Callable[..., list[float]]:
    """samples(fn, calls, reps, each=None) -> per-call milliseconds of each sample; fn(i) runs call i,
    each(k), where given, is called between samples (outside the timed part) with the samples done."""
    import time

    def samples(fn: Callable[[int], None], calls: int, reps: int,
                each: Callable[[int], None] | None = None) -> list[float]:
        out = []
        i = 0
        for _ in range(reps):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(calls):
                    fn(i)
                    i += 1
                end.record()
                end.synchronize()
                out.append(start.elapsed_time(end) / calls)
            else:
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn(i)
                    i += 1
                out.append((time.perf_counter() - t0) * 1e3 / calls)
            if each:
                each(len(out))
        return out

    return samples


def copy_bandwidth(torch: Any, device: str, nbytes: int, reps: int = 10) -> float:
    """GB/s of a device-to-device copy of nbytes, counting bytes read plus written (median)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).normal_()
    dst = torch.empty_like(src)
    cuda = device.startswith("cuda")
    samples = timer(torch, cuda)
    dst.copy_(src)
    ms = statistics.median(samples(lambda i: dst.copy_(src), 1, reps))
    return 2 * nbytes / (ms * 1e-3) / 1e9


def _impl_launchers(torch: Any, names: tuple[str, ...], hc: int, iters: int, eps: float, cuda: bool,
                    skipped: dict[str, str], max_tokens: int) -> dict[str, tuple[Callable[..., Any], Callable[..., None]]]:
    """name -> (prepare, launch): prepare(mixes, scale, base, pre, post, comb) -> args, once per input set
    (views made there, not in the timed calls); launch(*args) runs the op into pre, post and comb, except
    the torch reference's, which allocates its outputs as every caller of it does."""
    from hccli.kernels import registry
    from hccli.kernels.tl_build import args_as_given

    launchers: dict[str, tuple[Callable[..., Any], Callable[..., None]]] = {}
    for name in names:
        if not registry.IMPLS[name].tilelang:
            def run_reference(m: Any, s: Any, b: Any, p: Any, q: Any, c: Any,
                              public: Callable[..., Any] = registry.function(name)) -> None:
                public(m, s, b, hc, iters, eps)
            launchers[name] = (args_as_given, run_reference)
            continue
        if not cuda:
            skipped[name] = "needs a CUDA GPU"
            continue
        problem = registry.tilelang_problem()
        if problem:
            skipped[name] = f"tilelang does not import ({problem})"
        elif not registry.kernel_supports(name, hc):
            skipped[name] = f"no build for hc_mult {hc}"
        else:  # the compiled kernel itself, the same launch path for every kernel
            launchers[name] = registry.timing(name, hc, iters, eps, max_tokens)
    return launchers


def _diff(torch: Any, got: tuple[Any, ...], want: tuple[Any, ...]) -> tuple[dict[str, float], int]:
    diffs, differing = {}, 0
    for name, g, w in zip(("pre", "post", "comb"), got, want):
        nan_g, nan_w = g.isnan(), w.isnan()
        both = nan_g & nan_w
        d = (g.double() - w.double()).abs().masked_fill(both, 0.0)
        diffs[name] = float(d.max()) if d.numel() else 0.0  # NaN where only one side is NaN
        differing += int(((g.view(torch.int32) != w.view(torch.int32)) & ~both).sum())
    return diffs, differing


def run_bench(
    tokens: tuple[int, ...] | None = None,
    impls: tuple[str, ...] | None = None,
    *,
    hc_mult: int = DEFAULT_HC_MULT,
    sinkhorn_iters: int = DEFAULT_SINKHORN_ITERS,
    eps: float = DEFAULT_HC_EPS,
    device: str | None = None,
    reps: int = 15,
    warmup: int = 3,
    seed: int = 0,
    host: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
) -> BenchResult:
    """Time `impls` (default every one registry.TIMED names) at each token count; HcError without a GPU
    unless device is cpu."""
    from hccli.kernels.registry import IMPLS, TIMED, function, import_torch, normalise_device
    from hccli.kernels.torch_ref import check_op_params

    check_op_params(hc_mult, sinkhorn_iters, eps)
    impls = TIMED if impls is None else impls
    for name in impls:
        if name not in TIMED:
            raise HcError(f"implementation {name!r} is unknown to hc bench; expected some of {', '.join(TIMED)}")
    if not (1 <= reps <= MAX_BENCH_REPS and 0 <= warmup <= MAX_BENCH_WARMUP):
        raise HcError(f"reps {reps} / warmup {warmup}: expected reps 1 to {MAX_BENCH_REPS:,} and warmup 0 to "
                      f"{MAX_BENCH_WARMUP:,}")
    torch = import_torch()
    dev = normalise_device(torch, device)
    if dev is None:
        if not torch.cuda.is_available():
            raise HcError(NO_GPU)
        dev = "cuda:0"
    cuda = dev.startswith("cuda")
    given, tokens = tokens, tuple(tokens or (GPU_TOKENS if cuda else CPU_TOKENS))
    if any(n < 1 for n in tokens) or len(tokens) > MAX_BENCH_POINTS:
        raise HcError(f"token counts {list(tokens)[:MAX_BENCH_POINTS]}: expected 1 to {MAX_BENCH_POINTS} of them, "
                      f"each >= 1")
    hc, width = hc_mult, mix_width(hc_mult)
    names = tuple(n for n in TIMED if n in impls)  # references first: the others compare with one
    check_size(tokens, hc, sinkhorn_iters, reps, warmup,
               len(names) if cuda else sum(not IMPLS[n].tilelang for n in names), cuda, default=given is None)
    if cuda:
        torch.cuda.set_device(dev)
    bpt = bytes_per_token(hc)
    skipped: dict[str, str] = {}
    launchers = _impl_launchers(torch, names, hc, sinkhorn_iters, eps, cuda, skipped, max(tokens))
    if not launchers:  # nothing can be timed here: say why as run-kernel does for the same --impl
        from hccli.kernels.registry import resolve_impl

        for name in names:
            resolve_impl(name, dev, hc)
        raise HcError(f"nothing to time on {dev}: {'; '.join(f'{n} {why}' for n, why in skipped.items())}")
    ref_name = next((n for n in launchers if IMPLS[n].reference), None)
    samples = timer(torch, cuda)
    copy_gbps = copy_bandwidth(torch, dev, (1 << 30) if cuda else (256 << 20))

    rows: list[BenchRow] = []
    total, done = len(tokens) * len(launchers), 0
    g = torch.Generator(device=dev).manual_seed(seed % (1 << 64))  # any seed: torch takes 64 bits
    scale = (torch.rand(3, device=dev, generator=g) * 1.9 + 0.1).contiguous()
    base = torch.randn(width, device=dev, generator=g).contiguous()
    for n in tokens:
        nsets = max(1, min(8, math.ceil(ROTATE_BYTES / (n * bpt))))
        sets = []
        for _ in range(nsets):
            mixes = torch.randn(n, width, device=dev, generator=g)
            outs = tuple(torch.full(shape, float("nan"), device=dev) for shape in ((n, hc), (n, hc), (n, hc, hc)))
            sets.append((mixes, outs))
        ref_out: tuple[Any, ...] | None = None
        ref_ms: float | None = None
        for name, (prepare, launch) in launchers.items():
            if progress:
                progress(done, total, f"{name} n={n:,}")
            args = [prepare(mixes, scale, base, *outs) for mixes, outs in sets]

            def call(i: int, launch: Callable[..., None] = launch, args: list[Any] = args) -> None:
                launch(*args[i % nsets])

            for i in range(max(1, warmup)):
                call(i)
            if cuda:
                torch.cuda.synchronize()
            # one call's output on set 0 (outputs poisoned first: unwritten elements show as NaN)
            mixes0, outs0 = sets[0]
            for t in outs0:
                t.fill_(float("nan"))
            if not IMPLS[name].tilelang:  # the reference returns its outputs
                got = function(name)(mixes0, scale, base, hc, sinkhorn_iters, eps)
            else:
                call(0)
                got = tuple(t.clone() for t in outs0)
            if name == ref_name:
                ref_out = got
            diffs, differing = _diff(torch, got, ref_out) if ref_out is not None else ({}, 0)
            est = statistics.median(samples(call, 1, 3))
            calls = max(1, min(1000, int(SAMPLE_MS / max(est, 1e-4))))

            def sampled(k: int, what: str = f"{name} n={n:,}") -> None:
                if progress:  # one token count on the CPU can take a while: each sample is shown
                    progress(done, total, f"{what} sample {k}/{reps}")

            times = samples(call, calls, reps, sampled)
            ms = statistics.median(times)
            if name == ref_name:
                ref_ms = ms
            gbps = n * bpt / (ms * 1e-3) / 1e9
            rows.append(BenchRow(name, n, ms, min(times), calls, reps, n / (ms * 1e-3), gbps,
                                 100.0 * gbps / copy_gbps, (ref_ms / ms) if ref_ms else None, diffs, differing))
            done += 1
        del sets
        if cuda:
            torch.cuda.empty_cache()
    if progress:
        progress(total, total, "done")

    statistic = (f"median over {reps} samples of the per-call time of back-to-back calls with "
                 f"preallocated outputs ({'CUDA events' if cuda else 'perf_counter'}), after {max(1, warmup)} "
                 f"warm-up calls; inputs rotated over sets of >= {ROTATE_BYTES >> 20} MiB in all")
    host_rows: tuple[Any, ...] = ()
    if host:
        from hccli.bench.host import time_host

        host_rows = time_host(torch, dev, tuple(launchers), hc, sinkhorn_iters, eps, rows, reps)
    reference = IMPLS[ref_name].reference if ref_name else "nothing (no reference timed)"
    return BenchResult("gpu" if cuda else "cpu", machine(torch, dev), hc, sinkhorn_iters, float(eps), bpt, copy_gbps,
                       reference, statistic, tuple(rows), skipped, host_rows)
