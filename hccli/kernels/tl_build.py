"""The one place for tilelang plumbing: target, pass configs, compile, cache, launch-argument checks.

Every tilelang kernel of the split-Sinkhorn op (block.py, exact.py, fast.py) goes
through here to be compiled (for the visible GPU, or for sm_90 without one, as CI
does) and to have its arguments checked before a launch. tilelang and torch are
imported inside the functions only: `hc count-params` and friends must not pay for them.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from hccli.base.errors import HcError
from hccli.kernels.torch_ref import check_op_params, check_shapes
from hccli.base.vocab import mix_width

# What CI compiles for when no GPU is present: Hopper, the chip these models are served on.
SM90_TARGET: dict[str, str] = {"kind": "cuda", "arch": "sm_90"}

# Tokens per launch: keeps tokens * (vectors per row) inside the kernels' int32 index arithmetic.
CHUNK = 1 << 25


def pass_configs(*, flush_subnormals: bool = False) -> dict[Any, Any]:
    """The published reference kernel's pass configs (no warp specialisation, no TMA lowering);
    flush_subnormals adds nvcc's -ftz=true (the fast kernel's ex2/rcp without fix-ups)."""
    import tilelang

    tilelang.set_log_level("WARNING")  # its INFO lines would land in the CLI's output
    configs = {
        tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True,
        tilelang.PassConfigKey.TL_DISABLE_TMA_LOWER: True,
    }
    if flush_subnormals:
        configs[tilelang.PassConfigKey.TL_DEVICE_COMPILE_FLAGS] = ["-ftz=true"]
    return configs


def compile_prim(prim_func: Any, target: Any, configs: dict[Any, Any]) -> Any:
    """tilelang.compile, with the deprecation notice of the TMA pass config kept out of the CLI's output."""
    import tilelang

    with warnings.catch_warnings():
        # tilelang 0.1.15 deprecates the TMA pass config in favour of a per-copy flag;
        # we keep the published kernel's configs as they are
        warnings.filterwarnings("ignore", message=".*disable_tma_lower.*", category=DeprecationWarning)
        return tilelang.compile(prim_func, target=target, pass_configs=configs)


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


def build(prim_func: Any, configs: dict[Any, Any], hc_mult: int, sinkhorn_iters: int, eps: float,
          target: Any = None) -> BuiltKernel:
    """Lower and compile `prim_func` for `target` (default sm_90) without running it.

    Needs tilelang and a CUDA toolkit (CUDA_HOME), not a GPU: CI uses this to check
    that every kernel builds.
    """
    from tilelang import tvm
    from tilelang.cuda.backend import tilelang_callback_cuda_compile

    tvm_target = tvm.target.Target(target if target is not None else SM90_TARGET)
    kernel = compile_prim(prim_func, tvm_target, configs)
    source = kernel.get_kernel_source()
    # tilelang keeps the device binary inside its runtime module; its own nvcc step
    # (content-addressed, so a cache hit after the compile above) hands it back.
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
def jit(make: Callable[..., Any], configs: Callable[[], dict[Any, Any]], key: tuple) -> Any:
    """The compiled kernel make(*key) for the visible GPU, built on first use and kept.

    Target "auto" picks the visible GPU's arch, as the published kernel's @tilelang.jit does.
    """
    return compile_prim(make(*key), "auto", configs())


def executable(kernel: Any) -> Any:
    """tilelang's compiled executable behind a JIT kernel, called without tilelang's Python wrapper.

    The wrapper (tvm_ffi adapter, tilelang 0.1.15) only stitches the argument list and
    picks a device for outputs it would allocate, which these kernels have none of; the
    executable itself still checks every argument's dtype, rank, shape and device in
    its generated host code. Where a tilelang version lacks it, the kernel itself.
    """
    adapter = getattr(kernel, "adapter", None)
    get = getattr(adapter, "_get_executable", None)
    if get is None or getattr(adapter, "result_idx", None):
        return kernel
    try:
        return get()
    except Exception:  # noqa: BLE001 - any trouble: the ordinary call
        return kernel


def args_as_given(*args: Any) -> tuple[Any, ...]:
    """A timed launch's arguments for a kernel that takes (mixes, scale, base, pre, post, comb) as they are."""
    return args


def args_comb_flat(mixes: Any, scale: Any, base: Any, pre: Any, post: Any, comb: Any) -> tuple[Any, ...]:
    """The same for a kernel that takes comb as [n, hc*hc] (the token-per-thread ones)."""
    return mixes, scale, base, pre, post, comb.view(comb.shape[0], -1)


def _aligned(t: Any) -> Any:
    # the token kernels move 16-byte vectors; a view that starts mid-vector gets its own copy
    return t if t.data_ptr() % 16 == 0 else t.clone()


@dataclass
class LaunchArgs:
    """What a launch needs, checked: 2-D mixes [n, W], scale, base, and 2-D views of the outputs."""

    flat: Any
    scale: Any
    base: Any
    outputs: tuple[Any, Any, Any]  # what the caller gets back, shaped like mixes' leading dims
    dest: tuple[Any, Any, Any]  # where the kernel writes ([n, hc], [n, hc], [n, hc, hc] or [n, hc*hc])
    n: int

    def finish(self) -> tuple[Any, Any, Any]:
        for t, d in zip(self.outputs, self.dest):
            if t.data_ptr() != d.data_ptr():
                t.view(d.shape).copy_(d)
        return self.outputs


# The split kernel's own arguments, checked in its order for every kernel (tests/test_signatures.py
# allows this and launch_checked).
def check_launch(what: str, mixes: Any, hc_scale: Any, hc_base: Any, hc_mult: int, sinkhorn_iters: int, eps: float,
                 out: tuple[Any, Any, Any] | None, *, flat_comb: bool, align: bool) -> LaunchArgs:
    """Check and shape a kernel call's arguments; HcError (one line) for anything the kernel cannot take.

    Leading dims of mixes are flattened into tokens for the launch and restored on
    the outputs. `out` = (pre, post, comb) writes into given contiguous float32 tensors.
    align: the kernel moves 16-byte vectors, so every pointer it gets must be 16-byte aligned.
    """
    import torch

    check_op_params(hc_mult, sinkhorn_iters, eps)
    if not isinstance(mixes, torch.Tensor) or not mixes.is_cuda:
        raise HcError(f"{what} needs mixes as a CUDA tensor")
    if mixes.dtype != torch.float32:
        raise HcError(f"{what} takes float32 mixes, got {str(mixes.dtype).removeprefix('torch.')}")
    hc = hc_mult
    width = mix_width(hc)
    scale = torch.as_tensor(hc_scale).to(device=mixes.device, dtype=torch.float32).contiguous()
    base = torch.as_tensor(hc_base).to(device=mixes.device, dtype=torch.float32).contiguous()
    check_shapes(mixes, scale, base, hc)
    lead = tuple(mixes.shape[:-1])
    flat = mixes.reshape(-1, width).contiguous()
    if align:
        scale, base, flat = _aligned(scale), _aligned(base), _aligned(flat)
    n = flat.shape[0]
    shapes = (lead + (hc,), lead + (hc,), lead + (hc, hc))
    if out is None:
        outputs = tuple(flat.new_empty(s) for s in shapes)
    else:
        outputs = tuple(out)
        for name, t, shape in zip(("pre", "post", "comb"), outputs, shapes):
            if tuple(t.shape) != shape or t.dtype != torch.float32 or t.device != mixes.device or not t.is_contiguous():
                raise HcError(f"out {name}: expected a contiguous float32 tensor of shape {list(shape)} on {mixes.device}")
    dest = tuple(t if not align or t.data_ptr() % 16 == 0 else torch.empty_like(t) for t in outputs)
    views = (dest[0].view(n, hc), dest[1].view(n, hc), dest[2].view(n, hc * hc) if flat_comb else dest[2].view(n, hc, hc))
    return LaunchArgs(flat, scale, base, outputs, views, n)


def launch_checked(what: str, kernel: Callable[[], Any], launch: Callable[[Any, LaunchArgs], None], mixes: Any,
                   hc_scale: Any, hc_base: Any, hc_mult: int, sinkhorn_iters: int, eps: float,
                   out: tuple[Any, Any, Any] | None, *, flat_comb: bool, align: bool) -> tuple[LaunchArgs, Any]:
    """A kernel's checked call: check_launch, then, where there are tokens, launch(kernel(), args) on the
    tensors' GPU (made current for the launch where it is not). (args, the kernel or None); args.finish()
    gives the outputs."""
    import torch

    args = check_launch(what, mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps, out, flat_comb=flat_comb,
                        align=align)
    if not args.n:
        return args, None
    compiled = kernel()
    if mixes.device.index == torch.cuda.current_device():
        launch(compiled, args)
    else:
        with torch.cuda.device(mixes.device):  # launch on the tensors' GPU, not the current one
            launch(compiled, args)
    return args, compiled
