"""Device-only: compile, in parallel, every site kernel that the GPU tests, `hc bench --op site-*` and
site_explore.py will ask for, into tilelang's disk cache (~/.tilelang/cache).

A bare device machine compiles each kernel on first use, one after another (~30 s for a
projection). tilelang.par_compile compiles the same PrimFuncs with the same target
("auto") and pass configs as tl_build.jit, so the later calls are cache hits; this
only moves the compiles to the start, side by side. TileKernels' kernels, where
`tile_kernels` imports, are warmed too, and the serving engines' saved kernels of
.device/peers (bench/peers.py's kernel_keys: vLLM's at the bench's shape) where it is there.

    PYTHONPATH=.:<tilelang site>[:<TileKernels>] python3 benchmarks/site_warm.py [--quick]

--quick builds the first PrimFunc of each list (and of the explored variants) and compiles none:
no GPU needed, a few seconds, for CI to see that every list still fits its make_* function.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# what tests/test_site_kernels_gpu.py and the benchmarks launch: (dim, stream, collapse, splits, op), in
# 64-token blocks, and WIDE: the same in 128-token blocks (site_pre.choose_launch's from 16,001 tokens)
V41 = (20, 1e-6, 1e-20)
WIDE = [(5120, "bfloat16", c, 1, V41) for c in (True, False)] + [
    (4096, "bfloat16", True, 1, (20, 1e-6, 1e-6)), (7168, "bfloat16", False, 1, (20, 1e-6, 1e-6))]
PROJ = [(5120, "bfloat16", c, s, V41 if s == 1 else None) for c in (True, False) for s in (1, 8, 16)] + [
    (4096, "bfloat16", True, 16, None), (7168, "bfloat16", False, 16, None), (64, "bfloat16", True, 1, V41),
    (64, "bfloat16", False, 1, V41), (5120, "float32", True, 16, None), (5120, "float32", False, 16, None),
    # tests/test_run_site_gpu.py: tiny V4 (norm_eps 1e-6, own-site collapse), tiny V4.1 with float32 streams
    (64, "bfloat16", False, 1, (20, 1e-6, 1e-6)), (64, "float32", True, 1, V41)]
FINISH = [(4, 5120, 20, 1e-6, 1e-20, 8), (4, 5120, 20, 1e-6, 1e-20, 16), (4, 4096, 20, 1e-6, 1e-6, 16),
          (4, 7168, 20, 1e-6, 1e-6, 16), (4, 5120, 20, 1e-6, 1e-20, 2)]
COLLAPSE = [(5120, "bfloat16"), (7168, "bfloat16"), (64, "bfloat16"), (5120, "float32")]
WRITE = [(64, "bfloat16"), (4096, "bfloat16"), (5120, "bfloat16"), (7168, "bfloat16"), (5120, "float32"),
         (64, "float32")]
EXACT_HC = (4, 2)  # the exact split kernel: hc 4, and hc 2 for run-site's torch path on another stream count


def _peer_keys() -> list:
    """(jit, compile-time arguments) of the saved engines' kernels at the bench's shape; [] without .device/peers."""
    from hccli.bench import peers as P

    folder = ROOT / ".device" / "peers"
    if not folder.is_dir():
        return []
    got, skipped = P.load(folder, (P.VLLM, P.SGLANG))
    for engine, why in skipped.items():
        print(f"{engine} not warmed: {why}")
    return [k for peer in got.values() for k in P.kernel_keys(peer, 5120, 1e-20, 1e-6, 20)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="build one PrimFunc of each kind, compile none")
    args = ap.parse_args()
    import tilelang

    from hccli.kernels import site_tl as S
    from hccli.kernels import tl_build
    from hccli.kernels.site_proj import make_proj
    from hccli.kernels.token_kernels import DEFAULT_TILING, make_prim_func
    from site_explore import VARIANTS, variant_keys

    t0 = time.time()
    explored = [k for tiling in [S.WIDE_PROJ] + VARIANTS for k in variant_keys(tiling)]

    def each(keys: list) -> list:
        return keys[:1] if args.quick else keys

    funcs = [make_proj(d, st, c, s, S.DEFAULT_PROJ, op) for d, st, c, s, op in each(PROJ)]
    funcs += [make_proj(d, st, c, s, S.WIDE_PROJ, op) for d, st, c, s, op in each(WIDE)]
    funcs += [S.make_finish(*k) for k in each(FINISH)] + [S.make_collapse(*k) for k in each(COLLAPSE)]
    funcs += [S.make_write(*k) for k in each(WRITE)]
    funcs += [make_prim_func("exact", hc, 20, 1e-6, DEFAULT_TILING) for hc in each(list(EXACT_HC))]
    funcs += [make_proj(*k) for k in each(explored)]
    if args.quick:  # the saved engines' files are not in git, so CI has none: tests/bench/test_site_chain.py builds them
        kinds = sorted({type(f).__name__ for f in funcs})
        print(f"built {len(funcs)} PrimFuncs, one of each kind ({', '.join(kinds)}), compiled none, in "
              f"{time.time() - t0:.1f} s")
        return 0
    groups = [(funcs, tl_build.pass_configs())]  # the published kernel's pass configs, as tl_build.jit's
    peers = []
    try:
        from tile_kernels.mhc.norm_fn_kernel import _mhc_pre_norm_fn_fwd_mul
        from tile_kernels.mhc.post_kernel import _mhc_post_fwd
        from tile_kernels.mhc.pre_big_fuse_kernel import _mhc_pre_big_fuse

        peers = [lambda: _mhc_pre_norm_fn_fwd_mul(24, 1, 4 * 5120), lambda: _mhc_post_fwd(4, 5120),
                 lambda: _mhc_pre_big_fuse(5120, 1e-20, 1e-6, 1e-6, 2.0, 20, n_splits=1, mhc_mult=4)]
    except Exception as exc:  # noqa: BLE001 - the peer is optional
        print(f"tile_kernels not warmed: {type(exc).__name__}: {exc}")
    # the saved engines' kernels: each its own tilelang.jit (its pass configs), compiled as its call would
    peers += [lambda jit=jit, kw=kw: jit.compile(**kw) for jit, kw in _peer_keys()]
    with ThreadPoolExecutor(max(1, min(8, len(peers)))) as pool:
        futures = [pool.submit(p) for p in peers]
        for group, configs in groups:
            tilelang.par_compile(group, target="auto", pass_configs=configs, ignore_error=True)
        for f in futures:
            try:
                f.result()
            except Exception as exc:  # noqa: BLE001
                print(f"peer warm-up failed: {type(exc).__name__}: {exc}")
    print(f"warmed {sum(len(g) for g, _ in groups)} kernels and {len(peers)} of the peers' in "
          f"{time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
