"""The site's tilelang kernels, as PrimFuncs: the projection, the finish, the collapse and the write-back.

`site_pre` (site_pre.py) runs up to three of them, `site_write` (site_write.py) one:

- proj: per block, `block_tokens` tokens and a 1/splits share of the `dim` axis;
  per step, all hc streams of `block_dim` features of x into shared memory, the
  projection on the tensor cores (wgmma), and, from the same tile, each token's
  sum of squares and (V4.1's delayed hand-off, where the pre mix is an input)
  the collapse of those features. fn is given pre-split into three bfloat16
  parts, f = f1 + f2 + f3 exactly (site_pre.pack_fn), as 80 rows (24 per part,
  8 of zeros: wgmma takes N = 80 as one instruction, 72 as nine). bfloat16
  streams are exact in bfloat16, so every product x * f_k is exact and the
  tensor cores' float32 sums carry a float32-class projection; float32 streams
  are split the same way in the kernel (x = x1 + x2 + x3) and take three
  products per tile instead of one. Each part accumulates in its own columns,
  so the small parts are not lost against the large ones; the block writes its
  24 sums (f3 + f2 first, then f1) and its sum of squares to a [splits, tokens,
  32] float32 workspace.
- finish: one thread per token; the splits summed in order, the RMS factor
  rsqrt(sumsq / (hc*dim) + norm_eps), the mixes, then `exact`'s arithmetic
  (token_math.exact_token), so pre/post/comb are bit-identical to the exact
  kernel run on these mixes.
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

from hccli.errors import HcError

SITE_HC = (4,)
STREAM_DTYPES = ("bfloat16", "float32")
NPARTS = 3  # bfloat16 parts of fn (and of float32 streams)
PART_ROWS = 24  # (2 + hc) * hc for hc 4
FN_ROWS = 80  # 3 x 24 rows, padded to a width wgmma takes in one instruction
WS_COLS = 32  # workspace row: 24 sums, the sum of squares, padding to 128 bytes
SPLITS = (1, 8, 32)  # workspace splits the projection is built for (site_pre.choose_splits)


@dataclass(frozen=True)
class ProjTiling:
    """The projection's layout; the defaults are the version measured fastest (benchmarks/NOTES.md)."""

    block_tokens: int = 64
    block_dim: int = 32  # features of each stream per step (bfloat16 streams)
    block_dim_f32: int = 16  # float32 streams: their tile is twice the bytes and is split in three
    stages: int = 3
    threads: int = 128

    def dim_step(self, stream: str) -> int:
        return self.block_dim if stream == "bfloat16" else self.block_dim_f32


DEFAULT_PROJ = ProjTiling()
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


def make_proj(dim: int, stream: str, collapse: bool, splits: int, tiling: ProjTiling = DEFAULT_PROJ) -> Any:
    """The projection kernel for hc 4, one dim, stream dtype and split count; token count symbolic.

    collapse: also write the collapse with the given pre mix (V4.1's delayed hand-off).
    """
    hc = 4
    check_site(hc, dim, stream, tiling)
    import tilelang.language as T

    f32, bf16 = "float32", "bfloat16"
    BM, BD = tiling.block_tokens, tiling.dim_step(stream)
    KC = hc * BD  # columns of one step's tile: hc streams of BD features
    nd = dim // BD
    if nd % splits:
        raise HcError(f"dim {dim} ({nd} steps) does not split {splits} ways")
    steps = nd // splits
    is_f32 = stream == f32
    tokens = T.dynamic("tokens")

    @T.macro
    def step_values(xs: Any, sq: Any, pm: Any, collapsed: Any, row0: Any, d0: Any) -> None:
        """Each token's sum of squares and (collapse) its collapsed features, from the tile in shared memory."""
        x0 = T.alloc_fragment((BM, BD), stream)
        x1 = T.alloc_fragment((BM, BD), stream)
        x2 = T.alloc_fragment((BM, BD), stream)
        x3 = T.alloc_fragment((BM, BD), stream)
        T.copy(xs[:, 0:BD], x0)
        T.copy(xs[:, BD:2 * BD], x1)
        T.copy(xs[:, 2 * BD:3 * BD], x2)
        T.copy(xs[:, 3 * BD:4 * BD], x3)
        if collapse:
            hf = T.alloc_fragment((BM, BD), stream)
            for t, d in T.Parallel(BM, BD):
                v0 = T.cast(x0[t, d], f32)
                v1 = T.cast(x1[t, d], f32)
                v2 = T.cast(x2[t, d], f32)
                v3 = T.cast(x3[t, d], f32)
                sq[t, d] += v0 * v0 + v1 * v1 + v2 * v2 + v3 * v3
                hf[t, d] = T.cast(T.ieee_add(T.ieee_add(T.ieee_add(
                    T.ieee_mul(pm[t, 0], v0), T.ieee_mul(pm[t, 1], v1)), T.ieee_mul(pm[t, 2], v2)),
                    T.ieee_mul(pm[t, 3], v3)), stream)
            T.copy(hf, collapsed[row0, d0])
        else:
            for t, d in T.Parallel(BM, BD):
                v0 = T.cast(x0[t, d], f32)
                v1 = T.cast(x1[t, d], f32)
                v2 = T.cast(x2[t, d], f32)
                v3 = T.cast(x3[t, d], f32)
                sq[t, d] += v0 * v0 + v1 * v1 + v2 * v2 + v3 * v3

    @T.macro
    def body(x: Any, fnp: Any, pre_in: Any, ws: Any, collapsed: Any) -> None:
        with T.Kernel(T.ceildiv(tokens, BM), splits, threads=tiling.threads) as (bx, ks):
            xs = T.alloc_shared((BM, KC), stream)
            fs = T.alloc_shared((FN_ROWS, KC), bf16)
            acc = T.alloc_fragment((BM, FN_ROWS), f32)
            sq = T.alloc_fragment((BM, BD), f32)
            pm = T.alloc_shared((BM, hc), f32)
            row0 = bx * BM
            T.clear(acc)
            T.clear(sq)
            if collapse:
                T.copy(pre_in[row0, 0], pm)
            for kd in T.Pipelined(steps, num_stages=min(tiling.stages, steps)):
                step = ks * steps + kd
                d0 = step * BD
                for i in T.unroll(hc):
                    T.copy(x[row0:row0 + BM, i, d0:d0 + BD], xs[:, i * BD:(i + 1) * BD])
                T.copy(fnp[step, 0, 0], fs)
                if is_f32:
                    # x = x1 + x2 + x3 exactly in bfloat16 parts; nine products (the three
                    # smallest are below float32's reach and harmless)
                    h1 = T.alloc_shared((BM, KC), bf16)
                    h2 = T.alloc_shared((BM, KC), bf16)
                    h3 = T.alloc_shared((BM, KC), bf16)
                    for t, c in T.Parallel(BM, KC):
                        v = xs[t, c]
                        a = T.cast(v, bf16)
                        r = v - T.cast(a, f32)
                        b = T.cast(r, bf16)
                        h1[t, c] = a
                        h2[t, c] = b
                        h3[t, c] = T.cast(r - T.cast(b, f32), bf16)
                    T.gemm(h1, fs, acc, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                    T.gemm(h2, fs, acc, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                    T.gemm(h3, fs, acc, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                else:
                    T.gemm(xs, fs, acc, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                step_values(xs, sq, pm, collapsed, row0, d0)
            sqs = T.alloc_fragment((BM,), f32)
            T.reduce_sum(sq, sqs, dim=1)
            accs = T.alloc_shared((BM, FN_ROWS), f32)
            sqsh = T.alloc_shared((BM,), f32)
            T.copy(acc, accs)
            T.copy(sqs, sqsh)
            for t, j in T.Parallel(BM, WS_COLS):
                if row0 + t < tokens:
                    if j < PART_ROWS:
                        ws[ks, row0 + t, j] = accs[t, j] + (accs[t, PART_ROWS + j] + accs[t, 2 * PART_ROWS + j])
                    elif j == PART_ROWS:
                        ws[ks, row0 + t, j] = sqsh[t]

    if collapse:
        @T.prim_func
        def site_pre_proj(x: T.Tensor[(tokens, hc, dim), stream], fnp: T.Tensor[(nd, FN_ROWS, KC), bf16],
                          pre_in: T.Tensor[(tokens, hc), f32], ws: T.Tensor[(splits, tokens, WS_COLS), f32],
                          collapsed: T.Tensor[(tokens, dim), stream]):
            body(x, fnp, pre_in, ws, collapsed)

        return site_pre_proj

    @T.prim_func
    def site_pre_proj_own(x: T.Tensor[(tokens, hc, dim), stream], fnp: T.Tensor[(nd, FN_ROWS, KC), bf16],
                          ws: T.Tensor[(splits, tokens, WS_COLS), f32]):
        body(x, fnp, None, ws, None)

    return site_pre_proj_own


def make_finish(hc: int, dim: int, sinkhorn_iters: int, eps: float, norm_eps: float) -> Any:
    """The finish kernel: workspace [splits, tokens, 32] -> mixes, pre, post, comb (splits symbolic)."""
    from hccli.kernels import token_math as M
    from hccli.kernels.token_kernels import shared_reciprocal_is_exact
    from hccli.kernels.torch_ref import check_op_params

    check_op_params(hc, sinkhorn_iters, eps)
    if hc not in SITE_HC:
        raise HcError(f"the site kernels are built for hc_mult 4 only, got {hc}")
    import tilelang.language as T

    f32 = "float32"
    W = (2 + hc) * hc
    HH = hc * hc
    K = float(hc * dim)
    eps, norm_eps = float(eps), float(norm_eps)
    token = M.exact_token(hc, sinkhorn_iters, eps, shared_reciprocal_is_exact(hc, sinkhorn_iters, eps))
    tokens = T.dynamic("tokens")
    splits = T.dynamic("splits")
    B = FINISH_THREADS

    @T.prim_func
    def site_pre_finish(ws: T.Tensor[(splits, tokens, WS_COLS), f32], hc_scale: T.Tensor[(3,), f32],
                        hc_base: T.Tensor[(W,), f32], mixes: T.Tensor[(tokens, W), f32],
                        pre: T.Tensor[(tokens, hc), f32], post: T.Tensor[(tokens, hc), f32],
                        comb: T.Tensor[(tokens, hc, hc), f32]):
        with T.Kernel(T.ceildiv(tokens, B), threads=B) as bx:
            tok = bx * B + T.get_thread_binding()
            s = T.alloc_local((WS_COLS,), f32)
            x = T.alloc_local((W,), f32)
            pb = T.alloc_local((W,), f32)
            ps = T.alloc_local((4,), f32)
            m = T.alloc_local((HH,), f32)
            pv = T.alloc_local((hc,), f32)
            qv = T.alloc_local((hc,), f32)
            if tok < tokens:
                for i in T.unroll(W):
                    pb[i] = hc_base[i]
                for i in T.unroll(3):
                    ps[i] = hc_scale[i]
                for i in T.unroll(W + 1):
                    s[i] = ws[0, tok, i]
                for k in T.serial(splits - 1):
                    for i in T.unroll(W + 1):
                        s[i] = s[i] + ws[k + 1, tok, i]
                r = T.rsqrt(s[W] / K + norm_eps)
                for i in T.unroll(W):
                    x[i] = T.ieee_mul(s[i], r)
                for i in T.unroll(W // 4):
                    for v in T.vectorized(4):
                        mixes[tok, i * 4 + v] = x[i * 4 + v]
                token(x, m, pv, qv, ps, pb)
                for v in T.vectorized(hc):
                    pre[tok, v] = pv[v]
                for v in T.vectorized(hc):
                    post[tok, v] = qv[v]
                for i in T.unroll(hc):
                    for v in T.vectorized(hc):
                        comb[tok, i, v] = m[i * hc + v]

    return site_pre_finish


def make_collapse(dim: int, stream: str) -> Any:
    """V4's own-site collapse: x [tokens, 4, dim] and pre [tokens, 4] -> collapsed [tokens, dim]."""
    hc = 4
    check_site(hc, dim, stream)
    import tilelang.language as T

    f32 = "float32"
    C = _chunk(dim)
    tokens = T.dynamic("tokens")

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
    hc = 4
    check_site(hc, dim, stream)
    import tilelang.language as T

    f32 = "float32"
    C = _chunk(dim)
    tokens = T.dynamic("tokens")

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


MAKERS = {"proj": make_proj, "finish": make_finish, "collapse": make_collapse, "write": make_write}


def build_kernel(kind: str, *args: Any, target: Any = None) -> Any:
    """Lower and compile one site kernel (MAKERS[kind](*args)) for `target` (default sm_90), no GPU needed."""
    from hccli.kernels import tl_build

    iters, eps = (args[2], args[3]) if kind == "finish" else (0, 0.0)
    return tl_build.build(MAKERS[kind](*args), tl_build.pass_configs(), 4, iters, eps, target)
