"""The site's projection kernel (tilelang PrimFunc): rms statistic, projection, and the delayed collapse.

Per block, `block_tokens` tokens and a 1/splits share of the `dim` axis; per step,
all hc streams of `block_dim` features of x into shared memory, the projection on
the tensor cores (wgmma), and, from the same tile, each token's sum of squares and
(V4.1's delayed hand-off, where the pre mix is an input) the collapse of those
features, written at once.

The stages are kept by hand: x and fn each in a ring of tiles (ProjTiling.x_stages,
fn_stages), each tile filled by TMA on its own mbarrier, step k + stages - 1 loaded at
step k. At 8,192 tokens (one wave of 64-token blocks) the fn tiles from L2 and the x
tiles from memory arrive late with one step's warning and in time with two, so three
stages of each (benchmarks/NOTES.md, run 16). With
bfloat16 streams the step's wgmma runs while the same tile's element work is done
from registers.

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

from hccli.base.errors import HcError
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
    XS, FS = tiling.x_stages, tiling.fn_stages
    if min(XS, FS) < 2:
        raise HcError("the projection needs at least two stages of x and of fn (one filled while one is read)")
    is_f32 = stream == f32
    finish = S.finish_macro(hc, dim, *op) if op is not None else None
    tokens = T.dynamic("tokens")
    full_row = T.GemmWarpPolicy.FullRow

    @T.macro
    def load_x(x: Any, xs: Any, xbar: Any, row0: Any, st: Any, step: Any) -> None:
        """Step `step`'s x tile into stage st by TMA: one box per stream (zeros past the last token)."""
        for i in T.unroll(hc):
            if is_f32:  # each stream's tile on its own: a float32 box of 64-byte rows lands whole
                T.tma_copy(x[row0:row0 + BM, i, step * BD:(step + 1) * BD], xs[st, i, :, :], barrier=xbar[st])
            else:  # the streams side by side, as the products' A operand
                T.tma_copy(x[row0:row0 + BM, i, step * BD:(step + 1) * BD], xs[st, :, i * BD:(i + 1) * BD],
                           barrier=xbar[st])
        T.barrier_arrive(xbar[st])  # tma_copy adds the bytes to wait for; the phase also needs the arrivals

    @T.macro
    def load_fn(fnp: Any, fs: Any, fbar: Any, st: Any, step: Any) -> None:
        T.tma_copy(fnp[step, 0:FN_ROWS, 0:KC], fs[st, :, :], barrier=fbar[st])
        T.barrier_arrive(fbar[st])

    @T.macro
    def step_values(xf: Any, sq: Any, pm: Any, collapsed: Any, row0: Any, d0: Any) -> None:
        """Each token's sum of squares and (collapse) its collapsed features, from the tile's fragments."""
        x0, x1, x2, x3 = xf  # unpacked: a macro traces its loops, and a tuple takes no traced index
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

    @T.macro
    def step(xs: Any, fs: Any, sx: Any, sf: Any, acc: Any, part: Any, sq: Any, pm: Any, collapsed: Any,
             row0: Any, d0: Any) -> None:
        """One step from stages sx (x) and sf (fn): the products, from zero, added to acc; the element work."""
        xf = (T.alloc_fragment((BM, BD), stream), T.alloc_fragment((BM, BD), stream),
              T.alloc_fragment((BM, BD), stream), T.alloc_fragment((BM, BD), stream))
        if is_f32:
            # x = x1 + x2 + x3 exactly in bfloat16 parts; nine products (the three smallest are below
            # float32's reach and harmless)
            T.copy(xs[sx, 0, :, :], xf[0])
            T.copy(xs[sx, 1, :, :], xf[1])
            T.copy(xs[sx, 2, :, :], xf[2])
            T.copy(xs[sx, 3, :, :], xf[3])
            h1 = T.alloc_shared((BM, KC), bf16)
            h2 = T.alloc_shared((BM, KC), bf16)
            h3 = T.alloc_shared((BM, KC), bf16)
            for t, c in T.Parallel(BM, KC):
                v = xs[sx, c // BD, t, c % BD]
                a = T.cast(v, bf16)
                r = v - T.cast(a, f32)
                b = T.cast(r, bf16)
                h1[t, c] = a
                h2[t, c] = b
                h3[t, c] = T.cast(r - T.cast(b, f32), bf16)
            T.gemm(h1, fs[sf, :, :], part, transpose_B=True, clear_accum=True, policy=full_row)
            T.gemm(h2, fs[sf, :, :], part, transpose_B=True, policy=full_row)
            T.gemm(h3, fs[sf, :, :], part, transpose_B=True, policy=full_row)
            step_values(xf, sq, pm, collapsed, row0, d0)
        else:
            # the tile into registers, the products issued, the element work while the tensor cores run
            T.copy(xs[sx, :, 0:BD], xf[0])
            T.copy(xs[sx, :, BD:2 * BD], xf[1])
            T.copy(xs[sx, :, 2 * BD:3 * BD], xf[2])
            T.copy(xs[sx, :, 3 * BD:4 * BD], xf[3])
            T.wgmma_gemm(xs[sx, :, :], fs[sf, :, :], part, transpose_B=True, clear_accum=True, policy=full_row)
            step_values(xf, sq, pm, collapsed, row0, d0)
            T.wait_wgmma(0)
            # keep nvcc from reading the accumulators before the wait
            T.warpgroup_fence_operand(part, num_regs=BM * FN_ROWS // tiling.threads)
        for t, j in T.Parallel(BM, FN_ROWS):
            acc[t, j] += part[t, j]

    @T.macro
    def body(x: Any, fnp: Any, pre_in: Any, ws: Any, collapsed: Any, scale_t: Any, base_t: Any, mixes_t: Any,
             pre_t: Any, post_t: Any, comb_t: Any) -> None:
        with T.Kernel(T.ceildiv(tokens, BM), splits, threads=tiling.threads) as (bx, ks):
            if is_f32:
                xs = T.alloc_shared((XS, hc, BM, BD), stream)
            else:
                xs = T.alloc_shared((XS, BM, KC), stream)
            fs = T.alloc_shared((FS, FN_ROWS, KC), bf16)
            xbar = T.alloc_barrier([tiling.threads] * XS)
            fbar = T.alloc_barrier([tiling.threads] * FS)
            acc = T.alloc_fragment((BM, FN_ROWS), f32)
            part = T.alloc_fragment((BM, FN_ROWS), f32)
            sq = T.alloc_fragment((BM, BD), f32)
            pm = T.alloc_shared((BM, hc), f32)
            row0 = bx * BM
            first = ks * steps
            T.clear(acc)
            T.clear(sq)
            if collapse:
                T.copy(pre_in[row0, 0], pm)
            for j in T.unroll(min(XS - 1, steps)):
                load_x(x, xs, xbar, row0, j, first + j)
            for j in T.unroll(min(FS - 1, steps)):
                load_fn(fnp, fs, fbar, j, first + j)
            for kd in T.serial(steps):
                T.sync_threads()  # every thread is done with step kd - 1, whose stages are refilled now
                if kd + XS - 1 < steps:
                    load_x(x, xs, xbar, row0, (kd + XS - 1) % XS, first + kd + XS - 1)
                if kd + FS - 1 < steps:
                    load_fn(fnp, fs, fbar, (kd + FS - 1) % FS, first + kd + FS - 1)
                T.mbarrier_wait_parity(xbar[kd % XS], (kd // XS) % 2)
                T.mbarrier_wait_parity(fbar[kd % FS], (kd // FS) % 2)
                step(xs, fs, kd % XS, kd % FS, acc, part, sq, pm, collapsed, row0, (first + kd) * BD)
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
