"""Device-only check: our tilelang kernel is bit-identical to the model's own kernel.

The model's kernel (DeepSeek-V4.1-Flash inference/kernel.py 406-474) is not part
of the project; a transcription of it lives in the git-ignored .device/seed_kernel.py,
which travels to the GPU machine. On fresh random inputs (mixes of the size the
model's projection produces, random scale and base) at several token counts, both
kernels run and every output must be torch.equal. Exit status 1 on any mismatch.

    PYTHONPATH=. python3 benchmarks/kernel_seed_check.py [--seed-file .device/seed_kernel.py]

Writes seed_check.json to $OUT when that is set.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# (hc_mult, token counts, std of the mixes); the models use hc 4
CASES = [
    (4, [1, 7, 4096, 1 << 20], 1.0),
    (4, [4096], 30.0),  # large logits: near one-hot softmax rows
    (2, [4099], 1.0),
    (8, [4099], 1.0),
]


def load_seed(path: Path):
    spec = importlib.util.spec_from_file_location("seed_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# identifiers in the model's kernel -> ours (kernel name, buffers, the token count)
_RENAMES = [
    ("hc_split_sinkhorn_kernel__kernel", "K"),
    ("hc_split_sinkhorn_kernel", "K"),
    ("hc_split_sinkhorn", "K"),
    ("mixes_shared", "row"),
    ("comb_frag", "m"),
    ("row_sum", "rsum"),
    ("col_sum", "csum"),
    ("row_max", "rmax"),
    ("int n)", "int tokens)"),
]


def normalise_source(src: str) -> str:
    for a, b in _RENAMES:
        src = src.replace(a, b)
    return src


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed-file", type=Path, default=ROOT / ".device" / "seed_kernel.py")
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("kernel_seed_check: no CUDA device; this check runs on the GPU machine only", file=sys.stderr)
        return 2
    if not args.seed_file.is_file():
        print(f"kernel_seed_check: {args.seed_file} is missing (the transcribed seed kernel)", file=sys.stderr)
        return 2

    from hccli.kernels.reference import hc_split_sinkhorn_torch
    from hccli.kernels.tilelang_split import hc_split_sinkhorn_tilelang

    seed_mod = load_seed(args.seed_file)
    iters, eps = 20, 1e-6
    rows, ok = [], True
    for hc, counts, std in CASES:
        width = (2 + hc) * hc
        for n in counts:
            rs = int.from_bytes(os.urandom(4), "little")
            g = torch.Generator(device="cuda").manual_seed(rs)
            mixes = torch.randn(n, width, device="cuda", generator=g) * std
            scale = torch.rand(3, device="cuda", generator=g) * 1.9 + 0.1
            base = torch.randn(width, device="cuda", generator=g)

            t0 = time.perf_counter()
            theirs = seed_mod.hc_split_sinkhorn(mixes.view(1, n, width), scale, base, hc, iters, eps)
            theirs = [t.view(n, *t.shape[2:]) for t in theirs]
            nan = float("nan")
            out = (
                torch.full((n, hc), nan, device="cuda"),
                torch.full((n, hc), nan, device="cuda"),
                torch.full((n, hc, hc), nan, device="cuda"),
            )
            ours = hc_split_sinkhorn_tilelang(mixes, scale, base, hc, iters, eps, out=out)
            ref = hc_split_sinkhorn_torch(mixes, scale, base, hc, iters, eps)
            torch.cuda.synchronize()

            row = {"hc": hc, "n": n, "std": std, "rng_seed": rs, "seconds": round(time.perf_counter() - t0, 3)}
            for name, a, b, r in zip(("pre", "post", "comb"), ours, theirs, ref):
                equal = bool(torch.equal(a, b))
                ok &= equal
                row[f"{name}_equal"] = equal
                row[f"{name}_mismatches"] = int((a != b).sum().item()) if not equal else 0
                row[f"{name}_maxdiff_seed"] = float((a - b).abs().max().item()) if not equal else 0.0
                row[f"{name}_maxdiff_ref"] = float((a - r).abs().max().item())
            rows.append(row)

    # the generated CUDA, compared with identifiers renamed: informative, the outputs decide
    from hccli.kernels.tilelang_split import _jit_kernel

    same_source = {}
    for hc in sorted({c[0] for c in CASES}):
        theirs_src = seed_mod.hc_split_sinkhorn_kernel(hc, iters, eps).get_kernel_source()
        ours_src = _jit_kernel(hc, iters, float(eps)).get_kernel_source()
        same_source[hc] = normalise_source(theirs_src) == normalise_source(ours_src)
    print("generated CUDA identical up to names:", ", ".join(f"hc {k}: {v}" for k, v in same_source.items()))

    print(f"{'hc':>3} {'n':>8} {'std':>5}  {'pre':>5} {'post':>5} {'comb':>5}  {'max|ours-ref| comb':>19}  rng seed")
    for r in rows:
        flags = ["equal" if r[f"{k}_equal"] else f"x{r[f'{k}_mismatches']}" for k in ("pre", "post", "comb")]
        print(
            f"{r['hc']:>3} {r['n']:>8} {r['std']:>5g}  {flags[0]:>5} {flags[1]:>5} {flags[2]:>5}  "
            f"{r['comb_maxdiff_ref']:>19.3g}  {r['rng_seed']}"
        )
    print("BIT-IDENTICAL: all cases" if ok else "MISMATCH: see rows above")
    out_dir = os.environ.get("OUT")
    if out_dir:
        report = {"ok": ok, "iters": iters, "eps": eps, "same_source": same_source, "rows": rows}
        Path(out_dir, "seed_check.json").write_text(json.dumps(report, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
