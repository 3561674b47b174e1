"""`site_pre`: the site's pre step on a GPU (rms, projection, split, collapse), tilelang, hc 4.

Tested against the eager chain (`ref_program`, imported first below) and a
float64 oracle: mixes, pre, post and comb within twice the eager float32
chain's error, pre/post/comb bit-identical to the exact kernel run on the mixes
this kernel computed, collapsed bit-identical to the eager collapse with the
same pre mix (so within one rounding of the float64 collapse).

The kernels are site_proj.py's and site_tl.py's: the projection over `splits`
blocks per token tile (choose_launch: one where the token tiles fill the GPU,
in 128-token tiles where those do),
which also collapses with a given pre mix (V4.1's delayed hand-off) and, with
one split, finishes its tokens (mixes, split); with more, the finish kernel
does that; where the collapse needs this site's own pre (V4), the collapse
kernel follows. So V4.1's pre step at >= 8K tokens is one launch. fn goes in
pre-split (pack_fn), once per weight: pass the PackedFn to every call.

Inputs that are already right (CUDA, contiguous, 16-byte aligned: x [T, 4, dim]
bfloat16 or float32 on the current device, a PackedFn for that dim and dtype,
float32 scale [3] and base [24], pre_mix float32 [T, 4]) take the fast path:
Python checks types, the device and alignment, the compiled executables the
rest (rank, shapes, dtypes, strides), and whatever they refuse goes to the
checked path, which converts, copies and explains. Both end in the same
kernels, so the results are the same.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from hccli.kernels.site_eager import site_pre_eager as ref_program  # noqa: F401 - what it is tested against
from hccli.base.errors import HcError
from hccli.kernels import site_tl as S
from hccli.kernels import tl_build
from hccli.kernels.site_proj import make_proj
from hccli.kernels.site_eager import SitePre
from hccli.base.vocab import DEFAULT_HC_EPS, DEFAULT_NORM_EPS, DEFAULT_SINKHORN_ITERS

NAME = "site_pre"
HC = 4
W = (2 + HC) * HC


@dataclass(frozen=True)
class PackedFn:
    """fn [24, 4*dim] float32 as three exact bfloat16 parts, laid out per projection step."""

    data: Any  # [dim / block_dim, 80, 4 * block_dim] bfloat16
    dim: int
    stream: str  # the streams' dtype it is laid out for ("bfloat16" or "float32")
    device: Any


def stream_name(torch: Any, dtype: Any) -> str:
    names = {torch.bfloat16: "bfloat16", torch.float32: "float32"}
    if dtype not in names:
        raise HcError(f"the site kernels take bfloat16 or float32 streams, got {str(dtype).removeprefix('torch.')}")
    return names[dtype]


def cuda_streams(torch: Any, x: Any, kernel: str, what: str) -> tuple[str, int, tuple[int, ...]]:
    """The stream dtype's name, dim and leading shape of streams [..., hc, dim] a site kernel takes:
    a CUDA tensor of a dtype, stream count and dim it has a build for."""
    if not isinstance(x, torch.Tensor) or not x.is_cuda:
        raise HcError(f"{kernel} needs the {what} as a CUDA tensor")
    if x.dim() < 2:
        raise HcError(f"the {what} have shape {list(x.shape)}, expected [..., hc, dim]")
    stream = stream_name(torch, x.dtype)
    hc, dim = int(x.shape[-2]), int(x.shape[-1])
    S.check_site(hc, dim, stream)
    return stream, dim, tuple(x.shape[:-2])


def pack_fn(fn: Any, dim: int, stream: str, device: Any = None) -> PackedFn:
    """Split fn [24, 4*dim] into bfloat16 parts f1 + f2 + f3 == fn (each residual is exact in
    float32 and the last has at most 8 significant bits) and lay them out for the projection."""
    import torch

    S.check_site(HC, dim, stream)
    f = torch.as_tensor(fn)
    if tuple(f.shape) != (W, HC * dim) or not f.is_floating_point():
        raise HcError(f"hc_fn has shape {list(f.shape)} ({str(f.dtype).removeprefix('torch.')}), "
                      f"expected float [{W}, {HC * dim}] for hc 4, dim {dim}")
    f = f.to(device=device or f.device, dtype=torch.float32).contiguous()
    parts = torch.zeros(S.FN_ROWS, HC * dim, dtype=torch.bfloat16, device=f.device)
    rest = f
    for k in range(S.NPARTS):
        part = rest.to(torch.bfloat16)
        parts[k * S.PART_ROWS:(k + 1) * S.PART_ROWS] = part
        rest = rest - part.float()
    bd = S.DEFAULT_PROJ.dim_step(stream)
    data = parts.view(S.FN_ROWS, HC, dim // bd, bd).permute(2, 0, 1, 3).reshape(dim // bd, S.FN_ROWS, HC * bd)
    return PackedFn(data.contiguous(), dim, stream, f.device)


# Blocks per SM that the default projection fits (its shared memory), and the share of the SMs one
# wave may leave idle before more splits pay (each split costs a workspace pass and a finish launch).
FILL = 0.95


def choose_launch(tokens: int, dim: int, stream: str, sms: int) -> tuple[S.ProjTiling, int]:
    """(tiling, splits): 128-token blocks, one split, where their tiles give ~every SM a block
    (bfloat16 streams); else 64-token blocks over the fewest built splits that do."""
    if stream == "bfloat16" and -(-tokens // S.WIDE_PROJ.block_tokens) >= FILL * sms:
        return S.WIDE_PROJ, 1
    options = S.splits_for(dim, stream)
    tiles = -(-tokens // S.DEFAULT_PROJ.block_tokens)
    return S.DEFAULT_PROJ, next((s for s in options if tiles * s >= FILL * sms), options[-1])


def _configs() -> dict[Any, Any]:
    return tl_build.pass_configs()


def compiled_proj(dim: int, stream: str, collapse: bool, splits: int, op: tuple | None = None,
                  tiling: S.ProjTiling = S.DEFAULT_PROJ) -> Any:
    """The projection; op = (iters, eps, norm_eps) exactly when splits is 1 (it finishes its tokens)."""
    return tl_build.jit(make_proj, _configs, (dim, stream, collapse, splits, tiling, op))


def compiled_finish(dim: int, iters: int, eps: float, norm_eps: float, splits: int) -> Any:
    return tl_build.jit(S.make_finish, _configs, (HC, dim, iters, float(eps), float(norm_eps), splits))


def compiled_collapse(dim: int, stream: str) -> Any:
    return tl_build.jit(S.make_collapse, _configs, (dim, stream))


@functools.lru_cache(maxsize=None)
def _sms(torch: Any, index: int) -> int:
    return int(torch.cuda.get_device_properties(index).multi_processor_count)


class _Plan:
    """The compiled launches of one (dim, stream, collapse, iters, eps, norm_eps, device), found once."""

    def __init__(self, torch: Any, dim: int, stream: str, own: bool, iters: int, eps: float, norm_eps: float,
                 device: Any) -> None:
        self.torch, self.dim, self.stream, self.own, self.device = torch, dim, stream, own, device
        self.index = device.index
        self.dtype = torch.bfloat16 if stream == "bfloat16" else torch.float32
        self.sms = _sms(torch, self.index)
        self.op = (iters, float(eps), float(norm_eps))
        self.finish: dict[int, Any] = {}
        self.collapse = tl_build.executable(compiled_collapse(dim, stream)) if own else None
        self.proj: dict[tuple, Any] = {}  # (tiling, splits) -> executable
        # the projection's workspace per CUDA stream (a raw stream pointer): work on one stream runs in
        # order, so the next call there may reuse it; another stream gets its own
        self.ws: dict[int, tuple[Any, Any, Any]] = {}  # stream -> (buffer, (splits, tokens), view)
        self.stream_of = torch._C._cuda_getCurrentRawStream
        self.last: tuple = (-1, (S.DEFAULT_PROJ, 1))  # (tokens, (tiling, splits)) of the last call

    def launch(self, x: Any, fnp: Any, scale: Any, base: Any, pre_mix: Any, outs: tuple[Any, ...]) -> None:
        tokens = x.shape[0]
        if tokens != self.last[0]:
            self.last = (tokens, choose_launch(tokens, self.dim, self.stream, self.sms))
        tiling, splits = how = self.last[1]
        proj = self.proj.get(how)
        if proj is None:
            proj = self.proj[how] = tl_build.executable(compiled_proj(
                self.dim, self.stream, not self.own, splits, self.op if splits == 1 else None, tiling))
            if splits > 1:
                self.finish[splits] = tl_build.executable(compiled_finish(self.dim, *self.op, splits))
        mixes, pre, post, comb, collapsed = outs
        if splits == 1:  # the projection finishes its tokens
            if self.own:
                proj(x, fnp, scale, base, mixes, pre, post, comb)
                self.collapse(x, pre, collapsed)
            else:
                proj(x, fnp, pre_mix, scale, base, mixes, pre, post, comb, collapsed)
            return
        stream = self.stream_of(self.index)
        buf, shape, ws = self.ws.get(stream, (None, None, None))
        if shape != (splits, tokens):
            need = splits * tokens * S.WS_COLS
            if buf is None or buf.numel() < need:
                buf = self.torch.empty(max(need, 1 << 16), dtype=self.torch.float32, device=self.device)
            ws = buf[:need].view(splits, tokens, S.WS_COLS)
            self.ws[stream] = (buf, (splits, tokens), ws)
        if self.own:
            proj(x, fnp, ws)
            self.finish[splits](ws, scale, base, mixes, pre, post, comb)
            self.collapse(x, pre, collapsed)
        else:
            proj(x, fnp, pre_mix, ws, collapsed)
            self.finish[splits](ws, scale, base, mixes, pre, post, comb)


_PLANS: dict[tuple, _Plan] = {}


def site_pre(x: Any, fn: Any, hc_scale: Any, hc_base: Any, *, sinkhorn_iters: int = DEFAULT_SINKHORN_ITERS,
             eps: float = DEFAULT_HC_EPS, norm_eps: float = DEFAULT_NORM_EPS, pre_mix: Any = None,
             out: SitePre | None = None) -> SitePre:
    """The pre step on CUDA streams x [..., 4, dim] (bfloat16 or float32) with fn a PackedFn (or
    the float32 [24, 4*dim] tensor, packed on every call). pre_mix None: V4's own-site collapse;
    pre_mix [..., 4]: V4.1's delayed one. `out` (a SitePre of tensors) is written into."""
    import torch

    if type(fn) is PackedFn:
        plan = _PLANS.get((fn.dim, fn.stream, pre_mix is None, sinkhorn_iters, eps, norm_eps, fn.device.index))
        if plan is not None:
            got = _fast(torch, plan, x, fn, hc_scale, hc_base, pre_mix, out)
            if got is not None:
                return got
    return _checked(torch, x, fn, hc_scale, hc_base, sinkhorn_iters, eps, norm_eps, pre_mix, out)


def _fast(torch: Any, plan: _Plan, x: Any, fn: PackedFn, scale: Any, base: Any, pre_mix: Any,
          out: SitePre | None) -> SitePre | None:
    """The launch with what Python must check itself (types, current device, 16-byte alignment);
    the compiled executables check every tensor's rank, shape, dtype, strides and device, and
    any refusal sends the call to the checked path, which explains."""
    T = torch.Tensor
    if type(x) is not T or type(scale) is not T or type(base) is not T or x.dim() != 3 or x.shape[0] == 0 \
            or x.get_device() != plan.index or torch._C._cuda_getDevice() != plan.index:
        return None
    ptrs = x.data_ptr() | scale.data_ptr() | base.data_ptr()
    if pre_mix is not None:
        if type(pre_mix) is not T:
            return None
        ptrs |= pre_mix.data_ptr()
    if out is None:
        n, dev, f32 = x.shape[0], plan.device, torch.float32
        outs = (torch.empty((n, W), dtype=f32, device=dev), torch.empty((n, HC), dtype=f32, device=dev),
                torch.empty((n, HC), dtype=f32, device=dev), torch.empty((n, HC, HC), dtype=f32, device=dev),
                torch.empty((n, plan.dim), dtype=x.dtype, device=dev))
    else:
        outs = (out.mixes, out.pre, out.post, out.comb, out.collapsed)
        for t in outs:
            if type(t) is not T:
                return None
            ptrs |= t.data_ptr()
    if ptrs & 15:
        return None
    try:
        plan.launch(x, fn.data, scale, base, pre_mix, outs)
    except Exception:  # noqa: BLE001 - a tensor the executable refused: the checked path says which
        return None
    return out if out is not None else SitePre(*outs)


def _shapes(n: int, dim: int) -> tuple[tuple[int, ...], ...]:
    return (n, W), (n, HC), (n, HC), (n, HC, HC), (n, dim)


# site_pre's own arguments, checked in the order it takes them (tests/test_signatures.py allows it).
def _checked(torch: Any, x: Any, fn: Any, hc_scale: Any, hc_base: Any, iters: int, eps: float, norm_eps: float,
             pre_mix: Any, out: SitePre | None) -> SitePre:
    from hccli.kernels.torch_ref import check_op_params

    check_op_params(HC, iters, eps)
    if not isinstance(norm_eps, (int, float)) or isinstance(norm_eps, bool) or not (0.0 <= norm_eps < float("inf")):
        raise HcError(f"norm_eps must be a finite number >= 0, got {norm_eps!r}")
    stream, dim, lead = cuda_streams(torch, x, "site_pre", "streams x")
    dev = x.device
    x3 = x.reshape(-1, HC, dim).contiguous()
    x3 = x3 if x3.data_ptr() % 16 == 0 else x3.clone()
    n = x3.shape[0]
    if type(fn) is PackedFn:
        if fn.dim != dim or fn.stream != stream:
            raise HcError(f"the packed hc_fn is for dim {fn.dim}, {fn.stream} streams; the streams are dim {dim}, {stream}")
        packed = fn if fn.device == dev else PackedFn(fn.data.to(dev), dim, stream, dev)
    else:
        packed = pack_fn(fn, dim, stream, dev)
    scale = torch.as_tensor(hc_scale).to(device=dev, dtype=torch.float32).contiguous().clone()
    base = torch.as_tensor(hc_base).to(device=dev, dtype=torch.float32).contiguous().clone()
    if tuple(scale.shape) != (3,) or tuple(base.shape) != (W,):
        raise HcError(f"hc_scale {list(scale.shape)} / hc_base {list(base.shape)}: expected [3] and [{W}]")
    pm = None
    if pre_mix is not None:
        pm = torch.as_tensor(pre_mix).to(device=dev, dtype=torch.float32)
        if tuple(pm.shape) != lead + (HC,):
            raise HcError(f"pre_mix has shape {list(pm.shape)}, expected {list(lead + (HC,))}")
        pm = pm.reshape(n, HC).contiguous().clone()
    full = tuple(lead + s[1:] for s in _shapes(n, dim))
    dtypes = (torch.float32,) * 4 + (x.dtype,)
    if out is None:
        given = tuple(torch.empty(s, dtype=d, device=dev) for s, d in zip(full, dtypes))
    else:
        given = (out.mixes, out.pre, out.post, out.comb, out.collapsed)
        for name, t, s, d in zip(SitePre.OUTPUTS, given, full, dtypes):
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != s or t.dtype != d or t.device != dev \
                    or not t.is_contiguous():
                raise HcError(f"out {name}: expected a contiguous {str(d).removeprefix('torch.')} tensor of "
                              f"shape {list(s)} on {dev}")
    if n == 0:
        return out if out is not None else SitePre(*given)
    dest = tuple(t.view(s) if t.data_ptr() % 16 == 0 else torch.empty(s, dtype=t.dtype, device=dev)
                 for t, s in zip(given, _shapes(n, dim)))
    key = (dim, stream, pm is None, iters, eps, norm_eps, dev.index)  # site_pre's fast-path key
    with torch.cuda.device(dev):
        plan = _PLANS.get(key) or _PLANS.setdefault(key, _Plan(torch, dim, stream, pm is None, iters, eps,
                                                                 norm_eps, dev))
        plan.launch(x3, packed.data, scale, base, pm, dest)
    for t, d in zip(given, dest):
        if t.data_ptr() != d.data_ptr():
            t.view(d.shape).copy_(d)
    return out if out is not None else SitePre(*given)
