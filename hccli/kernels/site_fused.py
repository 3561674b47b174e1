"""The HC site through the fused site kernels (site_pre, site_write) for `hc run-site`, or the torch path.

ref_program: hccli.ops.site.forward (the numpy reference). A site with tensors (attention, FFN) runs
site_pre (rms statistic, projection, the split with exact's arithmetic, the collapse with the
site's own pre (V4) or the one handed over (V4.1)), then site_write. Their contract, tested on a
GPU against the reference: pre/post/comb bit-identical to the exact split kernel on the mixes
site_pre computed, collapsed and streams_out bit-identical to the reference's collapse and
write-back given those, mixes within float32 rounding of the reference's. site_pre keeps the
rms statistic inside, so its steps have no `rsqrt`; V4's head mix (a sigmoid, no split) and
V4.1's end-of-stack collapse (no tensors) go through the torch path (site_torch.py).

`choose` takes the site kernels for impl auto where kernels/registry.resolve_site finds both on
a CUDA device, else the torch path, and says why in one line where a CUDA device was in use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from hccli.ops.site import REFERENCE, SiteInputs, SiteParams, Variant, forward as ref_program  # noqa: F401

STREAMS = {"bf16": "bfloat16", "f32": "float32"}  # the site's streams_dtype -> the kernels' name
STEPS = ("mixes", "pre", "post", "comb", "collapsed", "streams_out")  # what the site kernels give


@dataclass(frozen=True)
class SitePath:
    name: str  # "site-kernels" | "torch"
    compute: Callable[..., dict]  # compute(inputs, params, variant) -> {step: numpy float32}
    how: str  # what runs it, in words
    note: str | None = None  # why the site kernels did not run on the CUDA device in use


def choose(impl: str, device: str | None, hc_mult: int, dim: int, streams_dtype: str,
           unsupported: str | None = None) -> SitePath:
    """The site kernels (impl auto, a CUDA device, a build for hc_mult/dim/streams, nothing
    `unsupported` asked for), else the torch path with the split through `impl`'s kernel."""
    from hccli.kernels.registry import resolve_site
    from hccli.kernels.site_torch import torch_forward

    compute, how = torch_forward(impl, device, hc_mult)
    if impl != "auto":
        return SitePath("torch", compute, how)
    stream = STREAMS.get(streams_dtype, streams_dtype)
    found = [resolve_site(op, device, hc_mult, dim, stream) for op in ("site_pre", "site_write")]
    dev = found[0].device
    if dev == "cpu":  # no GPU in use: nothing was passed over
        return SitePath("torch", compute, how)
    why = unsupported or next((s.why for s in found if s.name != s.op), None)
    if why:
        return SitePath("torch", compute, how,
                        f"the site kernels (site_pre, site_write) did not run on {dev}: {why}; the torch path ran")
    return SitePath("site-kernels", _fused(dev, dim, compute),
                    f"site kernels on {dev}: site_pre and site_write, the split with exact's arithmetic "
                    f"(V4's head mix and V4.1's end-of-stack collapse: the torch path, {how})")


def _fused(dev: str, dim: int, fallback: Callable[..., dict]) -> Callable[..., dict]:
    def compute(inp: SiteInputs, params: SiteParams, variant: Variant = REFERENCE) -> dict[str, np.ndarray]:
        if variant != REFERENCE or inp.fn is None or inp.site == "head":
            return fallback(inp, params, variant)
        import torch

        from hccli.kernels.site_pre import pack_fn, site_pre
        from hccli.kernels.site_write import site_write

        stream = STREAMS[params.streams_dtype]
        dtype = torch.bfloat16 if stream == "bfloat16" else torch.float32

        def t(a: np.ndarray, dt: Any = torch.float32) -> Any:  # float32 values of dt's: exact in dt
            return torch.as_tensor(np.ascontiguousarray(a, dtype=np.float32)).to(device=dev, dtype=dt)

        x = t(inp.streams, dtype)
        got = site_pre(x, pack_fn(t(inp.fn), dim, stream, dev), t(inp.scale), t(inp.base),
                       sinkhorn_iters=params.iters, eps=params.hc_eps, norm_eps=params.norm_eps,
                       pre_mix=None if inp.pre_mix is None else t(inp.pre_mix))
        out = site_write(t(inp.f, dtype), x, got.post, got.comb)
        return {name: v.float().cpu().numpy() for name, v in (*got.items(), ("streams_out", out))}

    return compute
