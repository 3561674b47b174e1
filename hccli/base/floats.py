"""float32 values rounded to the narrower formats a port computes in: bf16, tf32, f16.

Each function takes float32 values and returns float32 values that the narrower
format represents exactly, so that the arithmetic after it stays float32 (as on
hardware that widens its operands). numpy only.

    bf16   8 bits of mantissa, float32's range; round to nearest, ties to even (torch's
           .to(torch.bfloat16), llama.cpp's ggml_fp32_to_bf16)
    tf32   10 bits of mantissa, float32's range; DeepSeek TileKernels' round_to_tf32 adds
           half a unit (0x1000) to the bits and the tensor core drops the low 13: to nearest,
           ties away from zero
    f16    numpy's float16: 10 bits, subnormals below 2^-14, infinity above 65504
"""

from __future__ import annotations

import numpy as np

FORMATS = ("f32", "tf32", "bf16", "f16")


def _drop_bits(x: np.ndarray, drop: int, ties_even: bool) -> np.ndarray:
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    half = np.uint32(1 << (drop - 1))
    add = (half - np.uint32(1) + ((u >> np.uint32(drop)) & np.uint32(1))) if ties_even else half
    # no finite value carries past the top bit (0xFF7FFFFF + half < 2^32); NaN and infinity stay as they are
    kept = (u + add) & np.uint32(0xFFFFFFFF & ~((1 << drop) - 1))
    special = (u & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    return np.where(special, u, kept).view(np.float32)


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> the nearest bf16 value (ties to even), as float32."""
    return _drop_bits(x, 16, ties_even=True)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """The uint16 bit patterns of to_bf16(x): what a BF16 tensor stores (a NaN stays a NaN, quiet)."""
    y = to_bf16(x)
    bits = (y.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    return np.where(np.isnan(y), bits | np.uint16(0x0040), bits)


def to_tf32(x: np.ndarray) -> np.ndarray:
    """float32 -> tf32 as TileKernels rounds fn for the tensor cores, as float32."""
    return _drop_bits(x, 13, ties_even=False)


def to_f16(x: np.ndarray) -> np.ndarray:
    """float32 -> numpy float16 (to nearest even, with f16's subnormals and range), as float32."""
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


def round_to(x: np.ndarray, fmt: str) -> np.ndarray:
    """x as float32 values of format fmt (f32: unchanged)."""
    if fmt == "f32":
        return np.asarray(x, dtype=np.float32)
    return {"bf16": to_bf16, "tf32": to_tf32, "f16": to_f16}[fmt](x)
