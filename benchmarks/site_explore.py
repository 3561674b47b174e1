"""Device-only: time the site kernels' parts and the projection's layout variants at V4.1-Flash shapes.

hc 4, dim 5120, bfloat16 streams. The projection with the delayed collapse, launched raw
(compiled kernel, buffers given): with one split it finishes its tokens itself (the whole
V4.1 pre step in one launch), with 8 it leaves a workspace for the finish kernel (timed
apart). Per variant of site_tl.ProjTiling at 8,192 and 65,536 tokens; then the finish,
collapse and write kernels alone. Medians of CUDA events over back-to-back launches,
inputs rotated over two sets; % of copy counts x read and collapsed written.

    PYTHONPATH=.:<tilelang site> python3 benchmarks/site_explore.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hccli.kernels.site_tl import DEFAULT_PROJ, WIDE_PROJ, ProjTiling  # noqa: E402

DIM = 5120
V41 = (20, 1e-6, 1e-20)
# Beside the default: a third stage in flight (shared memory merges the epilogue's buffers into the
# stages', so 3 x 72 KB fit); 128-token blocks of two warp groups, which read each fn tile once for
# twice the tokens (half the L2 traffic for fn), with 64 or 32 features a step; each with the step's
# wgmma left running over its element work. Earlier runs (NOTES.md): 32 features in 3 stages with
# 64-token blocks, 30% slower; one stage, two blocks an SM. Not here: TMA lowering alone leaves the
# copies as cp.async, and tilelang's warp-specialised pipeline needs sm_90a (setmaxnreg), not sm_90.
# Run 4 timed all five; site_tl.WIDE_PROJ is the third (128-token blocks, 64 features, 2 stages), now
# timed beside the default with the two closest others.
VARIANTS = [ProjTiling(stages=3, async_mma=True), ProjTiling(block_tokens=128, threads=256, async_mma=True)]


def variant_keys(tiling: ProjTiling) -> list[tuple]:
    """make_proj keys timed for a variant: delayed collapse, one split (finishing) and, so that 8,192
    tokens still give every SM a block, 8 (64-token blocks) or 2 (128-token blocks)."""
    more = 8 if tiling.block_tokens == 64 else 2
    return [(DIM, "bfloat16", True, 1, tiling, V41), (DIM, "bfloat16", True, more, tiling, None)]


def _time(torch, fn, reps=20, calls=5):
    """Median per-call milliseconds of `reps` samples of `calls` back-to-back calls (hc bench's timer)."""
    from hccli.kernels.bench import timer

    fn(0)
    torch.cuda.synchronize()
    return statistics.median(timer(torch, True)(fn, calls, reps))


def _packed(torch, fn, bd):
    from hccli.kernels.site_pre import pack_fn

    parts = pack_fn(fn, DIM, "bfloat16").data  # laid out for the default step
    b0 = DEFAULT_PROJ.block_dim
    full = parts.reshape(DIM // b0, 80, 4, b0).permute(1, 2, 0, 3).reshape(80, 4, DIM)
    return full.view(80, 4, DIM // bd, bd).permute(2, 0, 1, 3).reshape(DIM // bd, 80, 4 * bd).contiguous()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch

    from hccli.kernels import site_pre as P
    from hccli.kernels import site_write as Wr
    from hccli.kernels import tl_build
    from hccli.kernels.bench import copy_bandwidth
    from hccli.kernels.site_proj import make_proj

    dev = "cuda:0"
    copy = copy_bandwidth(torch, dev, 1 << 30)
    fn = torch.randn(24, 4 * DIM, device=dev) / (4 * DIM) ** 0.5
    scale, base = torch.rand(3, device=dev) + 0.5, torch.randn(24, device=dev)
    rows = []
    for n in (8192, 65536):
        sets = [(torch.randn(n, 4, DIM, device=dev).bfloat16(), torch.rand(n, 4, device=dev),
                 torch.empty(n, DIM, device=dev, dtype=torch.bfloat16)) for _ in range(2)]
        outs = [torch.empty(n, 24, device=dev), torch.empty(n, 4, device=dev), torch.empty(n, 4, device=dev),
                torch.empty(n, 4, 4, device=dev)]
        ws = torch.empty(8, n, 32, device=dev)
        for tiling in [DEFAULT_PROJ, WIDE_PROJ] + VARIANTS:
            parts = _packed(torch, fn, tiling.block_dim)
            for key in variant_keys(tiling):
                splits = key[3]
                try:
                    k = tl_build.jit(make_proj, P._configs, key)
                except Exception as exc:  # noqa: BLE001 - a variant that does not build is reported
                    rows.append({"tokens": n, "tiling": repr(tiling), "splits": splits, "error": str(exc)[-300:]})
                    continue
                if splits == 1:
                    def call(i, k=k, parts=parts):
                        x, pm, col = sets[i % 2]
                        k(x, parts, pm, scale, base, *outs, col)
                else:
                    def call(i, k=k, parts=parts, w=ws[:splits]):
                        x, pm, col = sets[i % 2]
                        k(x, parts, pm, w, col)
                try:
                    ms = _time(torch, call)
                except Exception as exc:  # noqa: BLE001 - e.g. more shared memory than a block gets
                    rows.append({"tokens": n, "tiling": repr(tiling), "splits": splits, "error": str(exc)[-300:]})
                    continue
                rows.append({"tokens": n, "tiling": repr(tiling), "splits": splits, "ms": ms, "mtok_s": n / ms / 1e3,
                             "pct_copy": 100 * n * 5 * DIM * 2 / (ms * 1e-3) / 1e9 / copy})
        wsr = torch.randn(8, n, 32, device=dev).abs()
        for s in (8, 2):
            fin = P.compiled_finish(DIM, *V41, s)
            rows.append({"tokens": n, "kernel": f"finish ({s} splits)",
                         "ms": _time(torch, lambda i: fin(wsr[:s], scale, base, *outs))})
        col = P.compiled_collapse(DIM, "bfloat16")
        ms = _time(torch, lambda i: col(sets[i % 2][0], outs[1], sets[i % 2][2]))
        rows.append({"tokens": n, "kernel": "collapse", "ms": ms, "pct_copy": 100 * n * 5 * DIM * 2 / (ms * 1e-3) / 1e9 / copy})
        wr = Wr.compiled_write(DIM, "bfloat16")
        x, f, o = sets[0][0], sets[1][2], torch.empty_like(sets[0][0])
        ms = _time(torch, lambda i: wr(f, x, outs[2], outs[3], o))
        rows.append({"tokens": n, "kernel": "write", "ms": ms, "mtok_s": n / ms / 1e3,
                     "pct_copy": 100 * n * 9 * DIM * 2 / (ms * 1e-3) / 1e9 / copy})
        del sets
        torch.cuda.empty_cache()
    doc = {"copy_gbps": copy, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))
    print(f"copy {copy:,.0f} GB/s")
    for r in rows:
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
