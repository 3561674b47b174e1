"""Device-only: time the site kernels' parts and the projection's layout variants at V4.1-Flash shapes.

hc 4, dim 5120, bfloat16 streams. The projection with the delayed collapse, launched raw
(compiled kernel, buffers given): with one split it finishes its tokens itself (the whole
V4.1 pre step in one launch), with 8 it leaves a workspace for the finish kernel (timed
apart). Per variant of site_tl.ProjTiling at 8,192 and 65,536 tokens; then the finish,
collapse and write kernels alone. Medians of CUDA events over back-to-back launches,
inputs rotated over two sets; % of copy counts x read and collapsed written.

    PYTHONPATH=.:<tilelang site> python3 benchmarks/site_explore.py [--json FILE] [--quick]

--quick: the default tiling alone at 8,192 tokens, one round of 5 samples, the 8-split finish:
the few kernels the GPU tests build anyway, for a check that the script still runs. Without a
CUDA device it says so and exits 2, after importing what it runs.
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
# Beside the default (three stages of x and of fn) and the wide blocks (two of each): the default's
# 64-token blocks with two stages of each, the depth the projection had (by cp.async) before run 16.
# The variants of runs 11-14 are in commit ce62494, those of run 16 in the patch against it that
# commit 135ae8f keeps (NOTES.md, run 16).
VARIANTS = [ProjTiling(x_stages=2, fn_stages=2)]
ROUNDS = 3  # every variant timed once a round, in turn, so a drift in the call shows in all of them
OUTPUTS = ("mixes", "pre", "post", "comb", "collapsed")


def variant_keys(tiling: ProjTiling) -> list[tuple]:
    """make_proj keys timed for a variant: delayed collapse, one split (finishing) and, so that 8,192
    tokens still give every SM a block, 8 (64-token blocks) or 2 (128-token blocks); for the default,
    one split with a single Sinkhorn iteration: the difference is what 19 iterations cost in-kernel."""
    keys = [(DIM, "bfloat16", True, 1, tiling, V41)]
    if tiling == DEFAULT_PROJ or tiling.block_tokens == 128:
        keys.append((DIM, "bfloat16", True, 8 if tiling.block_tokens == 64 else 2, tiling, None))
    return keys + ([(DIM, "bfloat16", True, 1, tiling, (1,) + V41[1:])] if tiling == DEFAULT_PROJ else [])


def _time(torch, fn, reps=20, calls=5):
    """Median per-call milliseconds of `reps` samples of `calls` back-to-back calls (hc bench's timer)."""
    from hccli.bench.op import timer

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
    ap.add_argument("--quick", action="store_true", help="the default tiling at 8,192 tokens, one short round")
    args = ap.parse_args()
    import torch

    from hccli.bench.op import copy_bandwidth
    from hccli.kernels import site_pre as P
    from hccli.kernels import site_write as Wr
    from hccli.kernels import tl_build
    from hccli.kernels.site_proj import make_proj

    if not torch.cuda.is_available():
        print("site_explore: no CUDA device; this benchmark runs on the GPU machine only", file=sys.stderr)
        return 2
    counts, tilings = ((8192,), [DEFAULT_PROJ]) if args.quick else ((8192, 65536), [DEFAULT_PROJ, WIDE_PROJ] + VARIANTS)
    rounds, reps, splits = (1, 5, (8,)) if args.quick else (ROUNDS, 20, (8, 2))
    dev = "cuda:0"
    copy = copy_bandwidth(torch, dev, 1 << 28 if args.quick else 1 << 30)
    fn = torch.randn(24, 4 * DIM, device=dev) / (4 * DIM) ** 0.5
    scale, base = torch.rand(3, device=dev) + 0.5, torch.randn(24, device=dev)
    rows = []
    for n in counts:
        sets = [(torch.randn(n, 4, DIM, device=dev).bfloat16(), torch.rand(n, 4, device=dev),
                 torch.empty(n, DIM, device=dev, dtype=torch.bfloat16)) for _ in range(2)]
        outs = [torch.empty(n, 24, device=dev), torch.empty(n, 4, device=dev), torch.empty(n, 4, device=dev),
                torch.empty(n, 4, 4, device=dev)]
        ws = torch.empty(8, n, 32, device=dev)
        calls, ref = [], None  # ref: the default's outputs, the first kernel timed
        for tiling in tilings:
            parts = _packed(torch, fn, tiling.block_dim)
            for key in variant_keys(tiling):
                row = {"tokens": n, "tiling": repr(tiling), "splits": key[3], "iters": key[5][0] if key[5] else None}
                try:
                    k = tl_build.jit(make_proj, P._configs, key)
                except Exception as exc:  # noqa: BLE001 - a variant that does not build is reported
                    rows.append(dict(row, error=str(exc)[-300:]))
                    continue
                if key[3] == 1:
                    def call(i, k=k, parts=parts):
                        x, pm, col = sets[i % 2]
                        k(x, parts, pm, scale, base, *outs, col)
                else:
                    def call(i, k=k, parts=parts, w=ws[:key[3]]):
                        x, pm, col = sets[i % 2]
                        k(x, parts, pm, w, col)
                if key[3] == 1 and key[5] == V41:  # outputs of set 0 against the default's, bit for bit
                    call(0)
                    got = [t.clone() for t in outs] + [sets[0][2].clone()]
                    ref = got if ref is None else ref
                    row["identical"] = {o: bool(torch.equal(a, b)) for o, a, b in zip(OUTPUTS, got, ref)}
                    row["max_diff"] = {o: float((a.float() - b.float()).abs().max()) for o, a, b in zip(OUTPUTS, got, ref)}
                calls.append((row, call))
        for _ in range(rounds):
            for row, call in calls:
                try:
                    row.setdefault("ms_rounds", []).append(_time(torch, call, reps))
                except Exception as exc:  # noqa: BLE001 - e.g. more shared memory than a block gets
                    row["error"] = str(exc)[-300:]
        for row, _ in calls:
            if "ms_rounds" in row:
                ms = row["ms"] = min(row["ms_rounds"])
                row["mtok_s"] = n / ms / 1e3
                row["pct_copy"] = 100 * n * 5 * DIM * 2 / (ms * 1e-3) / 1e9 / copy
            rows.append(row)
        wsr = torch.randn(8, n, 32, device=dev).abs()
        for s in splits:
            fin = P.compiled_finish(DIM, *V41, s)
            rows.append({"tokens": n, "kernel": f"finish ({s} splits)",
                         "ms": _time(torch, lambda i: fin(wsr[:s], scale, base, *outs), reps)})
        col = P.compiled_collapse(DIM, "bfloat16")
        ms = _time(torch, lambda i: col(sets[i % 2][0], outs[1], sets[i % 2][2]), reps)
        rows.append({"tokens": n, "kernel": "collapse", "ms": ms, "pct_copy": 100 * n * 5 * DIM * 2 / (ms * 1e-3) / 1e9 / copy})
        wr = Wr.compiled_write(DIM, "bfloat16")
        x, f, o = sets[0][0], sets[1][2], torch.empty_like(sets[0][0])
        ms = _time(torch, lambda i: wr(f, x, outs[2], outs[3], o), reps)
        rows.append({"tokens": n, "kernel": "write", "ms": ms, "mtok_s": n / ms / 1e3,
                     "pct_copy": 100 * n * 9 * DIM * 2 / (ms * 1e-3) / 1e9 / copy})
        sets.clear()  # the closures above are done with them
        torch.cuda.empty_cache()
    doc = {"copy_gbps": copy, "quick": args.quick, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))
    print(f"copy {copy:,.0f} GB/s")
    for r in rows:
        if "tiling" in r and "ms" in r:
            same = "" if "identical" not in r else ("ident" if all(r["identical"].values()) else
                                                    "diff " + " ".join(f"{o}={v:.2g}" for o, v in r["max_diff"].items()))
            rates = " ".join(f"{r['tokens'] / m / 1e3:6.2f}" for m in r["ms_rounds"])
            print(f"{r['tokens']:>6} s{r['splits']} it{r['iters']} {r['tiling'][11:-1]:<100} {rates} M {same}")
        else:
            print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
