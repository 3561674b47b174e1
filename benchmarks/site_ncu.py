"""Device-only: launch the site projection (delayed collapse, one split, 8,192 tokens, V4.1-Flash shapes)
three times, for Nsight Compute to profile the second launch.

    ncu --clock-control none --section SpeedOfLight --section InstructionStats --section WarpStateStats \
        -k regex:site_pre_proj --launch-skip 1 --launch-count 1 python3 benchmarks/site_ncu.py
"""

import sys

import torch

sys.path.insert(0, ".")
from hccli.kernels import site_pre as P, tl_build  # noqa: E402
from hccli.kernels.site_proj import make_proj  # noqa: E402
from hccli.kernels.site_tl import DEFAULT_PROJ  # noqa: E402

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
