"""The site's tilelang kernels, as PrimFuncs: the finish, the collapse and the write-back
(the projection, which uses the finish, is site_proj.py's).

`site_pre` (site_pre.py) runs up to three kernels, `site_write` (site_write.py) one:

- proj (site_proj.py): per block, `block_tokens` tokens and a 1/splits share of
  the `dim` axis; the projection on the tensor cores, the sum of squares and (V4.1's
  delayed hand-off) the collapse from the same tile; with one split the block
  finishes its tokens itself, else it leaves its sums in a [splits, tokens, 32]
  float32 workspace for:
- finish: one thread per token; the splits summed in order, the RMS factor
  rsqrt(sumsq / (hc*dim) + norm_eps), the mixes, then `exact`'s arithmetic
  (token_math.exact_token), so pre/post/comb are bit-identical to the exact
  kernel run on these mixes. The same macro (finish_macro) ends the projection
  when it finishes in-kernel.
- collapse (V4's own-site collapse, which needs this site's pre, so a second
  pass over x) and write: streaming kernels, one block per token, features in
  chunks; sums in the eager chain's order with every product and sum rounded
  on its own (no contraction into FMA): collapsed = ((p0 x0 + p1 x1) + p2 x2) + p3 x3,
  out[j] = post[j] f + (((c0j r0 + c1j r1) + c2j r2) + c3j r3), then the cast
  to the streams' dtype, so they are bit-identical to site_eager's chain.

hc 4 only (site_pre/site_write fall back to the eager chain for other stream
counts, saying so). tilelang is imported inside the functions only. No `from __future__ import
annotations` here: tilelang reads the kernels' tensor annotations as objects.
"""

import math
from dataclasses import dataclass
from typing import Any

from hccli.base.errors import HcError

SITE_HC = (4,)
STREAM_DTYPES = ("bfloat16", "float32")
NPARTS = 3  # bfloat16 parts of fn (and of float32 streams)
PART_ROWS = 24  # (2 + hc) * hc for hc 4
FN_ROWS = 80  # 3 x 24 rows, padded to a width wgmma takes in one instruction
WS_COLS = 32  # workspace row: 24 sums, the sum of squares, padding to 128 bytes
SPLITS = (1, 8, 16)  # split counts the projection is built for (site_pre.choose_launch); 1 finishes in-kernel


@dataclass(frozen=True)
class ProjTiling:
    """The projection's layout; the defaults are the version measured fastest (benchmarks/NOTES.md)."""

    block_tokens: int = 64
    block_dim: int = 64  # features of each stream per step (bfloat16 streams)
    block_dim_f32: int = 16  # float32 streams: their tile is twice the bytes and is split in three
    # tiles of x and of fn in shared memory: each step loads step + stages - 1 (three: two steps ahead)
    x_stages: int = 3
    fn_stages: int = 3
    threads: int = 128

    def dim_step(self, stream: str) -> int:
        return self.block_dim if stream == "bfloat16" else self.block_dim_f32


DEFAULT_PROJ = ProjTiling()
# 128-token blocks of two warp groups: each fn tile read from L2 once for twice the tokens (fn is more
# of a 64-token block's traffic than x). Taken where their tiles alone give every SM a block
# (site_pre.choose_launch), bfloat16 streams; the same step, so the same packed fn.
WIDE_PROJ = ProjTiling(block_tokens=128, threads=256, x_stages=2, fn_stages=2)  # 64 KB x tiles: two of each fit
STREAM_CHUNK = 1024  # features per step of the streaming kernels (collapse, write)
STREAM_THREADS = 128
FINISH_THREADS = 128
# The sums start from -0.0, the one exact additive identity (-0 + x is x for every x, -0 included),
# so that the first product keeps its sign of zero as in the eager chain, which starts from it.
NEG_ZERO = -0.0


def check_site(hc: int, dim: int, stream: str, tiling: ProjTiling = DEFAULT_PROJ) -> None:
    """HcError (one line) unless the site kernels have a build for this shape."""
    if hc not in SITE_HC:
        raise HcError(f"the site kernels are built for hc_mult 4 only, got {hc}")
    if stream not in STREAM_DTYPES:
        raise HcError(f"the site kernels take bfloat16 or float32 streams, got {stream}")
    step = tiling.dim_step(stream)
    if dim < step or dim % step:
        raise HcError(f"the site kernels need dim to be a multiple of {step} for {stream} streams, got {dim}")


def splits_for(dim: int, stream: str, tiling: ProjTiling = DEFAULT_PROJ) -> tuple[int, ...]:
    """The built split counts that divide this dim's steps."""
    steps = dim // tiling.dim_step(stream)
    return tuple(s for s in SPLITS if steps % s == 0)


def _chunk(dim: int) -> int:
    return math.gcd(dim, STREAM_CHUNK)


def finish_macro(hc: int, dim: int, sinkhorn_iters: int, eps: float, norm_eps: float) -> Any:
    """A macro finishing one token on one thread: s [32] holds the 24 sums and, at 24, the sum of
    squares; it writes mixes = s * rsqrt(sumsq / (hc*dim) + norm_eps) and exact's pre, post, comb."""
    from hccli.kernels import token_math as M
    from hccli.kernels.token_kernels import shared_reciprocal_is_exact
    from hccli.kernels.torch_ref import check_op_params

    check_op_params(hc, sinkhorn_iters, eps)
    if hc not in SITE_HC:
        raise HcError(f"the site kernels are built for hc_mult 4 only, got {hc}")
    if not (0.0 <= norm_eps < float("inf")):
        raise HcError(f"norm_eps must be a finite number >= 0, got {norm_eps!r}")
    import tilelang.language as T

    f32 = "float32"
    W = (2 + hc) * hc
    K = float(hc * dim)
    eps, norm_eps = float(eps), float(norm_eps)
    token = M.exact_token(hc, sinkhorn_iters, eps, shared_reciprocal_is_exact(hc, sinkhorn_iters, eps))

    @T.macro
    def finish(s: Any, tok: Any, scale_in: Any, base_in: Any, mixes_o: Any, pre_o: Any, post_o: Any,
               comb_o: Any) -> None:
        xm = T.alloc_local((W,), f32)
        pb = T.alloc_local((W,), f32)
        ps = T.alloc_local((4,), f32)
        m = T.alloc_local((hc * hc,), f32)
        pv = T.alloc_local((hc,), f32)
        qv = T.alloc_local((hc,), f32)
        for i in T.unroll(W):
            pb[i] = base_in[i]
        for i in T.unroll(3):
            ps[i] = scale_in[i]
        r = T.rsqrt(s[W] / K + norm_eps)
        for i in T.unroll(W):
            xm[i] = T.ieee_mul(s[i], r)
        for i in T.unroll(W // 4):
            for v in T.vectorized(4):
                mixes_o[tok, i * 4 + v] = xm[i * 4 + v]
        token(xm, m, pv, qv, ps, pb)
        for va in T.vectorized(hc):
            pre_o[tok, va] = pv[va]
        for vb in T.vectorized(hc):
            post_o[tok, vb] = qv[vb]
        for i in T.unroll(hc):
            for vc in T.vectorized(hc):
                comb_o[tok, i, vc] = m[i * hc + vc]

    return finish


def make_finish(hc: int, dim: int, sinkhorn_iters: int, eps: float, norm_eps: float, splits: int) -> Any:
    """The finish kernel: workspace [splits, tokens, 32] -> mixes, pre, post, comb. The split count is
    fixed, so that a thread's loads of every split go out together (a run-time loop waits on each)."""
    finish = finish_macro(hc, dim, sinkhorn_iters, eps, norm_eps)
    import tilelang.language as T

    f32 = "float32"
    W = (2 + hc) * hc
    tokens = T.dynamic("tokens")
    B = FINISH_THREADS

    @T.prim_func
    def site_pre_finish(ws: T.Tensor[(splits, tokens, WS_COLS), f32], hc_scale: T.Tensor[(3,), f32],
                        hc_base: T.Tensor[(W,), f32], mixes: T.Tensor[(tokens, W), f32],
                        pre: T.Tensor[(tokens, hc), f32], post: T.Tensor[(tokens, hc), f32],
                        comb: T.Tensor[(tokens, hc, hc), f32]):
        with T.Kernel(T.ceildiv(tokens, B), threads=B) as bx:
            tok = bx * B + T.get_thread_binding()
            s = T.alloc_local((WS_COLS,), f32)
            if tok < tokens:
                for i in T.unroll(W + 1):
                    s[i] = ws[0, tok, i]
                for k in T.unroll(splits - 1):
                    for i in T.unroll(W + 1):
                        s[i] = s[i] + ws[k + 1, tok, i]
                finish(s, tok, hc_scale, hc_base, mixes, pre, post, comb)

    return site_pre_finish


def _streaming(dim: int, stream: str) -> tuple[Any, int, Any]:
    """What the streaming kernels (collapse, write-back) start from: the site checked, tilelang's
    language, the features a step takes, the token count as a dynamic size."""
    check_site(4, dim, stream)
    import tilelang.language as T

    return T, _chunk(dim), T.dynamic("tokens")


def make_collapse(dim: int, stream: str) -> Any:
    """V4's own-site collapse: x [tokens, 4, dim] and pre [tokens, 4] -> collapsed [tokens, dim]."""
    hc, f32 = 4, "float32"
    T, C, tokens = _streaming(dim, stream)

    @T.prim_func
    def site_collapse(x: T.Tensor[(tokens, hc, dim), stream], pre: T.Tensor[(tokens, hc), f32],
                      collapsed: T.Tensor[(tokens, dim), stream]):
        with T.Kernel(tokens, threads=STREAM_THREADS) as t:
            pm = T.alloc_fragment((hc,), f32)
            T.copy(pre[t, 0], pm)
            for c in T.Pipelined(dim // C, num_stages=min(2, dim // C)):
                xs = T.alloc_shared((hc, C), stream)
                xf = T.alloc_fragment((hc, C), f32)
                acc = T.alloc_fragment((C,), f32)
                T.copy(x[t, 0, c * C], xs, disable_tma=True)
                T.copy(xs, xf)
                for d in T.Parallel(C):
                    acc[d] = NEG_ZERO
                    for i in T.serial(hc):
                        acc[d] = T.ieee_add(acc[d], T.ieee_mul(pm[i], xf[i, d]))
                T.copy(acc, collapsed[t, c * C], disable_tma=True)

    return site_collapse


def make_write(dim: int, stream: str) -> Any:
    """The write-back: f [tokens, dim], residual [tokens, 4, dim], post [tokens, 4], comb [tokens, 16]
    -> out [tokens, 4, dim]."""
    hc, f32 = 4, "float32"
    T, C, tokens = _streaming(dim, stream)

    @T.prim_func
    def site_write(f: T.Tensor[(tokens, dim), stream], residual: T.Tensor[(tokens, hc, dim), stream],
                   post: T.Tensor[(tokens, hc), f32], comb: T.Tensor[(tokens, hc, hc), f32],
                   out: T.Tensor[(tokens, hc, dim), stream]):
        with T.Kernel(tokens, threads=STREAM_THREADS) as t:
            cm = T.alloc_fragment((hc, hc), f32)
            pw = T.alloc_fragment((hc,), f32)
            T.copy(comb[t, 0, 0], cm)
            T.copy(post[t, 0], pw)
            for c in T.Pipelined(dim // C, num_stages=min(2, dim // C)):
                rs = T.alloc_shared((hc, C), stream)
                fs = T.alloc_shared((C,), stream)
                os_ = T.alloc_shared((hc, C), stream)
                rf = T.alloc_fragment((hc, C), f32)
                ff = T.alloc_fragment((C,), f32)
                of = T.alloc_fragment((hc, C), f32)
                T.copy(residual[t, 0, c * C], rs, disable_tma=True)
                T.copy(f[t, c * C], fs, disable_tma=True)
                T.copy(rs, rf)
                T.copy(fs, ff)
                for j, d in T.Parallel(hc, C):
                    of[j, d] = NEG_ZERO
                    for i in T.serial(hc):
                        of[j, d] = T.ieee_add(of[j, d], T.ieee_mul(cm[i, j], rf[i, d]))
                    of[j, d] = T.ieee_add(T.ieee_mul(pw[j], ff[d]), of[j, d])
                T.copy(of, os_)
                T.copy(os_, out[t, 0, c * C], disable_tma=True)

    return site_write

