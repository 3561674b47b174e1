"""`site_write`: the site's write-back on a GPU, tilelang, hc 4, bit-identical to the eager chain.

    out[j] = post[j] * f + sum_i comb[i, j] * residual[i]     (float32, cast to the streams' dtype)

Tested against the eager chain (`ref_program`, imported first below) with
torch.equal: the kernel (site_tl.make_write) takes the chain's order, every
product and sum rounded on its own. One launch, one block per token.

Inputs that are already right (CUDA, contiguous, 16-byte aligned: f [T, dim],
residual [T, 4, dim] of one dtype, bfloat16 or float32, post [T, 4] and comb
[T, 4, 4] float32, on the current device) take the fast path: Python checks
types, the device and alignment, the compiled executable the rest, and
anything it refuses goes to the checked path, which converts, copies and explains.
"""

from __future__ import annotations

from typing import Any

from hccli.kernels.site_eager import site_write_eager as ref_program  # noqa: F401 - what it is tested against
from hccli.base.errors import HcError
from hccli.kernels import site_tl as S
from hccli.kernels import tl_build

NAME = "site_write"
HC = 4


def _configs() -> dict[Any, Any]:
    return tl_build.pass_configs()


def compiled_write(dim: int, stream: str) -> Any:
    return tl_build.jit(S.make_write, _configs, (dim, stream))


# (dim, dtype, device index) -> the compiled executable
_READY: dict[tuple, Any] = {}


def site_write(f: Any, residual: Any, post: Any, comb: Any, *, out: Any = None) -> Any:
    """out [..., 4, dim] from f [..., dim], residual [..., 4, dim], post [..., 4], comb [..., 4, 4]."""
    import torch

    T = torch.Tensor
    if type(residual) is T and residual.dim() == 3 and residual.shape[0]:
        index = residual.get_device()
        launch = _READY.get((residual.shape[2], residual.dtype, index))
        if launch is not None and type(f) is T and type(post) is T and type(comb) is T \
                and torch._C._cuda_getDevice() == index:
            dest = torch.empty_like(residual) if out is None else out
            if type(dest) is T and not (f.data_ptr() | residual.data_ptr() | post.data_ptr() | comb.data_ptr()
                                        | dest.data_ptr()) & 15:
                try:  # the executable checks rank, shapes, dtypes, strides and devices
                    launch(f, residual, post, comb, dest)
                    return dest
                except Exception:  # noqa: BLE001 - refused: the checked path says why
                    pass
    return _checked(torch, f, residual, post, comb, out)


def _checked(torch: Any, f: Any, residual: Any, post: Any, comb: Any, out: Any) -> Any:
    from hccli.kernels.site_pre import cuda_streams

    stream, dim, lead = cuda_streams(torch, residual, "site_write", "residual streams")
    dev = residual.device

    def take(t: Any, what: str, shape: tuple[int, ...], dtype: Any) -> Any:
        t = torch.as_tensor(t)
        if tuple(t.shape) != shape:
            raise HcError(f"{what} has shape {list(t.shape)}, expected {list(shape)}")
        if not t.is_floating_point():
            raise HcError(f"{what} has dtype {str(t.dtype).removeprefix('torch.')}, expected a floating-point dtype")
        t = t.to(device=dev, dtype=dtype).reshape((-1,) + shape[len(lead):]).contiguous()
        return t if t.data_ptr() % 16 == 0 else t.clone()

    f2 = take(f, "the sub-layer output f", lead + (dim,), residual.dtype)
    r3 = take(residual, "residual", lead + (HC, dim), residual.dtype)
    p2 = take(post, "post", lead + (HC,), torch.float32)
    c3 = take(comb, "comb", lead + (HC, HC), torch.float32)
    if out is None:
        out = torch.empty(lead + (HC, dim), dtype=residual.dtype, device=dev)
    elif not isinstance(out, torch.Tensor) or tuple(out.shape) != lead + (HC, dim) or out.dtype != residual.dtype \
            or out.device != dev or not out.is_contiguous():
        raise HcError(f"out: expected a contiguous {stream} tensor of shape {list(lead + (HC, dim))} on {dev}")
    n = r3.shape[0]
    if n == 0:
        return out
    dest = out.view(n, HC, dim) if out.data_ptr() % 16 == 0 else torch.empty((n, HC, dim), dtype=out.dtype, device=dev)
    with torch.cuda.device(dev):
        key = (dim, residual.dtype, dev.index)
        launch = _READY.get(key)
        if launch is None:
            launch = _READY[key] = tl_build.executable(compiled_write(dim, stream))
        launch(f2, r3, p2, c3, dest)
    if dest.data_ptr() != out.data_ptr():
        out.view(n, HC, dim).copy_(dest)
    return out
