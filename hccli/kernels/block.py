"""The `block` kernel: the split-Sinkhorn op in tilelang, float32, one 64-thread block per token.

Tested against the torch reference (`ref_program`, imported first below) within
1e-6, and against the published reference kernel (DeepSeek-V4.1-Flash
inference/kernel.py 406-474) bit for bit: it reproduces that kernel's float32
results, so its shape is deliberately the published kernel's: one 64-thread
block per token, the token's mix row staged in shared memory, the hc x hc comb
matrix in a register fragment, and the row and column sums taken with
`T.reduce_sum`. The fragment layout that
tilelang infers for 64 threads decides the summation order ((x0+x2)+(x1+x3) for
hc = 4), so the thread count and the sequence of reduces and element-wise steps
must not change; `benchmarks/kernel_seed_check.py` holds us to that on a GPU.
The exact kernel (exact.py) is tested bit for bit against this one.

tilelang and torch are imported inside the functions only: `hc count-params`
and friends must not pay for them.
"""

from __future__ import annotations

from typing import Any

from hccli.kernels.torch_ref import hc_split_sinkhorn_torch as ref_program  # noqa: F401 - what it is tested against
from hccli.base.errors import HcError
from hccli.kernels import tl_build
from hccli.kernels.torch_ref import check_op_params
from hccli.base.vocab import DEFAULT_HC_EPS, DEFAULT_HC_MULT, DEFAULT_SINKHORN_ITERS, mix_width

# One block of 64 threads per token, as in the published kernel: the summation order
# of the reduces follows from this number (see the module docstring).
THREADS = 64

# tilelang's reduce is an XOR butterfly across the threads that share a row or a
# column, so hc must be a power of two (3, 5, 6 fail to lower); 16 is as far as the
# kernel is compiled and tested. The models use 4.
SUPPORTED_HC = (1, 2, 4, 8, 16)


def check_supported(hc_mult: int) -> None:
    if hc_mult not in SUPPORTED_HC:
        raise HcError(
            f"the block kernel supports hc_mult in {', '.join(map(str, SUPPORTED_HC))} "
            f"(its reduces need a power of two), got {hc_mult}: use the torch reference"
        )


def make_prim_func(hc_mult: int = DEFAULT_HC_MULT, sinkhorn_iters: int = DEFAULT_SINKHORN_ITERS,
                   eps: float = DEFAULT_HC_EPS) -> Any:
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


def build_kernel(hc_mult: int = DEFAULT_HC_MULT, sinkhorn_iters: int = DEFAULT_SINKHORN_ITERS,
                 eps: float = DEFAULT_HC_EPS, target: Any = None) -> tl_build.BuiltKernel:
    """Lower and compile the kernel for `target` (default sm_90) without running it (no GPU needed)."""
    return tl_build.build(make_prim_func(hc_mult, sinkhorn_iters, eps), tl_build.pass_configs(),
                          hc_mult, sinkhorn_iters, eps, target)


def compiled(hc_mult: int, sinkhorn_iters: int, eps: float) -> Any:
    """The kernel compiled for the visible GPU (built on first use and kept): the raw launch."""
    return tl_build.jit(make_prim_func, tl_build.pass_configs, (hc_mult, sinkhorn_iters, float(eps)))


def timing(hc_mult: int, sinkhorn_iters: int, eps: float, max_tokens: int) -> tuple[Any, Any]:
    """(prepare, launch) for hc bench: the compiled kernel itself, which takes any token count at once."""
    return tl_build.args_as_given, compiled(hc_mult, sinkhorn_iters, eps)


def hc_split_sinkhorn_block(mixes: Any, hc_scale: Any, hc_base: Any, hc_mult: int = DEFAULT_HC_MULT,
                            sinkhorn_iters: int = DEFAULT_SINKHORN_ITERS, eps: float = DEFAULT_HC_EPS, *,
                            out: tuple[Any, Any, Any] | None = None) -> tuple[Any, Any, Any]:
    """Run the kernel on CUDA float32 mixes [..., (2+hc)*hc] -> (pre, post, comb).

    Leading dims are flattened into tokens for the launch and restored on the
    outputs. `out` = (pre, post, comb) writes into given contiguous tensors of
    shapes [..., hc], [..., hc], [..., hc, hc] instead of allocating.
    """
    check_op_params(hc_mult, sinkhorn_iters, eps)
    check_supported(hc_mult)
    args, _ = tl_build.launch_checked("the block kernel", lambda: compiled(hc_mult, sinkhorn_iters, eps), _launch,
                                      mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps, out,
                                      flat_comb=False, align=False)
    return args.finish()


def _launch(kernel: Any, a: tl_build.LaunchArgs) -> None:
    kernel(a.flat, a.scale, a.base, *a.dest)
