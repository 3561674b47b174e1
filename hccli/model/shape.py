"""What makes two descriptions of a checkpoint the same model: family, backbone layers, stages,
hc_mult and dim. `hc diff` holds its two sides to them (different models: one error), and
`--verify` holds a checkpoint to its config (one config_mismatch finding that says both sides,
the per-tensor findings it causes grouped under it): one comparison for both. A figure a side
does not know is None and is not compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from hccli.base.vocab import BACKBONE, HcName, hc_from_mix_width


@dataclass(frozen=True)
class ModelShape:
    hc_mult: int | None
    n_layers: int | None
    dim: int | None
    source: str  # where the figures came from: "config", "GGUF metadata", "tensor shapes"
    family: str | None = None  # "v4" (a head mix) | "v4.1" (none)
    n_stages: int | None = None  # DSpark/MTP stages, where the side's layout can hold them


@dataclass(frozen=True, slots=True)
class Difference:
    what: str  # "family", "layers", "stages", "hc_mult", "dim"
    a: Any
    b: Any


# (field, the word for it), in the order a difference is said
_FIGURES = (("family", "family"), ("hc_mult", "hc_mult"), ("n_layers", "layers"), ("n_stages", "stages"),
            ("dim", "dim"))
_FAMILY = {"v4": "V4 (a head mix)", "v4.1": "V4.1 (no head mix)"}


def differences(a: ModelShape, b: ModelShape) -> list[Difference]:
    """Each figure both sides know and that differs."""
    out = []
    for key, what in _FIGURES:
        va, vb = getattr(a, key), getattr(b, key)
        if va is not None and vb is not None and va != vb:
            out.append(Difference(what, va, vb))
    return out


def said(d: Difference, a: str, b: str) -> str:
    """One difference in words, side a's first: "the config has 61 layers, the checkpoint 40"."""
    if d.what == "family":
        return f"{a} is {_FAMILY.get(d.a, d.a)}, {b} {_FAMILY.get(d.b, d.b)}"
    if d.what in ("layers", "stages"):
        one = d.what[:-1] if d.a == 1 else d.what
        return f"{a} has {d.a:,} {one}, {b} {d.b:,}"
    return f"{a} has {d.what} {d.a:,}, {b} {d.b:,}"


def from_hc_shapes(tensors: Iterable[tuple[HcName, tuple[int, ...]]]) -> ModelShape:
    """hc_mult and dim from the first attn/ffn site's fn ([(2+hc)*hc, hc*dim]), layers from the
    highest backbone HC layer: a checkpoint's own figures, without a config."""
    fn = None
    layers = -1
    for hc, shape in tensors:
        if hc.kind == BACKBONE:
            layers = max(layers, hc.num)
        if fn is None and hc.part == "fn" and hc.site != "head" and len(shape) == 2:
            fn = shape
    hc_mult = hc_from_mix_width(fn[0]) if fn else None
    dim = fn[1] // hc_mult if fn and hc_mult and fn[1] % hc_mult == 0 else None
    return ModelShape(hc_mult, layers + 1 if layers >= 0 else None, dim, "tensor shapes")
