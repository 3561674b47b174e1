"""What `hc bench` is asked: the split op's run and the site ops' run, each one frozen value that the
command builds from its options and the bench core reads (the site's host timing among it)."""

from __future__ import annotations

from dataclasses import dataclass

from hccli.base.vocab import DEFAULT_HC_EPS, DEFAULT_HC_MULT, DEFAULT_NORM_EPS, DEFAULT_SINKHORN_ITERS


@dataclass(frozen=True)
class BenchRequest:
    """The split op's bench: tokens None, the device's default counts; impls None, every timed one;
    device None, the first CUDA device; host: the host side of one eager call too."""

    tokens: tuple[int, ...] | None = None
    impls: tuple[str, ...] | None = None
    hc_mult: int = DEFAULT_HC_MULT
    sinkhorn_iters: int = DEFAULT_SINKHORN_ITERS
    eps: float = DEFAULT_HC_EPS
    device: str | None = None
    reps: int = 15
    warmup: int = 3
    seed: int = 0
    host: bool = False


@dataclass(frozen=True)
class SiteBenchRequest:
    """The site ops' bench (op site-pre, site-write or site-chain, hc 4): tokens and impls None, the
    defaults; stream the streams' dtype by torch's name; peers the folder of the serving engines'
    kernel files (bench/peers.py; None: TileKernels only, where it imports)."""

    op: str
    tokens: tuple[int, ...] | None = None
    impls: tuple[str, ...] | None = None
    dim: int = 5120
    stream: str = "bfloat16"
    sinkhorn_iters: int = DEFAULT_SINKHORN_ITERS
    eps: float = DEFAULT_HC_EPS
    norm_eps: float = DEFAULT_NORM_EPS
    reps: int = 15
    warmup: int = 3
    seed: int = 0
    host: bool = False
    device: str | None = None
    peers: str | None = None
