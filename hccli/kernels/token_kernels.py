"""The token-per-thread template of the `exact` and `fast` kernels: one thread carries one token.

The block kernel (block.py) gives a 64-thread block to each token and reduces rows
and columns with shuffles and barriers. Here one thread carries one token from
start to end, the hc x hc matrix in its registers, and every load and store is a
16-byte vector: mixes and comb either go through shared memory as one contiguous,
coalesced tile per block (stage_in / stage_out) or straight between a thread's
registers and its own row; pre and post always go straight (a thread's hc floats
sit next to its neighbour's, so those stores are coalesced). The per-token
arithmetic is exact.py's or fast.py's (token_math.py); this module holds the
memory movement, the tiling, and the launch: the checked public path and the
fast path for inputs that are already right (see `launch`).

tilelang and torch are imported inside the functions only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from hccli.base.errors import HcError
from hccli.kernels import tl_build
from hccli.kernels.token_math import SAFE_DIVIDEND  # the dividends' floor: 2^-100
from hccli.kernels.torch_ref import check_op_params
from hccli.base.vocab import mix_width

VARIANTS = ("exact", "fast")

# exact: the published kernel only lowers for powers of two (its reduces are XOR
# butterflies), so bit-identity is defined for those; past 8 the hc*hc matrix
# no longer fits in one thread's registers.
EXACT_HC = (1, 2, 4, 8)
# fast: any hc whose matrix fits in registers.
FAST_HC = tuple(range(1, 9))


@dataclass(frozen=True)
class Tiling:
    """How a token-per-thread kernel is laid out; the defaults are the versions measured
    fastest on the H200 (benchmarks/NOTES.md).

    block: threads (= tokens) per block. stage_in / stage_out: move mixes / comb through
    shared memory as coalesced 16-byte vectors (True) or let each thread load / store its
    own row (False); None takes the variant's default (STAGED). loop_unroll: how far nvcc
    may unroll the Sinkhorn loop (1: not at all, 0: fully). min_blocks: blocks per SM asked
    of the register allocator (__launch_bounds__).
    """

    block: int = 128
    stage_in: bool | None = None
    stage_out: bool | None = None
    loop_unroll: int = 1
    min_blocks: int | None = None

    def resolved(self, variant: str) -> "Tiling":
        staged = STAGED[variant]
        return replace(self, stage_in=staged if self.stage_in is None else self.stage_in,
                       stage_out=staged if self.stage_out is None else self.stage_out)


# Whether mixes and comb go through shared memory by default: the exact kernel, bound by issue
# slots, gains from coalesced tiles; the fast one, bound by bytes, does not (benchmarks/NOTES.md).
STAGED = {"exact": True, "fast": False}
DEFAULT_TILING = Tiling()


def supported_hc(variant: str) -> tuple[int, ...]:
    return EXACT_HC if variant == "exact" else FAST_HC


def check_supported(variant: str, hc_mult: int) -> None:
    if variant not in VARIANTS:
        raise HcError(f"kernel variant {variant!r} is unknown; expected one of {', '.join(VARIANTS)}")
    if hc_mult not in supported_hc(variant):
        why = ("bit-identity with the published reference kernel is defined for powers of two up to 8"
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


def make_prim_func(variant: str, hc_mult: int, sinkhorn_iters: int, eps: float,
                   tiling: Tiling = DEFAULT_TILING) -> Any:
    """The TIR PrimFunc of one variant for one (hc_mult, sinkhorn_iters, eps); token count symbolic."""
    check_op_params(hc_mult, sinkhorn_iters, eps)
    check_supported(variant, hc_mult)
    t = tiling.resolved(variant)
    block, stage_in, stage_out, loop_unroll, min_blocks = t.block, t.stage_in, t.stage_out, t.loop_unroll, t.min_blocks
    import tilelang.language as T

    from hccli.kernels import token_math as M

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
    """The published kernel's pass configs; the fast variant also flushes subnormals (ex2/rcp without fix-ups)."""
    return tl_build.pass_configs(flush_subnormals=variant == "fast")


def build_kernel(variant: str, hc_mult: int, sinkhorn_iters: int, eps: float, target: Any = None,
                 tiling: Tiling = DEFAULT_TILING) -> tl_build.BuiltKernel:
    """Lower and compile one variant for `target` (default sm_90) without running it (no GPU needed)."""
    return tl_build.build(make_prim_func(variant, hc_mult, sinkhorn_iters, eps, tiling), compile_configs(variant),
                          hc_mult, sinkhorn_iters, eps, target)


def _configs_exact() -> dict[Any, Any]:
    return compile_configs("exact")


def _configs_fast() -> dict[Any, Any]:
    return compile_configs("fast")


def compiled(variant: str, hc_mult: int, sinkhorn_iters: int, eps: float, tiling: Tiling = DEFAULT_TILING) -> Any:
    """The variant compiled for the visible GPU (built on first use and kept): the raw launch,
    which takes comb as [n, hc*hc] and at most tl_build.CHUNK tokens."""
    configs = _configs_exact if variant == "exact" else _configs_fast
    return tl_build.jit(make_prim_func, configs, (variant, hc_mult, sinkhorn_iters, float(eps), tiling))
