"""How a quantising producer packs one weight, and the logical width its stored shapes imply.

mlx-lm (`mlx.core.quantize` through `nn.quantize`; `mlx_lm/utils.py` `infer_quant_config`): a
weight [..., o, i] packed to `bits` a value, one scale per `group_size` values, is stored as
`.weight` uint32 [..., o, i*bits/32] and `.scales` [..., o, i/group_size]: uint8 exponents in
the mxfp4, mxfp8 and nvfp4 modes (each allows one (bits, group_size) pair), the weight's float
type in affine mode, which alone adds `.biases` shaped as the scales. A module the config's
`quantization` block names is read with that entry; any other with what its shapes imply.

compressed-tensors (`compressors/*/base.py`): pack-quantized `weight_packed` int32
[o, ceil(i*bits/32)] (`pack_to_int32`); nvfp4/mxfp4 `weight_packed` uint8 [o, i/2];
int-/float-quantized `weight` [o, i] in the narrow type; `weight_scale` [o, ceil(i/group_size)]
(strategy group), [o, 1] (channel) or [1] (tensor).

The release (model/inventory.py's fp4()): an fp4 linear of [o, i] values is an I8 `.weight`
[o, i/2], two E2M1 values a byte, beside an F8_E8M0 `.scale` [o, i/32], one scale a block of 32
values; config.json's bounds hold an fp4 width to whole blocks. safetensors has no 4-bit dtype: I8
says one element a byte, and only the scale beside it says the byte holds two values.

The packing functions answer (logical input width or None, the problem or None); nothing reads values.
"""

from __future__ import annotations

from functools import lru_cache
from math import ceil, prod
from typing import Callable

from hccli.model.config.quant import CtGroup, MlxQuant

Sig = tuple[str, tuple[int, ...]]  # (dtype, shape) of a stored tensor
MX_MODES = {(4, 16): "nvfp4", (4, 32): "mxfp4", (8, 32): "mxfp8"}  # infer_quant_config's uint8-scale pairs
_FLOAT = ("F32", "F16", "BF16")


FP4_PER_BYTE = 2  # E2M1 values in one I8 byte of a release's fp4 weight
FP4_BLOCK = 32  # fp4 values one F8_E8M0 scale covers


def fp4_shapes(o: int, i: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(weight, scale) shapes of an fp4 linear of [o, i] values as the release stores it."""
    return (o, i // FP4_PER_BYTE), (o, ceil(i / FP4_BLOCK))


@lru_cache(maxsize=4096)  # called per I8 weight of a 100k-tensor header, which holds a few shapes
def fp4_scale_shape(weight: tuple[int, ...]) -> tuple[int, int] | None:
    """The F8_E8M0 `.scale` shape that makes an I8 `.weight` of this shape packed fp4, or None
    where none does: not [o, i/2], or i not whole blocks (a scale of [o, c // 16] beside a width
    that is no multiple of 16 bytes covers fewer values than the bytes hold: no fp4 layout)."""
    if len(weight) != 2 or (weight[1] * FP4_PER_BYTE) % FP4_BLOCK:
        return None
    return weight[0], weight[1] * FP4_PER_BYTE // FP4_BLOCK  # fp4_shapes' scale, whole blocks


def release_params(name: str, dtype: str, shape: tuple[int, ...], elements: int,
                   sig_of: Callable[[str], Sig | None]) -> int:
    """Logical parameters of one stored tensor of a release layout, from headers alone: an F8_E8M0
    scale counts 0; an I8 `X.weight` whose `X.scale` (sig_of: stored name -> (dtype, shape), None
    where absent) is F8_E8M0 of `fp4_scale_shape` counts FP4_PER_BYTE a byte; any other tensor its
    elements. The inventory's TensorSpec.logical_params and inspect's column totals are this rule."""
    if dtype == "F8_E8M0":
        return 0  # quantisation scales are not parameters
    if dtype == "I8" and name.endswith(".weight"):
        want = fp4_scale_shape(shape)
        if want is not None and sig_of(name[:-7] + ".scale") == ("F8_E8M0", want):
            return elements * FP4_PER_BYTE
    return elements


def _shown(sig: Sig) -> str:
    return f"{sig[0]} {list(sig[1])}"


def mlx_packing(weight: Sig, scales: Sig, biases: Sig | None, in_dims: int | None,
                entry: MlxQuant | None, named: bool) -> tuple[int | None, MlxQuant | None, str | None]:
    """(input width, packing, problem) of one mlx-lm quantised module. in_dims: the logical width
    the config implies (None: from the shapes and `entry` alone); named: `entry` is the module's
    own in the block (then it must agree), else a fallback for affine scales without in_dims."""
    (wd, ws), (sd, ss) = weight, scales
    if wd != "U32" or not ws:
        return None, None, f"is {_shown(weight)}; mlx-lm stores a quantised weight as U32 words"
    if len(ss) != len(ws) or ss[:-1] != ws[:-1] or not ss[-1]:
        lead = ", ".join(map(str, ws[:-1]))
        return None, None, f"has scales {_shown(scales)} beside weight {_shown(weight)}; expected [{lead}, groups]"
    words, groups = ws[-1], ss[-1]
    if in_dims is None:
        if entry is not None and (named or sd != "U8"):
            in_dims = groups * entry.group_size
        elif sd == "U8":
            pair = next(((b, g) for (b, g) in MX_MODES if words * 32 == groups * g * b), None)
            if pair is None:
                return None, None, f"has weight {_shown(weight)} and U8 scales {_shown(scales)}: no mlx mode packs so"
            in_dims = groups * pair[1]
        else:
            return None, None, "is affine-quantised and config.json's `quantization` block gives no bits for it"
    if in_dims % groups or (words * 32) % in_dims:
        return in_dims, None, f"holds {words} U32 words and {groups} scales a row, which pack no whole number " \
                              f"of bits and groups of {in_dims} values"
    bits, group = words * 32 // in_dims, in_dims // groups
    mode = MX_MODES.get((bits, group)) if sd == "U8" else "affine" if sd in _FLOAT else None
    if mode is None:
        return in_dims, None, f"packs {bits} bits in groups of {group} with {sd} scales, which no mlx mode does"
    got = MlxQuant(bits, group, mode)
    if named and entry is not None and entry != got:
        return in_dims, got, (f"is packed as {bits} bits / groups of {group} ({mode}); config.json's `quantization` "
                              f"entry says {entry.bits} / {entry.group_size} ({entry.mode})")
    if (mode == "affine") != (biases is not None):
        return in_dims, got, ("is affine-quantised without its .biases" if biases is None else
                              f"has .biases, which the {mode} mode has none of")
    if biases is not None and biases[1] != ss:
        return in_dims, got, f"has biases {_shown(biases)}; expected the scales' shape {list(ss)}"
    return in_dims, got, None


def ct_packing(weight: Sig, packed: bool, scales: Sig | None, in_dims: int | None, groups: tuple[CtGroup, ...]
               ) -> tuple[int | None, str | None]:
    """(input width, problem) of one compressed-tensors module. packed: its weight is the
    compressor's `weight_packed` (else a `weight` in the narrow type, int-/float-quantized)."""
    wd, ws = weight
    if not ws:
        return None, f"is {_shown(weight)}; expected [out, in] or [experts, out, in]"
    if not packed:
        width = ws[-1]
    elif wd == "U8":  # nvfp4 / mxfp4: two values a byte
        width = 2 * ws[-1]
    elif wd == "I32":
        bits = sorted({g.num_bits for g in groups if g.format in ("pack-quantized", "")}) or \
            sorted({g.num_bits for g in groups})
        if not bits:
            return None, "is pack-quantized, and config.json's quantization_config has no config group with weights"
        if in_dims is not None:
            if not any(ws[-1] == -(-in_dims * b // 32) for b in bits):
                return in_dims, (f"holds {ws[-1]} int32 words a row; {in_dims} values of "
                                 + " or ".join(map(str, bits)) + " bits (config.json's config groups) take "
                                 + " or ".join(str(-(-in_dims * b // 32)) for b in bits))
            width = in_dims
        elif len(bits) == 1:
            width = ws[-1] * 32 // bits[0]
        else:
            return None, None
    else:
        return None, f"is {_shown(weight)}; compressed-tensors packs into I32 or U8"
    if in_dims is not None and width != in_dims:
        return width, f"holds {width} values a row; the config implies {in_dims}"
    if scales is not None and not _scale_fits(scales[1], ws, width, groups):
        return width, f"has weight_scale {_shown(scales)}, which no config group's strategy gives for " \
                      f"{list(ws[:-1]) + [width]}"
    return width, None


def _scale_fits(ss: tuple[int, ...], ws: tuple[int, ...], width: int, groups: tuple[CtGroup, ...]) -> bool:
    lead = tuple(ws[:-1])
    forms = {(1,), ()}
    for g in groups:
        if g.strategy == "channel":
            forms.add((*lead, 1))
        elif g.group_size:
            forms.add((*lead, -(-width // g.group_size)))
    return tuple(ss) in forms or not groups


def logical_elements(shape: tuple[int, ...], width: int) -> int:
    """The logical values of a packed weight of stored `shape` whose rows hold `width` values."""
    return prod(shape[:-1]) * width
