"""Device-only: compile, in parallel, every site kernel that the GPU tests, `hc bench --op site-*` and
site_explore.py will ask for, into tilelang's disk cache (~/.tilelang/cache).

A bare device machine compiles each kernel on first use, one after another (~30 s for a
projection). tilelang.par_compile compiles the same PrimFuncs with the same target
("auto") and pass configs as tl_build.jit, so the later calls are cache hits; this
only moves the compiles to the start, side by side. TileKernels' kernels, where
`tile_kernels` imports, are warmed too.

    PYTHONPATH=.:<tilelang site>[:<TileKernels>] python3 benchmarks/site_warm.py
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# what tests/test_site_kernels_gpu.py and the benchmarks launch
PROJ = [(5120, "bfloat16", c, s) for c in (True, False) for s in (1, 8, 32)] + [
    (4096, "bfloat16", True, 32), (7168, "bfloat16", False, 32), (64, "bfloat16", True, 1), (64, "bfloat16", False, 1),
    (5120, "float32", True, 32), (5120, "float32", False, 32)]
FINISH = [(4, 5120, 20, 1e-6, 1e-20), (4, 4096, 20, 1e-6, 1e-6), (4, 7168, 20, 1e-6, 1e-6), (4, 64, 20, 1e-6, 1e-20)]
COLLAPSE = [(5120, "bfloat16"), (7168, "bfloat16"), (64, "bfloat16"), (5120, "float32")]
WRITE = [(64, "bfloat16"), (4096, "bfloat16"), (5120, "bfloat16"), (7168, "bfloat16"), (5120, "float32")]


def main() -> int:
    import tilelang

    from hccli.kernels import site_tl as S
    from hccli.kernels import tl_build
    from hccli.kernels.token_kernels import DEFAULT_TILING, make_prim_func
    from site_explore import VARIANTS

    t0 = time.time()
    funcs = [S.make_proj(*k, S.DEFAULT_PROJ) for k in PROJ]
    funcs += [S.make_proj(5120, "bfloat16", True, s, v) for v in VARIANTS for s in (1, 8)]
    funcs += [S.make_finish(*k) for k in FINISH] + [S.make_collapse(*k) for k in COLLAPSE]
    funcs += [S.make_write(*k) for k in WRITE] + [make_prim_func("exact", 4, 20, 1e-6, DEFAULT_TILING)]
    peers = []
    try:
        from tile_kernels.mhc.norm_fn_kernel import _mhc_pre_norm_fn_fwd_mul
        from tile_kernels.mhc.post_kernel import _mhc_post_fwd
        from tile_kernels.mhc.pre_big_fuse_kernel import _mhc_pre_big_fuse

        peers = [lambda: _mhc_pre_norm_fn_fwd_mul(24, 1, 4 * 5120), lambda: _mhc_post_fwd(4, 5120),
                 lambda: _mhc_pre_big_fuse(5120, 1e-20, 1e-6, 1e-6, 2.0, 20, n_splits=1, mhc_mult=4)]
    except Exception as exc:  # noqa: BLE001 - the peer is optional
        print(f"tile_kernels not warmed: {type(exc).__name__}: {exc}")
    with ThreadPoolExecutor(max(1, len(peers))) as pool:
        futures = [pool.submit(p) for p in peers]
        tilelang.par_compile(funcs, target="auto", pass_configs=tl_build.pass_configs(), ignore_error=True)
        for f in futures:
            try:
                f.result()
            except Exception as exc:  # noqa: BLE001
                print(f"tile_kernels warm-up failed: {type(exc).__name__}: {exc}")
    print(f"warmed {len(funcs)} kernels and {len(peers)} of TileKernels' in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
