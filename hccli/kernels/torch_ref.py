"""The `torch` implementation: the torch reference of the split-Sinkhorn op.

Every tilelang kernel is tested against it (their `ref_program`); it is tested
against an independent float64 version (tests/f64_ref.py). It follows the order
of operations of the published reference kernel
(DeepSeek-V4.1-Flash inference/kernel.py 406-474) step by step, so that it
doubles as the readable specification of what the tilelang kernels compute:

    pre[j]    = sigmoid(mixes[j] * scale[0] + base[j]) + eps
    post[j]   = 2 * sigmoid(mixes[hc + j] * scale[1] + base[hc + j])
    comb[j,k] = mixes[2hc + hc*j + k] * scale[2] + base[2hc + hc*j + k]
    comb      = exp(comb - rowmax) / rowsum + eps           (softmax over k)
    comb      = comb / (colsum + eps)
    iters - 1 times: comb = comb / (rowsum + eps); comb = comb / (colsum + eps)

Arithmetic happens in the dtype of `mixes` (float32 or float64). The kernel
fuses each affine step into one multiply-add and sums in a butterfly order, so
float32 results agree with it to a few ulp, not bit for bit.

torch is imported inside the functions: importing this module costs nothing.
"""

from __future__ import annotations

import functools
from typing import Any

from hccli.base.errors import HcError
from hccli.base.vocab import DEFAULT_HC_EPS, DEFAULT_HC_MULT, DEFAULT_SINKHORN_ITERS, mix_width


def check_op_params(hc_mult: Any, sinkhorn_iters: Any, eps: Any) -> None:
    """Reject op parameters no kernel can be built for, with a one-line message."""
    if isinstance(hc_mult, bool) or not isinstance(hc_mult, int) or hc_mult < 1:
        raise HcError(f"hc_mult must be a positive integer, got {hc_mult!r}")
    if isinstance(sinkhorn_iters, bool) or not isinstance(sinkhorn_iters, int) or sinkhorn_iters < 1:
        raise HcError(f"sinkhorn_iters must be an integer >= 1, got {sinkhorn_iters!r}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (eps >= 0.0) or eps == float("inf"):
        raise HcError(f"eps must be a finite number >= 0, got {eps!r}")


def _shape(t: Any) -> list[int]:
    return [int(d) for d in t.shape]


def check_shapes(mixes: Any, hc_scale: Any, hc_base: Any, hc_mult: int) -> None:
    """mixes [..., (2+hc)*hc], hc_scale [3], hc_base [(2+hc)*hc]; anything else is an HcError."""
    width = mix_width(hc_mult)
    if len(mixes.shape) < 1 or int(mixes.shape[-1]) != width:
        raise HcError(
            f"mixes has shape {_shape(mixes)}, expected [..., {width}] "
            f"((2 + hc_mult) * hc_mult with hc_mult = {hc_mult})"
        )
    if _shape(hc_scale) != [3]:
        raise HcError(f"hc_scale has shape {_shape(hc_scale)}, expected [3] (pre, post and comb scale)")
    if _shape(hc_base) != [width]:
        raise HcError(f"hc_base has shape {_shape(hc_base)}, expected [{width}] for hc_mult = {hc_mult}")


def as_float_tensor(value: Any, what: str, *, dtype: Any = None, device: Any = None) -> Any:
    """A torch tensor of a floating dtype from a tensor, numpy array or nested list."""
    import torch

    t = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    if not t.is_floating_point():
        raise HcError(f"{what} has dtype {str(t.dtype).removeprefix('torch.')}, expected a floating-point dtype")
    return t.to(dtype=dtype or t.dtype, device=device or t.device)


def hc_split_sinkhorn_torch(
    mixes: Any,
    hc_scale: Any,
    hc_base: Any,
    hc_mult: int = DEFAULT_HC_MULT,
    sinkhorn_iters: int = DEFAULT_SINKHORN_ITERS,
    eps: float = DEFAULT_HC_EPS,
) -> tuple[Any, Any, Any]:
    """(pre [..., hc], post [..., hc], comb [..., hc, hc]) for mixes [..., (2+hc)*hc].

    Computes in mixes' dtype (float64 stays float64; half types are promoted to
    float32) on mixes' device; hc_scale and hc_base are converted to match.
    """
    check_op_params(hc_mult, sinkhorn_iters, eps)
    mixes = as_float_tensor(mixes, "mixes")
    if mixes.dtype not in _compute_dtypes():
        import torch

        mixes = mixes.to(torch.float32)
    hc_scale = as_float_tensor(hc_scale, "hc_scale", dtype=mixes.dtype, device=mixes.device)
    hc_base = as_float_tensor(hc_base, "hc_base", dtype=mixes.dtype, device=mixes.device)
    check_shapes(mixes, hc_scale, hc_base, hc_mult)

    mkl_exp_ready(mixes)
    hc = hc_mult
    pre = _sigmoid(mixes[..., :hc] * hc_scale[0] + hc_base[:hc]) + eps
    post = 2 * _sigmoid(mixes[..., hc : 2 * hc] * hc_scale[1] + hc_base[hc : 2 * hc])
    logits = mixes[..., 2 * hc :] * hc_scale[2] + hc_base[2 * hc :]
    comb = logits.unflatten(-1, (hc, hc))

    # softmax over k written out, so the division and the eps land where the kernel puts them
    e = (comb - comb.amax(dim=-1, keepdim=True)).exp()
    comb = e / e.sum(dim=-1, keepdim=True) + eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    for _ in range(sinkhorn_iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    return pre, post, comb


def mkl_exp_ready(t: Any) -> None:
    """Before an exp of tensor t: where t is on the CPU, make the process's first exp of its dtype a
    small one, on one thread (_first_exp)."""
    if t.device.type == "cpu":
        _first_exp(t.dtype)


@functools.lru_cache(maxsize=None)
def _first_exp(dtype: Any) -> None:
    """One small exp of this dtype, once per process.

    torch sends contiguous CPU exps to MKL's VML, which picks its kernel on a function's first
    call; where that first call runs on several of torch's threads at once, one of them may use
    a low-accuracy kernel for its whole chunk (pytorch/pytorch#188792, oneMKL 2024.2), so that
    two processes disagree (an `hc run-kernel --compare` of a file saved a moment before failed
    now and then). A small first call resolves the kernel on one thread."""
    import torch

    torch.exp(torch.zeros(16, dtype=dtype))


def _sigmoid(x: Any) -> Any:
    # the kernel's sigmoid is 1 / (1 + exp(-x)); torch.sigmoid differs from it by an ulp at most
    return 1.0 / (1.0 + (-x).exp())


def _compute_dtypes() -> tuple[Any, ...]:
    import torch

    return (torch.float32, torch.float64)
