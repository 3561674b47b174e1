"""The `fast` kernel: one token per thread, within 1e-6 of the torch reference and the block kernel.

Tested against the torch reference (`ref_program`, imported first below) and
the block kernel, max abs difference within 1e-6. It gives up bit-identity for
speed: approximate exp and reciprocal (MUFU ex2/rcp, subnormals flushed), and the
Sinkhorn loop on the scalings instead of the matrix (token_math.fast_token); the
memory movement is token_kernels.py's.
"""

from __future__ import annotations

from typing import Any

from hccli.kernels.torch_ref import hc_split_sinkhorn_torch as ref_program  # noqa: F401 - what it is tested against
from hccli.kernels import token_launch
from hccli.base.vocab import DEFAULT_HC_EPS, DEFAULT_HC_MULT, DEFAULT_SINKHORN_ITERS

NAME = "fast"
SUPPORTED_HC, check_supported, timing = token_launch.registered(NAME)


def hc_split_sinkhorn_fast(mixes: Any, hc_scale: Any, hc_base: Any, hc_mult: int = DEFAULT_HC_MULT,
                           sinkhorn_iters: int = DEFAULT_SINKHORN_ITERS, eps: float = DEFAULT_HC_EPS, *,
                           out: tuple[Any, Any, Any] | None = None) -> tuple[Any, Any, Any]:
    """The fast kernel on CUDA float32 mixes [..., (2+hc)*hc] -> (pre, post, comb), within 1e-6 of the
    reference; `out` = (pre, post, comb) writes into given tensors (see token_launch.launch)."""
    return token_launch.launch(NAME, mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps, out)
