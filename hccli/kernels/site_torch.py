"""The HC site on a GPU (or torch's CPU): the torch path of hccli/ops/site.py's forward.

ref_program: hccli.ops.site.forward (the numpy reference it is tested against). The same steps in
torch float32 on the chosen device, as the published inference code writes them
(`F.linear(x, hc_fn) * rsqrt`, `torch.sum(pre.unsqueeze(-1) * x, dim=2).to(dtype)`,
`post.unsqueeze(-1) * f.unsqueeze(-2) + torch.sum(comb.unsqueeze(-1) * x.unsqueeze(-2), dim=2)`),
with the split through the kernel kernels/registry.py chooses (--impl). The projection's
operands may be rounded first (base/floats.py), as site.Variant.projection says; no other variant.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from hccli.base.errors import HcError
from hccli.base.floats import round_to
from hccli.kernels.torch_ref import mkl_exp_ready
from hccli.ops.site import REFERENCE, SiteInputs, SiteParams, Variant, forward as ref_program  # noqa: F401


def torch_forward(impl: str, device: str | None, hc_mult: int) -> tuple[Callable[..., dict], str]:
    """(compute(inputs, params, variant) -> {step: numpy float32}, what runs it in words)."""
    from hccli.kernels.registry import resolve_impl

    chosen = resolve_impl(impl, device, hc_mult)
    dev = chosen.device

    def compute(inp: SiteInputs, params: SiteParams, variant: Variant = REFERENCE) -> dict[str, np.ndarray]:
        import torch

        if variant != Variant(projection=variant.projection):
            raise HcError("the torch path computes the reference forward (and a projection format) only")

        def t(a: np.ndarray) -> Any:
            return torch.as_tensor(np.ascontiguousarray(a, dtype=np.float32), device=dev)

        def back(a: Any) -> np.ndarray:
            return a.float().cpu().numpy()

        def cast(a: Any) -> Any:
            return a.to(torch.bfloat16).float() if params.streams_dtype == "bf16" else a
        x = t(inp.streams)
        out: dict[str, np.ndarray] = {}
        w = None if inp.pre_mix is None else t(inp.pre_mix)
        if inp.fn is not None:
            fmt = "bf16" if variant.projection == "fn-bf16" else variant.projection
            flat = x.flatten(-2)
            r = torch.rsqrt(flat.square().mean(-1) + params.norm_eps)
            operand = flat if variant.projection in ("f32", "fn-bf16") else t(round_to(inp.streams, fmt)).flatten(-2)
            mixes = (operand @ t(round_to(inp.fn, fmt)).T) * r[:, None]
            if inp.site == "head":
                z = mixes * t(inp.scale)[0] + t(inp.base)
                mkl_exp_ready(z)
                pre = 1.0 / (1.0 + torch.exp(-z)) + params.hc_eps
                post = comb = None
            else:
                pre, post, comb = chosen.run(mixes, t(inp.scale), t(inp.base), params.hc_mult, params.iters,
                                             params.hc_eps)
            out.update(rsqrt=back(r), mixes=back(mixes), pre=back(pre))
            w = pre if w is None else w
        out["collapsed"] = back(cast(torch.sum(w.unsqueeze(-1) * x, dim=1)))
        if inp.site != "head":
            y = post.unsqueeze(-1) * t(inp.f).unsqueeze(-2) + torch.sum(comb.unsqueeze(-1) * x.unsqueeze(-2), dim=1)
            out.update(post=back(post), comb=back(comb), streams_out=back(cast(y)))
        return out

    return compute, f"{chosen.name} on {chosen.device}: {chosen.reason}"
