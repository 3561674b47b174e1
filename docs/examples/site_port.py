"""A port of the HC site written from docs/site-golden.md alone (numpy and safetensors, no hccli):
it reads a golden file's inputs, computes every step of every site, and writes them under the
same names, for `hc check-port`. A flag puts one of the known mistakes in, to see it named.

    python docs/examples/site_port.py GOLDEN OUT [--comb-untransposed] [--iters K] [--bf16-projection]
"""

import argparse

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file


def bf16(x):
    """Round float32 to the nearest bf16 (ties to even), kept as float32."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    r = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return np.where(np.isfinite(x), r.view(np.float32), x).astype(np.float32)


def sigmoid(z):
    return np.float32(1) / (np.float32(1) + np.exp(-z))


def split(m, scale, base, hc, iters, eps):
    pre = sigmoid(m[:, :hc] * scale[0] + base[:hc]) + eps
    post = np.float32(2) * sigmoid(m[:, hc:2 * hc] * scale[1] + base[hc:2 * hc])
    c = (m[:, 2 * hc:] * scale[2] + base[2 * hc:]).reshape(-1, hc, hc)
    c = np.exp(c - c.max(-1, keepdims=True))
    c = c / c.sum(-1, keepdims=True) + eps  # softmax over k, then eps
    c = c / (c.sum(-2, keepdims=True) + eps)  # one column normalisation
    for _ in range(iters - 1):
        c = c / (c.sum(-1, keepdims=True) + eps)
        c = c / (c.sum(-2, keepdims=True) + eps)
    return pre, post, c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("golden")
    ap.add_argument("out")
    ap.add_argument("--comb-untransposed", action="store_true")
    ap.add_argument("--iters", type=int)
    ap.add_argument("--bf16-projection", action="store_true")
    a = ap.parse_args()
    with safe_open(a.golden, "numpy") as f:
        meta = f.metadata()
        t = {k: f.get_tensor(k) for k in f.keys()}
    hc, eps, norm_eps = int(meta["hc_mult"]), np.float32(meta["hc_eps"]), np.float32(meta["norm_eps"])
    iters = a.iters or int(meta["sinkhorn_iters"])
    cast = bf16 if meta["streams_dtype"] == "bf16" else (lambda v: v.astype(np.float32))
    out = {}
    for site in meta["sites"].split(","):
        x = t[f"{site}.streams_in"]
        n = x.shape[0]
        steps = {}
        if f"{site}.fn" in t:  # every site but V4.1's end-of-stack collapse
            flat = x.reshape(n, -1)
            rsqrt = np.float32(1) / np.sqrt((flat * flat).mean(-1) + norm_eps)
            fn = t[f"{site}.fn"]
            if a.bf16_projection:
                flat, fn = bf16(flat), bf16(fn)
            mixes = (flat @ fn.T) * rsqrt[:, None]
            steps.update(rsqrt=rsqrt, mixes=mixes)
            if site.endswith(".head"):  # V4's head mix: the pre part only
                steps["pre"] = sigmoid(mixes * t[f"{site}.scale"][0] + t[f"{site}.base"]) + eps
            else:
                steps["pre"], steps["post"], steps["comb"] = split(mixes, t[f"{site}.scale"], t[f"{site}.base"],
                                                                   hc, iters, eps)
        # V4.1 collapses with the weights it is handed; V4 with its own pre
        w = t.get(f"{site}.pre_mix_in", steps.get("pre"))
        steps["collapsed"] = cast(sum(w[:, i, None] * x[:, i] for i in range(hc)))
        if f"{site}.f" in t:
            comb = steps["comb"].swapaxes(1, 2) if a.comb_untransposed else steps["comb"]
            mixed = sum(comb[:, j, :, None] * x[:, j, None, :] for j in range(hc))
            steps["streams_out"] = cast(steps["post"][:, :, None] * t[f"{site}.f"][:, None, :] + mixed)
        out.update({f"{site}.{k}": np.ascontiguousarray(v, dtype=np.float32) for k, v in steps.items()})
    save_file(out, a.out)


if __name__ == "__main__":
    main()
