"""The site's projection kernel (tilelang PrimFunc): rms statistic, projection, and the delayed collapse.

Per block, `block_tokens` tokens and a 1/splits share of the `dim` axis; per step,
all hc streams of `block_dim` features of x into shared memory, the projection on
the tensor cores (wgmma), and, from the same tile, each token's sum of squares and
(V4.1's delayed hand-off, where the pre mix is an input) the collapse of those
features, written at once.

fn comes pre-split into three bfloat16 parts, f = f1 + f2 + f3 exactly
(site_pre.pack_fn), as 80 rows (24 per part, 8 of zeros: wgmma takes N = 80 as
one instruction, 72 as nine). bfloat16 streams are exact in bfloat16, so every
product x * f_k is exact; float32 streams are split the same way in the kernel
(x = x1 + x2 + x3) and take three products per tile instead of one. Each part
accumulates in its own columns, so the small parts are not lost against the
large ones. The tensor cores' float32 accumulation drops low bits of long sums
(measured on the H200: 4-7x the error of float32 FMA over 20,480 terms), so each
step's products start from zero (16 multiply-adds of 16 terms on the tensor
cores) and are added to the running sums with float32 adds, rounded to nearest.

With one split a block finishes its own tokens (site_tl.finish_macro: the
mixes, exact's split); with more, it writes its 24 sums (f3 + f2 first, then
f1) and its sum of squares to a [splits, tokens, 32] float32 workspace for the
finish kernel, which adds them in split order and ends the same way.

No `from __future__ import annotations` here: tilelang reads the tensor annotations as objects.
"""

from typing import Any

from hccli.errors import HcError
from hccli.kernels import site_tl as S
from hccli.kernels.site_tl import DEFAULT_PROJ, FN_ROWS, PART_ROWS, WS_COLS, ProjTiling


def make_proj(dim: int, stream: str, collapse: bool, splits: int, tiling: ProjTiling = DEFAULT_PROJ,
              op: tuple | None = None) -> Any:
    """The projection kernel for hc 4, one dim, stream dtype and split count; token count symbolic.

    collapse: also write the collapse with the given pre mix (V4.1's delayed hand-off).
    op: (sinkhorn_iters, eps, norm_eps), with one split only: the block finishes its tokens.
    """
    hc = 4
    S.check_site(hc, dim, stream, tiling)
    import tilelang.language as T

    f32, bf16 = "float32", "bfloat16"
    BM, BD = tiling.block_tokens, tiling.dim_step(stream)
    KC = hc * BD  # columns of one step's tile: hc streams of BD features
    W = (2 + hc) * hc
    nd = dim // BD
    if nd % splits:
        raise HcError(f"dim {dim} ({nd} steps) does not split {splits} ways")
    if (op is not None) != (splits == 1):
        raise HcError("the projection finishes its tokens itself exactly when it has one split")
    steps = nd // splits
    is_f32 = stream == f32
    finish = S.finish_macro(hc, dim, *op) if op is not None else None
    tokens = T.dynamic("tokens")
    full_row = T.GemmWarpPolicy.FullRow

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
            if collapse:  # a Python bool: the collapse is in the traced loop or not at all
                hf[t, d] = T.cast(T.ieee_add(T.ieee_add(T.ieee_add(
                    T.ieee_mul(pm[t, 0], v0), T.ieee_mul(pm[t, 1], v1)), T.ieee_mul(pm[t, 2], v2)),
                    T.ieee_mul(pm[t, 3], v3)), stream)
        if collapse:
            T.copy(hf, collapsed[row0, d0])

    gemm = T.wgmma_gemm if tiling.async_mma else T.gemm

    @T.macro
    def products(xs: Any, fs: Any, part: Any) -> None:
        """This step's products, from zero, into part (async_mma: issued, not waited for)."""
        if is_f32:
            # x = x1 + x2 + x3 exactly in bfloat16 parts; nine products (the three smallest are below
            # float32's reach and harmless)
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
            gemm(h1, fs, part, transpose_B=True, clear_accum=True, policy=full_row)
            gemm(h2, fs, part, transpose_B=True, policy=full_row)
            gemm(h3, fs, part, transpose_B=True, policy=full_row)
        else:
            gemm(xs, fs, part, transpose_B=True, clear_accum=True, policy=full_row)

    @T.macro
    def body(x: Any, fnp: Any, pre_in: Any, ws: Any, collapsed: Any, scale_t: Any, base_t: Any, mixes_t: Any,
             pre_t: Any, post_t: Any, comb_t: Any) -> None:
        with T.Kernel(T.ceildiv(tokens, BM), splits, threads=tiling.threads) as (bx, ks):
            xs = T.alloc_shared((BM, KC), stream)
            fs = T.alloc_shared((FN_ROWS, KC), bf16)
            acc = T.alloc_fragment((BM, FN_ROWS), f32)
            part = T.alloc_fragment((BM, FN_ROWS), f32)
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
                products(xs, fs, part)
                if tiling.async_mma:
                    step_values(xs, sq, pm, collapsed, row0, d0)
                    T.wait_wgmma(0)
                    # keep nvcc from reading the accumulators before the wait
                    T.warpgroup_fence_operand(part, num_regs=BM * FN_ROWS // tiling.threads)
                for t, j in T.Parallel(BM, FN_ROWS):
                    acc[t, j] += part[t, j]
                if not tiling.async_mma:
                    step_values(xs, sq, pm, collapsed, row0, d0)
            sqs = T.alloc_fragment((BM,), f32)
            T.reduce_sum(sq, sqs, dim=1)
            accs = T.alloc_shared((BM, FN_ROWS), f32)
            sqsh = T.alloc_shared((BM,), f32)
            T.copy(acc, accs)
            T.copy(sqs, sqsh)
            if op is not None:
                tx = T.get_thread_binding()
                s = T.alloc_local((WS_COLS,), f32)
                if tx < BM:
                    if row0 + tx < tokens:
                        for j in T.unroll(PART_ROWS):
                            s[j] = accs[tx, j] + (accs[tx, PART_ROWS + j] + accs[tx, 2 * PART_ROWS + j])
                        s[PART_ROWS] = sqsh[tx]
                        finish(s, row0 + tx, scale_t, base_t, mixes_t, pre_t, post_t, comb_t)
            else:
                for t, j in T.Parallel(BM, WS_COLS):
                    if row0 + t < tokens:
                        if j < PART_ROWS:
                            ws[ks, row0 + t, j] = accs[t, j] + (accs[t, PART_ROWS + j] + accs[t, 2 * PART_ROWS + j])
                        elif j == PART_ROWS:
                            ws[ks, row0 + t, j] = sqsh[t]

    # one annotation object per parameter: tilelang makes one buffer of each (two parameters given
    # the same object would be one buffer, written under the last one's name)
    a_x = T.Tensor[(tokens, hc, dim), stream]
    a_fn = T.Tensor[(nd, FN_ROWS, KC), bf16]
    a_pm = T.Tensor[(tokens, hc), f32]
    a_ws = T.Tensor[(splits, tokens, WS_COLS), f32]
    a_col = T.Tensor[(tokens, dim), stream]
    a_sc, a_base = T.Tensor[(3,), f32], T.Tensor[(W,), f32]
    a_mix, a_comb = T.Tensor[(tokens, W), f32], T.Tensor[(tokens, hc, hc), f32]
    a_pre, a_post = T.Tensor[(tokens, hc), f32], T.Tensor[(tokens, hc), f32]

    if collapse and op is not None:
        @T.prim_func
        def site_pre_proj(x: a_x, fnp: a_fn, pre_in: a_pm, hc_scale: a_sc, hc_base: a_base, mixes: a_mix,
                          pre: a_pre, post: a_post, comb: a_comb, collapsed: a_col):
            body(x, fnp, pre_in, None, collapsed, hc_scale, hc_base, mixes, pre, post, comb)
    elif collapse:
        @T.prim_func
        def site_pre_proj(x: a_x, fnp: a_fn, pre_in: a_pm, ws: a_ws, collapsed: a_col):
            body(x, fnp, pre_in, ws, collapsed, None, None, None, None, None, None)
    elif op is not None:
        @T.prim_func
        def site_pre_proj(x: a_x, fnp: a_fn, hc_scale: a_sc, hc_base: a_base, mixes: a_mix, pre: a_pre,
                          post: a_post, comb: a_comb):
            body(x, fnp, None, None, None, hc_scale, hc_base, mixes, pre, post, comb)
    else:
        @T.prim_func
        def site_pre_proj(x: a_x, fnp: a_fn, ws: a_ws):
            body(x, fnp, None, ws, None, None, None, None, None, None, None)
    return site_pre_proj


MAKERS = {"proj": make_proj, "finish": S.make_finish, "collapse": S.make_collapse, "write": S.make_write}


def build_kernel(kind: str, *args: Any, target: Any = None) -> Any:
    """Lower and compile one site kernel (MAKERS[kind](*args)) for `target` (default sm_90), no GPU needed."""
    from hccli.kernels import tl_build

    iters, eps = (args[2], args[3]) if kind == "finish" else (0, 0.0)
    return tl_build.build(MAKERS[kind](*args), tl_build.pass_configs(), 4, iters, eps, target)
