"""Time the split-Sinkhorn op: the torch reference (on the GPU) against the tilelang kernel.

Both run in the same process on the same inputs; each call is timed with CUDA
events after warm-up (which also builds the kernel), and the median is reported
with the ratio reference / kernel. Effective bandwidth counts the bytes the op
must move: the mix row read plus pre, post and comb written, 4 bytes each.

    PYTHONPATH=. python3 benchmarks/bench_kernel.py [--tokens 1 4096 ...] [--reps 30]

Writes bench_kernel.json to $OUT when that is set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def time_ms(fn, reps: int, warmup: int) -> float:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 4096, 65536, 1 << 20, 1 << 22])
    ap.add_argument("--hc", type=int, default=4)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("bench_kernel: no CUDA device", file=sys.stderr)
        return 2
    import tilelang

    from hccli.kernels.reference import hc_split_sinkhorn_torch
    from hccli.kernels.tilelang_split import hc_split_sinkhorn_tilelang

    hc, iters, eps = args.hc, args.iters, 1e-6
    width = (2 + hc) * hc
    bytes_per_token = 4 * (width + 2 * hc + hc * hc)
    g = torch.Generator(device="cuda").manual_seed(0)
    scale = torch.rand(3, device="cuda", generator=g) + 0.5
    base = torch.randn(width, device="cuda", generator=g)
    rows = []
    for n in args.tokens:
        mixes = torch.randn(n, width, device="cuda", generator=g)
        out = tuple(torch.empty(s, device="cuda") for s in ((n, hc), (n, hc), (n, hc, hc)))
        ref_ms = time_ms(lambda: hc_split_sinkhorn_torch(mixes, scale, base, hc, iters, eps), args.reps, args.warmup)
        tl_ms = time_ms(lambda: hc_split_sinkhorn_tilelang(mixes, scale, base, hc, iters, eps, out=out), args.reps, args.warmup)
        gbps = n * bytes_per_token / (tl_ms * 1e-3) / 1e9
        rows.append(
            {
                "tokens": n,
                "torch_ms": round(ref_ms, 5),
                "tilelang_ms": round(tl_ms, 5),
                "ratio": round(ref_ms / tl_ms, 2),
                "tilelang_GBps": round(gbps, 1),
            }
        )
        del mixes, out
        torch.cuda.empty_cache()

    info = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "tilelang": getattr(tilelang, "__version__", "?"),
        "hc_mult": hc,
        "sinkhorn_iters": iters,
        "reps": args.reps,
        "statistic": "median of CUDA-event times per call, after warm-up",
    }
    print(f"{info['device']}, torch {info['torch']}, tilelang {info['tilelang']}; hc {hc}, iters {iters}, median of {args.reps}")
    print(f"{'tokens':>9} {'torch ms':>10} {'tilelang ms':>12} {'ratio':>8} {'tilelang GB/s':>14}")
    for r in rows:
        print(f"{r['tokens']:>9} {r['torch_ms']:>10.4f} {r['tilelang_ms']:>12.4f} {r['ratio']:>7.1f}x {r['tilelang_GBps']:>14.1f}")
    out_dir = os.environ.get("OUT")
    if out_dir:
        Path(out_dir, "bench_kernel.json").write_text(json.dumps({**info, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
