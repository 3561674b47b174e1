"""`hc bench --host`: the host time of one eager call of each implementation. No printing.

An engine calls the op eagerly ~86 times a token; at small n the GPU finishes a
kernel in a few microseconds, so what a call costs on the CPU (argument checks,
conversions, the launch itself) bounds the rate. Per implementation and n:

- raw: the compiled tilelang kernel called directly with preallocated outputs
  (tilelang's own launch path; nothing of ours in between);
- call: the public function with preallocated outputs (`out=`);
- alloc: the public function allocating its outputs, as most callers use it.

Each is the median over `reps` samples of (wall time of `calls` back-to-back
calls) / calls, the device synchronised before each sample and not inside it, so
that only host work is counted (the GPU keeps up at these n).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

from hccli.base.vocab import mix_width

HOST_TOKENS = (1, 64, 4096)
CALLS = 200  # per sample; the launch queue holds ~1000, so the host never waits on the GPU


@dataclass(frozen=True)
class HostRow:
    impl: str
    tokens: int
    gpu_ms: float | None  # the GPU-time row's median at this n, when it was timed
    raw_us: float | None  # compiled kernel, outputs given (tilelang kernels only)
    call_us: float  # public call, outputs given (torch: its plain call)
    alloc_us: float  # public call, outputs allocated
    call_vs_raw: float | None  # call_us / raw_us


def host_us(torch: Any, cuda: bool, fn: Callable[[], Any], calls: int, reps: int) -> float:
    out = []
    for _ in range(reps):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) * 1e6 / calls)
    if cuda:
        torch.cuda.synchronize()
    return statistics.median(out)


def time_host(torch: Any, device: str, names: tuple[str, ...], hc: int, iters: int, eps: float,
              gpu_rows: list[Any], reps: int) -> tuple[HostRow, ...]:
    from hccli.kernels.registry import IMPLS, function, timing

    cuda = device.startswith("cuda")
    gpu_ms = {(r.impl, r.tokens): r.ms for r in gpu_rows}
    rows = []
    g = torch.Generator(device=device).manual_seed(1)
    scale = (torch.rand(3, device=device, generator=g) * 1.9 + 0.1).contiguous()
    base = torch.randn(mix_width(hc), device=device, generator=g).contiguous()
    for n in HOST_TOKENS:
        mixes = torch.randn(n, mix_width(hc), device=device, generator=g)
        outs = tuple(torch.empty(s, device=device) for s in ((n, hc), (n, hc), (n, hc, hc)))
        for name in names:
            raw_us = None
            public = function(name)
            if not IMPLS[name].tilelang:  # the reference: no out=, and slower: fewer calls a sample
                calls = max(10, CALLS // 10)

                def call(public: Callable[..., Any] = public) -> Any:
                    return public(mixes, scale, base, hc, iters, eps)

                alloc = call
            else:
                calls = CALLS

                def call(public: Callable[..., Any] = public) -> Any:
                    return public(mixes, scale, base, hc, iters, eps, out=outs)

                def alloc(public: Callable[..., Any] = public) -> Any:
                    return public(mixes, scale, base, hc, iters, eps)

                prepare, raw_kernel = timing(name, hc, iters, eps, n)
                raw_args = prepare(mixes, scale, base, *outs)
                call()  # the first call compiles and fills the fast path's cache
                raw_us = host_us(torch, cuda, lambda: raw_kernel(*raw_args), calls, reps)
            call_us = host_us(torch, cuda, call, calls, reps)
            alloc_us = host_us(torch, cuda, alloc, calls, reps)
            rows.append(HostRow(name, n, gpu_ms.get((name, n)), raw_us, call_us, alloc_us,
                                call_us / raw_us if raw_us else None))
    return tuple(rows)

