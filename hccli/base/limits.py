"""Bounds on what the kernel commands will build, checked before anything is allocated.

They keep any input under 100 MB within about 1 GB of memory and 10 s on a CPU
(the torch reference, the JSON output), and say which bound a refused input met.
"""

from __future__ import annotations

from hccli.base.errors import HcError
from hccli.base.vocab import MAX_HC_MULT, MAX_SINKHORN_ITERS  # noqa: F401 - re-exported with the kernel bounds

# A real model's hc_mult is 4; the op is defined for any positive hc, and the
# torch reference runs it, but an hc of 10^9 would ask for a 954 GiB base.
# The bounds on hc_mult and the iterations are the vocabulary's, shared with configs and headers.

# Values in one array hc builds or reads: mixes (tokens x (2+hc)*hc), a hidden
# state (tokens x hc x dim), an hc_fn ((2+hc)*hc x hc*dim). 4M float32 values are
# 16 MB; the torch reference's temporaries and --json's text stay well under 1 GB.
MAX_ELEMENTS = 1 << 22


# `hc bench --op site-*`: the streams of one token count (x, or f and residual), in bytes; with the
# float64 oracle (4x for bfloat16) and the eager chain's float32 temporaries a run stays < 80 GB.
MAX_SITE_BENCH_BYTES = 8 << 30

# `hc bench` (the split op). Timed samples and untimed calls per point, and token counts a run:
# the defaults are 15, 3 and 6; a median over 1,000 samples is as steady as timing gets, and the
# first warm-up call is the one that builds the kernels.
MAX_BENCH_REPS = 1000
MAX_BENCH_WARMUP = 100
MAX_BENCH_POINTS = 32
# What one token count holds at once (bench.peak_bytes: the rotated input sets, the reference's
# temporaries and the float64 comparison), estimated before anything is built. On a GPU the
# default's 16M tokens at hc 4 take about 27 GiB of an H200's 141; on the CPU the bound keeps a
# run well inside a small machine's memory.
MAX_BENCH_BYTES = 32 << 30
MAX_CPU_BENCH_BYTES = 4 << 30
# The torch reference's work in a run (bench.work: tokens x hc^2 x iterations, summed over every
# call): on the CPU about a minute of a two-core machine, which reaches 1M tokens at the
# defaults; on a GPU about seventy times the default run's.
MAX_CPU_BENCH_WORK = 1 << 33
MAX_GPU_BENCH_WORK = 1 << 45

# JSON mixes: bytes read whole, and characters in one number (nesting: bounded.MAX_JSON_DEPTH).
MAX_JSON_BYTES = 8 << 20
MAX_JSON_DIGITS = 64


def check_hc_mult(hc_mult: int, origin: str) -> int:
    """hc_mult within 1..MAX_HC_MULT, or a one-line HcError saying where it came from and the bound."""
    if isinstance(hc_mult, bool) or not isinstance(hc_mult, int) or not 1 <= hc_mult <= MAX_HC_MULT:
        raise HcError(f"hc_mult {hc_mult!r} from {origin}: expected 1 to {MAX_HC_MULT} "
                      f"(a real model's is 4; {MAX_HC_MULT} is the most hc runs the op for)")
    return hc_mult


def check_count(what: str, count: int, limit: int = MAX_ELEMENTS) -> int:
    """An element count within `limit`, or a one-line HcError naming what it counts and the bound."""
    if count > limit:
        raise HcError(f"{what}: {count:,} values; hc builds at most {limit:,} (limits.MAX_ELEMENTS)")
    return count
