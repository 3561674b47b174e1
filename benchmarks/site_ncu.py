"""Device-only: launch the site projection (delayed collapse, one split, 8,192 tokens, V4.1-Flash shapes)
three times, for Nsight Compute to profile the second launch.

    ncu --clock-control none --section SpeedOfLight --section InstructionStats --section WarpStateStats \
        -k regex:site_pre_proj --launch-skip 1 --launch-count 1 python3 benchmarks/site_ncu.py

Three launches are all it does, so it has no quick mode. Without a CUDA device it says so and exits 2,
after importing what it runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    import torch

    from hccli.kernels import site_pre as P
    from hccli.kernels import tl_build
    from hccli.kernels.site_proj import make_proj
    from hccli.kernels.site_tl import DEFAULT_PROJ

    if not torch.cuda.is_available():
        print("site_ncu: no CUDA device; this runs on the GPU machine only", file=sys.stderr)
        return 2
    n, D, dev = 8192, 5120, "cuda"
    k = tl_build.jit(make_proj, P._configs, (D, "bfloat16", True, 1, DEFAULT_PROJ, (20, 1e-6, 1e-20)))
    parts = P.pack_fn(torch.randn(24, 4 * D, device=dev) / (4 * D) ** 0.5, D, "bfloat16").data
    x, pm = torch.randn(n, 4, D, device=dev).bfloat16(), torch.rand(n, 4, device=dev)
    col = torch.empty(n, D, device=dev, dtype=torch.bfloat16)
    outs = [torch.empty(n, 24, device=dev), torch.empty(n, 4, device=dev), torch.empty(n, 4, device=dev),
            torch.empty(n, 4, 4, device=dev)]
    scale, base = torch.rand(3, device=dev) + 0.5, torch.randn(24, device=dev)
    for _ in range(3):
        k(x, parts, pm, scale, base, *outs, col)
    torch.cuda.synchronize()
    print(f"site_ncu: 3 launches of the projection at {n} tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
