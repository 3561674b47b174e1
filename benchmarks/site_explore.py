"""Device-only: time the site kernels' parts and the projection's layout variants at V4.1-Flash shapes.

hc 4, dim 5120, bfloat16 streams. Per variant of site_tl.ProjTiling, the projection with
the delayed collapse (the V4.1 pre step's bytes but for the finish) launched raw
(compiled kernel, buffers given) at 8,192 tokens (8 splits) and 65,536 (1 split); the
default layout also with the other split count at each, and the finish, collapse and
write kernels alone. Medians of CUDA events over back-to-back launches, inputs rotated
over two sets; GB/s counts x read, collapsed written and the workspace written.

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

from hccli.kernels.site_tl import ProjTiling  # noqa: E402

VARIANTS = [ProjTiling(block_dim=64, stages=2), ProjTiling(block_tokens=128, threads=256),
            ProjTiling(stages=4), ProjTiling(block_dim=16, stages=4)]
DIM = 5120


def _time(torch, fn, reps=20, calls=5):
    fn(0)
    torch.cuda.synchronize()
    out, i = [], 0
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn(i)
            i += 1
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / calls)
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch

    from hccli.kernels import site_pre as P
    from hccli.kernels import site_tl as S
    from hccli.kernels import site_write as Wr
    from hccli.kernels import tl_build
    from hccli.kernels.bench import copy_bandwidth

    dev = "cuda:0"
    copy = copy_bandwidth(torch, dev, 1 << 30)
    fn = torch.randn(24, 4 * DIM, device=dev) / (4 * DIM) ** 0.5
    rows = []
    for n in (8192, 65536):
        sets = [(torch.randn(n, 4, DIM, device=dev).bfloat16(), torch.rand(n, 4, device=dev),
                 torch.empty(n, DIM, device=dev, dtype=torch.bfloat16)) for _ in range(2)]
        for tiling in [S.DEFAULT_PROJ] + VARIANTS:
            for splits in ((1, 8) if tiling == S.DEFAULT_PROJ else ((8,) if n == 8192 else (1,))):
                bd = tiling.dim_step("bfloat16")
                parts = P.pack_fn(fn, DIM, "bfloat16").data  # laid out for the default step
                if bd != S.DEFAULT_PROJ.block_dim:
                    full = parts.reshape(DIM // S.DEFAULT_PROJ.block_dim, 80, 4, S.DEFAULT_PROJ.block_dim)
                    full = full.permute(1, 2, 0, 3).reshape(80, 4, DIM)
                    parts = full.view(80, 4, DIM // bd, bd).permute(2, 0, 1, 3).reshape(DIM // bd, 80, 4 * bd)
                    parts = parts.contiguous()
                ws = torch.empty(splits, n, 32, device=dev)
                try:
                    k = tl_build.jit(S.make_proj, P._configs, (DIM, "bfloat16", True, splits, tiling))
                except Exception as exc:  # noqa: BLE001 - a variant that does not build is reported
                    rows.append({"tokens": n, "tiling": repr(tiling), "splits": splits, "error": str(exc)[-300:]})
                    continue
                ms = _time(torch, lambda i: k(sets[i % 2][0], parts, sets[i % 2][1], ws, sets[i % 2][2]))
                nbytes = n * (4 * DIM * 2 + DIM * 2 + 16 + splits * 100)
                rows.append({"tokens": n, "tiling": repr(tiling), "splits": splits, "ms": ms,
                             "mtok_s": n / ms / 1e3, "pct_copy": 100 * nbytes / (ms * 1e-3) / 1e9 / copy})
        x = sets[0][0]
        fin = P.compiled_finish(DIM, 20, 1e-6, 1e-20)
        ws = torch.randn(8, n, 32, device=dev).abs()
        outs = [torch.empty(n, 24, device=dev), torch.empty(n, 4, device=dev), torch.empty(n, 4, device=dev),
                torch.empty(n, 4, 4, device=dev)]
        scale, base = torch.rand(3, device=dev), torch.randn(24, device=dev)
        rows.append({"tokens": n, "kernel": "finish (8 splits)", "ms": _time(torch, lambda i: fin(ws, scale, base, *outs))})
        col = P.compiled_collapse(DIM, "bfloat16")
        ms = _time(torch, lambda i: col(sets[i % 2][0], outs[1], sets[i % 2][2]))
        rows.append({"tokens": n, "kernel": "collapse", "ms": ms, "pct_copy": 100 * n * 5 * DIM * 2 / (ms * 1e-3) / 1e9 / copy})
        wr = Wr.compiled_write(DIM, "bfloat16")
        res, f, o = x, sets[1][2], torch.empty_like(x)
        ms = _time(torch, lambda i: wr(f, res, outs[2], outs[3], o))
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
