"""Token-per-thread tilelang kernels of the split-Sinkhorn op: `exact` and `fast`.

The seed's kernel (tilelang_split.py) gives a 64-thread block to each token and
reduces rows and columns with shuffles and barriers. Here one thread carries one
token from start to end, the hc x hc matrix in its registers, and every load and
store is a 16-byte vector: mixes and comb either go through shared memory as one
contiguous, coalesced tile per block (stage_in / stage_out) or straight between
a thread's registers and its own row; pre and post always go straight (a
thread's hc floats sit next to its neighbour's, so those stores are coalesced).

exact reproduces the seed kernel's float32 results bit for bit: the seed's
operations in the seed's order (the affine step as one fused multiply-add, the
precise expf, sigmoid as 1 / (1 + expf(0 - x)), sums in the order of the seed's
butterfly reduce, (x0 + x2) + (x1 + x3) for hc 4, and IEEE quotients). Only the
way a quotient is obtained changes. nvcc compiles `a / d` (div.rn.f32, sm_90)
to MUFU.RCP and 2 FFMA refining 1/d, 3 FFMA for the quotient, and a range check
(FCHK) that sends awkward operands to a slow path. The refined reciprocal
depends on d alone, so here it is computed once per row or column and serves
its hc elements with the same 3 FFMA each: nvcc's fast-path instructions, hence
the IEEE quotient wherever that path is exact. For the Sinkhorn loop
`shared_reciprocal_is_exact` proves from hc, iters and eps alone that it is for
every input; where it cannot (say hc 8 with 20 iterations) the loop divides
with `/`. The softmax rows check at run time that no dividend is tiny (else
`/`); the sigmoids use `/`.

fast gives up bit-identity for speed (max abs difference from the reference
within 1e-6): approximate exp and reciprocal (MUFU ex2/rcp, subnormals
flushed), and the Sinkhorn loop on the scalings (tilelang_token_math.fast_token).

tilelang and torch are imported inside the functions only.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

from hccli.errors import HcError
from hccli.kernels.reference import check_op_params, check_shapes, mix_width
from hccli.kernels.tilelang_token_math import SAFE_DIVIDEND  # the dividends' floor: 2^-100

VARIANTS = ("exact", "fast")

# Threads (= tokens) per block.
BLOCK = 128

# Whether mixes and comb go through shared memory by default. The exact kernel
# (issue-bound) gained ~2% from it on the H200; the fast one lost ~3% (NOTES.md).
STAGED = {"exact": True, "fast": False}

# exact: the seed kernel only lowers for powers of two (its reduces are XOR
# butterflies), so bit-identity is defined for those; past 8 the hc*hc matrix
# no longer fits in one thread's registers.
EXACT_HC = (1, 2, 4, 8)
# fast: any hc whose matrix fits in registers.
FAST_HC = tuple(range(1, 9))

SM90_TARGET: dict[str, str] = {"kind": "cuda", "arch": "sm_90"}


def supported_hc(variant: str) -> tuple[int, ...]:
    return EXACT_HC if variant == "exact" else FAST_HC


def check_supported(variant: str, hc_mult: int) -> None:
    if variant not in VARIANTS:
        raise HcError(f"kernel variant {variant!r} is unknown; expected one of {', '.join(VARIANTS)}")
    if hc_mult not in supported_hc(variant):
        why = ("bit-identity with the seed kernel is defined for powers of two up to 8"
               if variant == "exact" else "the hc x hc matrix must fit in one thread's registers")
        raise HcError(f"the {variant} kernel supports hc_mult in {', '.join(map(str, supported_hc(variant)))} "
                      f"({why}), got {hc_mult}")


def shared_reciprocal_is_exact(hc_mult: int, sinkhorn_iters: int, eps: float) -> bool:
    """Whether one refined reciprocal per row/column gives IEEE quotients for every input.

    After the softmax step every entry is >= eps (a rounded quotient >= 0, plus
    eps) and <= 1 + eps; each later step divides by d = sum + eps with a <= d,
    so entries stay <= 1, d <= Dmax = hc(1 + eps) + eps (with rounding slack), and
    one step shrinks an entry by at most Dmax (plus one rounding). After the
    2*iters - 1 normalisations every dividend is therefore >= eps * Dmax^-(2 iters - 1);
    if that is >= 2^-100, the remainder a - d*q of nvcc's fast path is exact
    and the path returns the IEEE quotient. For the models' hc 4, 20 iterations
    and eps 1e-6 the bound is 2^-97.9.
    """
    eps = float(eps)
    if not (0.0 < eps <= 1.0):
        return False
    steps = 2 * sinkhorn_iters - 1
    dmax = (hc_mult * (1.0 + eps) + eps) * (1.0 + 2.0 ** -20)
    per_step = math.log2(dmax) + math.log2(1.0 + 2.0 ** -22)
    return math.log2(eps) - steps * per_step >= math.log2(SAFE_DIVIDEND)


def _vec(width: int) -> int:
    """The widest vector (4, 2 or 1 floats) that tiles a row of `width` floats."""
    return 4 if width % 4 == 0 else (2 if width % 2 == 0 else 1)


def make_prim_func(
    variant: str,
    hc_mult: int = 4,
    sinkhorn_iters: int = 20,
    eps: float = 1e-6,
    *,
    block: int = BLOCK,
    stage_in: bool | None = None,
    stage_out: bool | None = None,
    loop_unroll: int = 1,
    min_blocks: int | None = None,
) -> Any:
    """The TIR PrimFunc of one variant for one (hc_mult, sinkhorn_iters, eps); token count symbolic.

    stage_in / stage_out: move mixes / comb through shared memory as coalesced
    16-byte vectors (True) or let each thread load / store its own row (False).
    loop_unroll: how far nvcc may unroll the Sinkhorn loop (1: not at all, 0: fully).
    min_blocks: blocks per SM asked of the register allocator (__launch_bounds__).
    The defaults are the versions measured fastest on the H200 (benchmarks/NOTES.md).
    """
    check_op_params(hc_mult, sinkhorn_iters, eps)
    check_supported(variant, hc_mult)
    staged = STAGED[variant]
    stage_in = staged if stage_in is None else stage_in
    stage_out = staged if stage_out is None else stage_out
    import tilelang.language as T

    from hccli.kernels import tilelang_token_math as M

    f32 = "float32"
    hc = hc_mult
    W = mix_width(hc)
    HH = hc * hc
    eps = float(eps)
    vin, vout, vhc = _vec(W), _vec(HH), _vec(hc)
    nin, nout = W // vin, HH // vout
    # comb rows in shared memory padded so that 8 threads' 16-byte stores land in distinct banks
    s_out = HH + 4 if vout == 4 and nout % 2 == 0 else HH
    tile_len = block * max(W if stage_in else 1, s_out if stage_out else 1)
    npar = (W + 4 + 3) // 4 * 4  # hc_base, then hc_scale padded to a vector; keeps `tile` 16-byte aligned
    if block <= nin:
        raise HcError(f"block {block} is too small to load hc_base ({nin} vectors) in one step")
    exact = variant == "exact"
    token = (M.exact_token(hc, sinkhorn_iters, eps, shared_reciprocal_is_exact(hc, sinkhorn_iters, eps),
                           loop_unroll)
             if exact else M.fast_token(hc, sinkhorn_iters, eps, loop_unroll))
    tokens = T.dynamic("tokens")

    @T.prim_func
    def hc_split_sinkhorn_tokens(
        mixes: T.Tensor[(tokens, W), f32],
        hc_scale: T.Tensor[(3,), f32],
        hc_base: T.Tensor[(W,), f32],
        pre: T.Tensor[(tokens, hc), f32],
        post: T.Tensor[(tokens, hc), f32],
        comb: T.Tensor[(tokens, HH), f32],
    ):
        with T.Kernel(T.ceildiv(tokens, block), threads=block) as bx:
            if min_blocks is not None:
                T.annotate_min_blocks_per_sm(min_blocks)
            tx = T.get_thread_binding()
            tile = T.alloc_shared((tile_len,), f32)
            par = T.alloc_shared((npar,), f32)
            x = T.alloc_local((W,), f32)
            pb = T.alloc_local((W,), f32)
            ps = T.alloc_local((4,), f32)
            m = T.alloc_local((HH,), f32)
            pv = T.alloc_local((hc,), f32)
            qv = T.alloc_local((hc,), f32)
            tok = bx * block + tx
            left = tokens - bx * block  # tokens of this block (more than block except in the last)

            # ---- parameters, once per block, into shared memory
            if tx < nin:
                for v in T.vectorized(vin):
                    par[tx * vin + v] = hc_base[tx * vin + v]
            if tx == nin:
                for i in T.unroll(3):
                    par[W + i] = hc_scale[i]
                par[W + 3] = 0.0
            # ---- mixes in: the block's rows are one contiguous run of memory
            if stage_in:
                for it in T.unroll(nin):
                    f = it * block + tx
                    if f < left * nin:
                        for v in T.vectorized(vin):
                            tile[f * vin + v] = mixes[bx * block + f // nin, (f % nin) * vin + v]
            T.sync_threads()
            if stage_in:
                for i in T.unroll(nin):
                    for v in T.vectorized(vin):
                        x[i * vin + v] = tile[tx * W + i * vin + v]
            else:
                if tx < left:
                    for i in T.unroll(nin):
                        for v in T.vectorized(vin):
                            x[i * vin + v] = mixes[tok, i * vin + v]
            for i in T.unroll(nin):
                for v in T.vectorized(vin):
                    pb[i * vin + v] = par[i * vin + v]
            if W % 4 == 0:
                for v in T.vectorized(4):
                    ps[v] = par[W + v]
            else:
                for v in T.unroll(4):
                    ps[v] = par[W + v]

            # ---- the op, in registers
            token(x, m, pv, qv, ps, pb)

            # ---- pre, post out: a thread's hc floats sit next to its neighbour's
            if tx < left:
                for i in T.unroll(hc // vhc):
                    for v in T.vectorized(vhc):
                        pre[tok, i * vhc + v] = pv[i * vhc + v]
                for i in T.unroll(hc // vhc):
                    for v in T.vectorized(vhc):
                        post[tok, i * vhc + v] = qv[i * vhc + v]

            # ---- comb out
            if stage_out:
                if stage_in:
                    T.sync_threads()  # all rows of mixes have been read out of the tile
                for i in T.unroll(nout):
                    for v in T.vectorized(vout):
                        tile[tx * s_out + i * vout + v] = m[i * vout + v]
                T.sync_threads()
                for it in T.unroll(nout):
                    f = it * block + tx
                    if f < left * nout:
                        for v in T.vectorized(vout):
                            comb[bx * block + f // nout, (f % nout) * vout + v] = tile[
                                (f // nout) * s_out + (f % nout) * vout + v]
            else:
                if tx < left:
                    for i in T.unroll(nout):
                        for v in T.vectorized(vout):
                            comb[tok, i * vout + v] = m[i * vout + v]

    return hc_split_sinkhorn_tokens


def compile_configs(variant: str) -> dict[Any, Any]:
    """The seed's pass configs; the fast variant also flushes subnormals (ex2/rcp without fix-ups)."""
    import tilelang

    from hccli.kernels.tilelang_split import pass_configs

    configs = pass_configs()
    if variant == "fast":
        configs[tilelang.PassConfigKey.TL_DEVICE_COMPILE_FLAGS] = ["-ftz=true"]
    return configs


def _compile(prim_func: Any, target: Any, variant: str) -> Any:
    import tilelang

    with warnings.catch_warnings():
        # the seed's TMA pass config is deprecated in tilelang 0.1.15; keep its notice out of the CLI
        warnings.filterwarnings("ignore", message=".*disable_tma_lower.*", category=DeprecationWarning)
        return tilelang.compile(prim_func, target=target, pass_configs=compile_configs(variant))


def build_kernel(
    variant: str,
    hc_mult: int = 4,
    sinkhorn_iters: int = 20,
    eps: float = 1e-6,
    target: Any = None,
    **tuning: Any,
) -> Any:
    """Lower and compile one variant for `target` (default sm_90) without running it: a BuiltKernel.

    Needs tilelang and a CUDA toolkit (CUDA_HOME), not a GPU.
    """
    from tilelang import tvm
    from tilelang.cuda.backend import tilelang_callback_cuda_compile

    from hccli.kernels.tilelang_split import BuiltKernel

    tvm_target = tvm.target.Target(target if target is not None else SM90_TARGET)
    kernel = _compile(make_prim_func(variant, hc_mult, sinkhorn_iters, eps, **tuning), tvm_target, variant)
    source = kernel.get_kernel_source()
    cubin = bytes(tilelang_callback_cuda_compile(source, tvm_target, compile_configs(variant)))
    return BuiltKernel(hc_mult, sinkhorn_iters, float(eps), str(tvm_target), source, cubin)


@functools.lru_cache(maxsize=None)
def _jit_kernel(variant: str, hc_mult: int, sinkhorn_iters: int, eps: float, tuning: tuple) -> Any:
    return _compile(make_prim_func(variant, hc_mult, sinkhorn_iters, eps, **dict(tuning)), "auto", variant)


# Tokens per launch: keeps tokens * (vectors per row) inside the kernel's int32 index arithmetic.
CHUNK = 1 << 25


def _aligned(t: Any) -> Any:
    # the kernels move 16-byte vectors; a view that starts mid-vector gets its own copy
    return t if t.data_ptr() % 16 == 0 else t.clone()


def hc_split_sinkhorn_tokens(
    mixes: Any,
    hc_scale: Any,
    hc_base: Any,
    hc_mult: int = 4,
    sinkhorn_iters: int = 20,
    eps: float = 1e-6,
    *,
    variant: str = "exact",
    out: tuple[Any, Any, Any] | None = None,
    **tuning: Any,
) -> tuple[Any, Any, Any]:
    """Run one variant on CUDA float32 mixes [..., (2+hc)*hc] -> (pre, post, comb).

    As tilelang_split.hc_split_sinkhorn_tilelang: leading dims are flattened for
    the launch and restored on the outputs; `out` = (pre, post, comb) writes into
    given contiguous float32 tensors. The kernel is built on first use and kept.
    """
    import torch

    check_op_params(hc_mult, sinkhorn_iters, eps)
    check_supported(variant, hc_mult)
    what = f"the {variant} kernel"
    if not isinstance(mixes, torch.Tensor) or not mixes.is_cuda:
        raise HcError(f"{what} needs mixes as a CUDA tensor")
    if mixes.dtype != torch.float32:
        raise HcError(f"{what} takes float32 mixes, got {str(mixes.dtype).removeprefix('torch.')}")
    hc = hc_mult
    width = mix_width(hc)
    scale = torch.as_tensor(hc_scale).to(device=mixes.device, dtype=torch.float32).contiguous()
    base = torch.as_tensor(hc_base).to(device=mixes.device, dtype=torch.float32).contiguous()
    check_shapes(mixes, scale, base, hc)
    scale, base = _aligned(scale), _aligned(base)

    lead = tuple(mixes.shape[:-1])
    flat = _aligned(mixes.reshape(-1, width).contiguous())
    n = flat.shape[0]
    shapes = (lead + (hc,), lead + (hc,), lead + (hc, hc))
    if out is None:
        pre, post, comb = (flat.new_empty(s) for s in shapes)
        dest = (pre, post, comb)
    else:
        pre, post, comb = out
        for name, t, shape in zip(("pre", "post", "comb"), out, shapes):
            if tuple(t.shape) != shape or t.dtype != torch.float32 or t.device != mixes.device or not t.is_contiguous():
                raise HcError(f"out {name}: expected a contiguous float32 tensor of shape {list(shape)} on {mixes.device}")
        dest = tuple(t if t.data_ptr() % 16 == 0 else torch.empty_like(t) for t in out)
    if n:
        launch = launcher(variant, hc, sinkhorn_iters, eps, **tuning)
        p2, q2, c2 = dest[0].view(n, hc), dest[1].view(n, hc), dest[2].view(n, hc * hc)
        if mixes.device.index == torch.cuda.current_device():
            launch(flat, scale, base, p2, q2, c2)
        else:
            with torch.cuda.device(mixes.device):  # launch on the tensors' GPU, not the current one
                launch(flat, scale, base, p2, q2, c2)
        for t, d in zip((pre, post, comb), dest):
            if t is not d:
                t.copy_(d)
    return pre, post, comb


def launcher(variant: str, hc_mult: int, sinkhorn_iters: int, eps: float, *, raw: bool = False, **tuning: Any) -> Any:
    """A function (mixes [n, W], scale, base, pre [n, hc], post [n, hc], comb [n, hc*hc]) -> None
    that launches the compiled kernel (built on first use) with no argument checks: for timing.
    raw: the compiled kernel itself, for n <= CHUNK (no Python in between)."""
    kernel = _jit_kernel(variant, hc_mult, sinkhorn_iters, float(eps), tuple(sorted(tuning.items())))
    if raw:
        return kernel

    def launch(flat: Any, scale: Any, base: Any, p2: Any, q2: Any, c2: Any) -> None:
        n = flat.shape[0]
        if n <= CHUNK:
            kernel(flat, scale, base, p2, q2, c2)
            return
        for lo in range(0, n, CHUNK):
            hi = min(n, lo + CHUNK)
            kernel(flat[lo:hi], scale, base, p2[lo:hi], q2[lo:hi], c2[lo:hi])

    return launch


def hc_split_sinkhorn_exact(mixes: Any, hc_scale: Any, hc_base: Any, hc_mult: int = 4, sinkhorn_iters: int = 20,
                            eps: float = 1e-6, *, out: tuple[Any, Any, Any] | None = None) -> tuple[Any, Any, Any]:
    """The exact kernel: float32 results bit-identical to the seed kernel's."""
    return hc_split_sinkhorn_tokens(mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps, variant="exact", out=out)


def hc_split_sinkhorn_fast(mixes: Any, hc_scale: Any, hc_base: Any, hc_mult: int = 4, sinkhorn_iters: int = 20,
                           eps: float = 1e-6, *, out: tuple[Any, Any, Any] | None = None) -> tuple[Any, Any, Any]:
    """The fast kernel: within 1e-6 of the reference, approximate exp and reciprocal."""
    return hc_split_sinkhorn_tokens(mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps, variant="fast", out=out)
