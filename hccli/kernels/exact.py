"""The `exact` kernel: one token per thread, float32 results bit-identical to the block kernel.

Tested against the block kernel (`ref_program`, imported first below) with
`torch.equal`, and through it against the published reference kernel: the
published kernel's operations in its order (the affine step as one fused
multiply-add, the precise expf, sigmoid as 1 / (1 + expf(0 - x)), sums in the
order of its butterfly reduce, (x0 + x2) + (x1 + x3) for hc 4, and IEEE
quotients). Only the way a quotient is obtained changes. nvcc compiles `a / d`
(div.rn.f32, sm_90) to MUFU.RCP and 2 FFMA refining 1/d, 3 FFMA for the
quotient, and a range check (FCHK) that sends awkward operands to a slow path.
The refined reciprocal depends on d alone, so here it is computed once per row
or column and serves its hc elements with the same 3 FFMA each: nvcc's
fast-path instructions, hence the IEEE quotient wherever that path is exact.
For the Sinkhorn loop `shared_reciprocal_is_exact` proves from hc, iters and eps
alone that it is for every input; where it cannot (say hc 8 with 20 iterations)
the loop divides with `/`. The softmax rows check at run time that no dividend
is tiny (else `/`); the sigmoids use `/`. The arithmetic is
token_math.exact_token; the memory movement token_kernels.py's.
"""

from __future__ import annotations

from typing import Any

from hccli.kernels.block import hc_split_sinkhorn_block as ref_program  # noqa: F401 - what it is tested against
from hccli.kernels import token_launch
from hccli.kernels.token_kernels import EXACT_HC, shared_reciprocal_is_exact  # noqa: F401 - part of the kernel's story
from hccli.base.vocab import DEFAULT_HC_EPS, DEFAULT_HC_MULT, DEFAULT_SINKHORN_ITERS

NAME = "exact"
SUPPORTED_HC, check_supported, timing = token_launch.registered(NAME)


def hc_split_sinkhorn_exact(mixes: Any, hc_scale: Any, hc_base: Any, hc_mult: int = DEFAULT_HC_MULT,
                            sinkhorn_iters: int = DEFAULT_SINKHORN_ITERS, eps: float = DEFAULT_HC_EPS, *,
                            out: tuple[Any, Any, Any] | None = None) -> tuple[Any, Any, Any]:
    """The exact kernel on CUDA float32 mixes [..., (2+hc)*hc] -> (pre, post, comb), bit-identical to the
    block kernel's; `out` = (pre, post, comb) writes into given tensors (see token_launch.launch)."""
    return token_launch.launch(NAME, mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps, out)
