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

Every function answers (logical input width or None, the problem or None); nothing reads values.
"""

from __future__ import annotations

from math import prod

from hccli.model.config.quant import CtGroup, MlxQuant

Sig = tuple[str, tuple[int, ...]]  # (dtype, shape) of a stored tensor
MX_MODES = {(4, 16): "nvfp4", (4, 32): "mxfp4", (8, 32): "mxfp8"}  # infer_quant_config's uint8-scale pairs
_FLOAT = ("F32", "F16", "BF16")


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
