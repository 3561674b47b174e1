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
