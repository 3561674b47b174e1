"""The hyper-connection tensors of a checkpoint: finding them by name, numbering
their layers, and reading their values (a few KB, at validated offsets).

Layers are numbered as in count-params: backbone `layers.L` is L, DSpark/MTP
stage `mtp.s` is n_layers + s, and the V4 family's root head mix comes last, as
n_layers + n_stages, named "head".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from hccli.checkpoint.header import TensorInfo
from hccli.checkpoint.shardset import Checkpoint, Shard
from hccli.checkpoint.values import read_tensor
from hccli.errors import HcError
from hccli.layers import format_ranges

HC_NAME = re.compile(r"^(?:(?P<owner>(?P<kind>layers|mtp)\.(?P<num>\d+))\.)?hc_(?P<site>attn|ffn|head)_(?P<part>fn|base|scale)$")
LAYER_NAME = re.compile(r"^layers\.(\d+)\.")
STAGE_NAME = re.compile(r"^mtp\.(\d+)\.")


@dataclass(frozen=True)
class HcSiteTensors:
    owner: str  # "layers.3", "mtp.0" or "" (root head mix)
    site: str
    layer: int
    name: str  # "layers.3", "mtp.0" or "head"
    is_stage: bool
    parts: dict[str, tuple[Shard, TensorInfo]]  # "fn" / "base" / "scale"

    def tensor_name(self, part: str) -> str:
        return f"{self.owner + '.' if self.owner else ''}hc_{self.site}_{part}"


def hc_from_mix_width(n: int) -> int | None:
    """The hc whose (2 + hc) * hc is n (a site's base length), or None when none is."""
    hc = int(round((n + 1) ** 0.5)) - 1
    return hc if hc >= 1 and (2 + hc) * hc == n else None


def layer_counts(ckpt: Checkpoint, names) -> tuple[int, int]:
    """(n_layers, n_stages): from the config when there is one, else from the names."""
    if ckpt.config is not None:
        return ckpt.config.n_layers, ckpt.config.n_stages
    layers = [int(m[1]) for n in names if (m := LAYER_NAME.match(n))]
    stages = [int(m[1]) for n in names if (m := STAGE_NAME.match(n))]
    return (max(layers) + 1 if layers else 0), (max(stages) + 1 if stages else 0)


def find_hc(ckpt: Checkpoint) -> list[HcSiteTensors]:
    tensors = ckpt.tensors()
    n_layers, n_stages = layer_counts(ckpt, tensors)
    groups: dict[tuple[str, str], dict] = {}
    for name, ref in tensors.items():
        if "hc_" not in name:  # cheap test first: 86 of 96,085 names in V4.1-Flash
            continue
        m = HC_NAME.match(name)
        if m:
            groups.setdefault((m["owner"] or "", m["site"]), {})[m["part"]] = ref
    out = []
    for (owner, site), parts in groups.items():
        if owner.startswith("layers."):
            layer, label, stage = int(owner.split(".")[1]), owner, False
        elif owner.startswith("mtp."):
            layer, label, stage = n_layers + int(owner.split(".")[1]), owner, True
        else:
            layer, label, stage = n_layers + n_stages, "head", False
        out.append(HcSiteTensors(owner, site, layer, label, stage, parts))
    order = {"attn": 0, "ffn": 1, "head": 2}
    out.sort(key=lambda s: (s.layer, order[s.site]))
    return out


def read_part(ckpt: Checkpoint, site: HcSiteTensors, part: str) -> np.ndarray:
    if part not in site.parts:
        raise HcError(f"{ckpt.label}: tensor '{site.tensor_name(part)}' is not in the checkpoint")
    shard, info = site.parts[part]
    if info.dtype != "F32":
        raise HcError(f"{shard.path}: tensor '{info.name}' is {info.dtype}; expected F32")
    with ckpt.source(shard) as src:
        return np.array(read_tensor(src, shard.header, info.name), dtype=np.float32)


def read_base_scale(ckpt: Checkpoint, site: HcSiteTensors) -> tuple[np.ndarray, np.ndarray]:
    """A site's base and scale values; one read when they lie side by side in one shard,
    as releases write them (a round trip saved per site over HTTP)."""
    (bs, b), (ss, s) = site.parts["base"], site.parts["scale"]
    if bs is ss and b.dtype == s.dtype == "F32" and b.end == s.begin:
        with ckpt.source(bs) as src:
            raw = src.read(b.abs_begin, b.nbytes + s.nbytes)
        both = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        return both[: b.nbytes // 4].reshape(b.shape), both[b.nbytes // 4:].reshape(s.shape)
    return read_part(ckpt, site, "base"), read_part(ckpt, site, "scale")


def select_site(ckpt: Checkpoint, layer: int, site: str) -> HcSiteTensors:
    sites = find_hc(ckpt)
    for s in sites:
        if s.layer == layer and s.site == site:
            return s
    have = sorted({s.layer for s in sites if s.site == site})
    shown = format_ranges(have) if have else "none"
    raise HcError(f"{ckpt.label}: no hc_{site}_* tensors for layer {layer}; this checkpoint has {site} sites "
                  f"at layers {shown}")
