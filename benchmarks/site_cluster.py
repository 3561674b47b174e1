"""Device-only: the projection with fn shared by a 2-block cluster (ProjTiling(cluster=2)) against the default
and the wide blocks, V4.1 delayed collapse, one split, V4.1-Flash shapes; outputs compared bit for bit
with the default kernel's. Same timing as site_explore.py.

    PYTHONPATH=.:<tilelang site> python3 benchmarks/site_cluster.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.site_explore import DIM, V41, _packed, _time  # noqa: E402
from hccli.kernels.site_tl import DEFAULT_PROJ, WIDE_PROJ, ProjTiling  # noqa: E402

CLUSTER = ProjTiling(cluster=2)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch

    from hccli.kernels import site_pre as P
    from hccli.kernels import tl_build
    from hccli.kernels.bench import copy_bandwidth
    from hccli.kernels.site_proj import make_proj

    dev = "cuda:0"
    copy = copy_bandwidth(torch, dev, 1 << 30)
    fn = torch.randn(24, 4 * DIM, device=dev) / (4 * DIM) ** 0.5
    scale, base = torch.rand(3, device=dev) + 0.5, torch.randn(24, device=dev)
    parts = _packed(torch, fn, 64)
    rows = []
    for n in (8192, 65536):
        sets = [(torch.randn(n, 4, DIM, device=dev).bfloat16(), torch.rand(n, 4, device=dev),
                 torch.empty(n, DIM, device=dev, dtype=torch.bfloat16)) for _ in range(2)]
        got = {}
        for name, tiling in (("default", DEFAULT_PROJ), ("wide", WIDE_PROJ), ("cluster2", CLUSTER)):
            try:
                k = tl_build.jit(make_proj, P._configs, (DIM, "bfloat16", True, 1, tiling, V41))
            except Exception as exc:  # noqa: BLE001 - a variant that does not build is reported
                rows.append({"tokens": n, "variant": name, "error": str(exc)[-400:]})
                continue
            outs = [torch.empty(n, 24, device=dev), torch.empty(n, 4, device=dev), torch.empty(n, 4, device=dev),
                    torch.empty(n, 4, 4, device=dev)]

            def call(i, k=k, outs=outs):
                x, pm, col = sets[i % 2]
                k(x, parts, pm, scale, base, *outs, col)
            try:
                call(0)
                torch.cuda.synchronize()
                got[name] = [o.clone() for o in outs] + [sets[0][2].clone()]
                ms = _time(torch, call)
            except Exception as exc:  # noqa: BLE001
                rows.append({"tokens": n, "variant": name, "error": str(exc)[-400:]})
                continue
            row = {"tokens": n, "variant": name, "ms": ms, "mtok_s": n / ms / 1e3,
                   "pct_copy": 100 * n * 5 * DIM * 2 / (ms * 1e-3) / 1e9 / copy}
            if name != "default" and "default" in got:
                ref = got["default"]
                row["identical"] = all(torch.equal(a, b) for a, b in zip(got[name], ref))
                row["maxdiff"] = max(float((a.float() - b.float()).abs().nan_to_num(0).max()) for a, b in zip(got[name], ref))
            rows.append(row)
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
