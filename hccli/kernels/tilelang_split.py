"""The split-Sinkhorn op as a tilelang kernel, float32, one thread block per token.

The kernel reproduces the float32 results of the model's own kernel
(DeepSeek-V4.1-Flash inference/kernel.py 406-474) bit for bit, so its shape is
kept deliberately the same: one 64-thread block per token, the token's mix row
staged in shared memory, the hc x hc comb matrix in a register fragment, and the
row and column sums taken with `T.reduce_sum`. The fragment layout that
tilelang infers for 64 threads decides the summation order ((x0+x2)+(x1+x3) for
hc = 4), so the thread count and the sequence of reduces and element-wise steps
must not change; `benchmarks/kernel_seed_check.py` holds us to that on a GPU.

tilelang and torch are imported inside the functions only: `hc count-params`
and friends must not pay for them.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any

from hccli.errors import HcError
from hccli.kernels.reference import check_op_params, check_shapes, mix_width

# One block of 64 threads per token, as in the model's kernel: the summation order
# of the reduces follows from this number (see the module docstring).
THREADS = 64

# What CI compiles for when no GPU is present: Hopper, the chip these models are served on.
SM90_TARGET: dict[str, str] = {"kind": "cuda", "arch": "sm_90"}

# tilelang's reduce is an XOR butterfly across the threads that share a row or a
# column, so hc must be a power of two (3, 5, 6 fail to lower); 16 is as far as the
# kernel is compiled and tested. The models use 4.
SUPPORTED_HC = (1, 2, 4, 8, 16)


def check_supported(hc_mult: int) -> None:
    if hc_mult not in SUPPORTED_HC:
        raise HcError(
            f"the tilelang kernel supports hc_mult in {', '.join(map(str, SUPPORTED_HC))} "
            f"(its reduces need a power of two), got {hc_mult}: use the torch reference"
        )


def pass_configs() -> dict[Any, Any]:
    """The model's kernel.py pass configs: no warp specialisation, no TMA lowering."""
    import tilelang

    tilelang.set_log_level("WARNING")  # its INFO lines would land in the CLI's output
    return {
        tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True,
        tilelang.PassConfigKey.TL_DISABLE_TMA_LOWER: True,
    }


def make_prim_func(hc_mult: int = 4, sinkhorn_iters: int = 20, eps: float = 1e-6) -> Any:
    """The kernel's TIR PrimFunc for one (hc_mult, sinkhorn_iters, eps); token count symbolic."""
    check_op_params(hc_mult, sinkhorn_iters, eps)
    check_supported(hc_mult)
    import tilelang.language as T

    f32 = "float32"
    hc = hc_mult
    width = mix_width(hc)
    eps = float(eps)
    tokens = T.dynamic("tokens")

    @T.prim_func
    def hc_split_sinkhorn(
        mixes: T.Tensor[(tokens, width), f32],
        hc_scale: T.Tensor[(3,), f32],
        hc_base: T.Tensor[(width,), f32],
        pre: T.Tensor[(tokens, hc), f32],
        post: T.Tensor[(tokens, hc), f32],
        comb: T.Tensor[(tokens, hc, hc), f32],
    ):
        with T.Kernel(tokens, threads=THREADS) as tok:
            row = T.alloc_shared(width, f32)
            m = T.alloc_fragment((hc, hc), f32)
            T.copy(mixes[tok, :], row)

            # reading weights: sigmoid, plus eps
            for j in T.Parallel(hc):
                pre[tok, j] = T.sigmoid(row[j] * hc_scale[0] + hc_base[j]) + eps
            # writing weights: twice a sigmoid
            for j in T.Parallel(hc):
                post[tok, j] = 2 * T.sigmoid(row[j + hc] * hc_scale[1] + hc_base[j + hc])
            # stream combination logits, row j = source stream, column k = target stream
            for j, k in T.Parallel(hc, hc):
                m[j, k] = row[j * hc + k + hc * 2] * hc_scale[2] + hc_base[j * hc + k + hc * 2]

            rsum = T.alloc_fragment(hc, f32)
            csum = T.alloc_fragment(hc, f32)
            rmax = T.alloc_fragment(hc, f32)

            # softmax along each row, then eps on every entry
            T.reduce_max(m, rmax, dim=1)
            for j, k in T.Parallel(hc, hc):
                m[j, k] = T.exp(m[j, k] - rmax[j])
            T.reduce_sum(m, rsum, dim=1)
            for j, k in T.Parallel(hc, hc):
                m[j, k] = m[j, k] / rsum[j] + eps

            # one column normalisation ...
            T.reduce_sum(m, csum, dim=0)
            for j, k in T.Parallel(hc, hc):
                m[j, k] = m[j, k] / (csum[k] + eps)

            # ... then iters - 1 rounds of rows and columns, each dividing by sum + eps
            for _ in T.serial(sinkhorn_iters - 1):
                T.reduce_sum(m, rsum, dim=1)
                for j, k in T.Parallel(hc, hc):
                    m[j, k] = m[j, k] / (rsum[j] + eps)
                T.reduce_sum(m, csum, dim=0)
                for j, k in T.Parallel(hc, hc):
                    m[j, k] = m[j, k] / (csum[k] + eps)

            T.copy(m, comb[tok, :, :])

    return hc_split_sinkhorn


@dataclass(frozen=True)
class BuiltKernel:
    """A kernel lowered and compiled for one target, not run."""

    hc_mult: int
    sinkhorn_iters: int
    eps: float
    target: str  # the tvm target, as text
    source: str  # the generated CUDA C++
    cubin: bytes  # the device binary nvcc produced from `source`

    @property
    def sm_arch(self) -> int:
        return cubin_sm_arch(self.cubin)


def build_kernel(
    hc_mult: int = 4,
    sinkhorn_iters: int = 20,
    eps: float = 1e-6,
    target: Any = None,
) -> BuiltKernel:
    """Lower and compile the kernel for `target` (default sm_90) without running it.

    Needs tilelang and a CUDA toolkit (CUDA_HOME), not a GPU: CI uses this to
    check that every kernel builds.
    """
    configs = pass_configs()
    from tilelang import tvm

    Target = tvm.target.Target

    tvm_target = Target(target if target is not None else SM90_TARGET)
    kernel = _compile(make_prim_func(hc_mult, sinkhorn_iters, eps), tvm_target, configs)
    source = kernel.get_kernel_source()
    # tilelang keeps the device binary inside its runtime module; its own nvcc step
    # (content-addressed, so this is a cache hit after the compile above) hands it back.
    from tilelang.cuda.backend import tilelang_callback_cuda_compile

    cubin = bytes(tilelang_callback_cuda_compile(source, tvm_target, configs))
    return BuiltKernel(hc_mult, sinkhorn_iters, float(eps), str(tvm_target), source, cubin)


def cubin_sm_arch(cubin: bytes) -> int:
    """The SM version a CUDA ELF (cubin) was built for, e.g. 90; 0 if it is no CUDA ELF."""
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF" or cubin[4] != 2:  # e_flags: bytes 48-51 of a 64-bit header
        return 0
    flags = int.from_bytes(cubin[48:52], "little")
    osabi = cubin[7]
    if osabi == 0x41:  # CUDA ELF ABI v2 (CUDA 12.8+): the SM number sits in bits 8-15
        return (flags >> 8) & 0xFF
    if osabi == 0x33:  # the older ABI: bits 0-7
        return flags & 0xFF
    return 0


@functools.lru_cache(maxsize=None)
def _jit_kernel(hc_mult: int, sinkhorn_iters: int, eps: float) -> Any:
    # target "auto" picks the visible GPU's arch, as the model's @tilelang.jit does
    return _compile(make_prim_func(hc_mult, sinkhorn_iters, eps), "auto", pass_configs())


def _compile(prim_func: Any, target: Any, configs: dict[Any, Any]) -> Any:
    import tilelang

    with warnings.catch_warnings():
        # tilelang 0.1.15 deprecates the TMA pass config in favour of a per-copy flag;
        # we keep the model's configs as they are, and its notice out of the CLI's output
        warnings.filterwarnings("ignore", message=".*disable_tma_lower.*", category=DeprecationWarning)
        return tilelang.compile(prim_func, target=target, pass_configs=configs)


def hc_split_sinkhorn_tilelang(
    mixes: Any,
    hc_scale: Any,
    hc_base: Any,
    hc_mult: int = 4,
    sinkhorn_iters: int = 20,
    eps: float = 1e-6,
    *,
    out: tuple[Any, Any, Any] | None = None,
) -> tuple[Any, Any, Any]:
    """Run the kernel on CUDA float32 mixes [..., (2+hc)*hc] -> (pre, post, comb).

    Leading dims are flattened into tokens for the launch and restored on the
    outputs. `out` = (pre, post, comb) writes into given contiguous tensors of
    shapes [..., hc], [..., hc], [..., hc, hc] instead of allocating. The kernel
    for (hc_mult, sinkhorn_iters, eps) is built on first use and kept.
    """
    import torch

    check_op_params(hc_mult, sinkhorn_iters, eps)
    check_supported(hc_mult)
    if not isinstance(mixes, torch.Tensor) or not mixes.is_cuda:
        raise HcError("the tilelang kernel needs mixes as a CUDA tensor")
    if mixes.dtype != torch.float32:
        raise HcError(f"the tilelang kernel takes float32 mixes, got {str(mixes.dtype).removeprefix('torch.')}")
    hc = hc_mult
    width = mix_width(hc)
    scale = torch.as_tensor(hc_scale).to(device=mixes.device, dtype=torch.float32).contiguous()
    base = torch.as_tensor(hc_base).to(device=mixes.device, dtype=torch.float32).contiguous()
    check_shapes(mixes, scale, base, hc)

    lead = tuple(mixes.shape[:-1])
    flat = mixes.reshape(-1, width).contiguous()
    n = flat.shape[0]
    if out is None:
        pre = flat.new_empty(lead + (hc,))
        post = flat.new_empty(lead + (hc,))
        comb = flat.new_empty(lead + (hc, hc))
    else:
        pre, post, comb = out
        for name, t, shape in (("pre", pre, lead + (hc,)), ("post", post, lead + (hc,)), ("comb", comb, lead + (hc, hc))):
            if tuple(t.shape) != shape or t.dtype != torch.float32 or t.device != mixes.device or not t.is_contiguous():
                raise HcError(f"out {name}: expected a contiguous float32 tensor of shape {list(shape)} on {mixes.device}")
    if n:
        kernel = _jit_kernel(hc, sinkhorn_iters, float(eps))
        with torch.cuda.device(mixes.device):  # launch on the tensors' GPU, not the current one
            kernel(flat, scale, base, pre.view(n, hc), post.view(n, hc), comb.view(n, hc, hc))
    return pre, post, comb
