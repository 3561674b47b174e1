"""The hyper-connection tensors of a checkpoint: finding them by name, numbering
their layers, and reading their values (a few KB, at validated offsets).

Layers are numbered as in count-params: backbone `layers.L` is L, DSpark/MTP
stage `mtp.s` is n_layers + s, and the V4 family's root head mix comes last, as
n_layers + n_stages, named "head". Names are vocab's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hccli.checkpoint.header import TensorInfo
from hccli.checkpoint.shardset import Checkpoint, Shard
from hccli.checkpoint.values import iter_tensor_chunks, read_tensor
from hccli.errors import HcError
from hccli.layers import format_ranges
from hccli.vocab import (
    BACKBONE,
    MAX_HC_MULT,
    SITE_ORDER,
    STAGE,
    hc_from_mix_width,  # noqa: F401 - kernels/run.py imports it from here until it moves to vocab
    HcName,
    hc_tensor_name,
    mix_width,
    owner_of,
    parse_hc_name,
)


# The most bytes a site's base (or scale) can have: (2 + hc) * hc F32 values at the bound.
# Checked before a byte is read: a header may claim gigabytes.
MAX_MIX_BYTES = 4 * mix_width(MAX_HC_MULT)


@dataclass(frozen=True)
class HcSiteTensors:
    owner: str  # "layers.3", "mtp.0" or "" (root head mix)
    site: str
    layer: int
    name: str  # "layers.3", "mtp.0" or "head"
    is_stage: bool
    parts: dict[str, tuple[Shard, TensorInfo]]  # "fn" / "base" / "scale"

    def tensor_name(self, part: str) -> str:
        return hc_tensor_name(self.owner, self.site, part)


def layer_counts(ckpt: Checkpoint, names) -> tuple[int, int]:
    """(n_layers, n_stages): from the config when there is one, else from the names."""
    if ckpt.config is not None:
        return ckpt.config.n_layers, ckpt.config.n_stages
    most = {BACKBONE: -1, STAGE: -1}
    for n in names:
        owner = owner_of(n)
        if owner is not None and owner[1] > most[owner[0]]:
            most[owner[0]] = owner[1]
    return most[BACKBONE] + 1, most[STAGE] + 1


def find_hc(ckpt: Checkpoint) -> list[HcSiteTensors]:
    tensors = ckpt.tensors()
    n_layers, n_stages = layer_counts(ckpt, tensors)
    groups: dict[tuple[str, str], dict] = {}
    owners: dict[str, HcName] = {}
    for name, ref in tensors.items():
        hn = parse_hc_name(name)
        if hn is not None:
            groups.setdefault((hn.owner, hn.site), {})[hn.part] = ref
            owners[hn.owner] = hn
    out = []
    for (owner, site), parts in groups.items():
        hn = owners[owner]
        label = owner or "head"
        out.append(HcSiteTensors(owner, site, hn.layer(n_layers, n_stages), label, hn.is_stage, parts))
    out.sort(key=lambda s: (s.layer, SITE_ORDER[s.site]))
    return out


def site_hc(site: HcSiteTensors) -> int | None:
    """The number of streams a site's header shapes imply (its base and scale), or None
    when they imply none within MAX_HC_MULT: such a site is a shape finding, and no value
    of it is read (a hostile header may claim gigabytes)."""
    if "base" not in site.parts or "scale" not in site.parts:
        return None
    base, scale = site.parts["base"][1].shape, site.parts["scale"][1].shape
    if len(base) != 1:
        return None
    if site.site == "head":
        hc = base[0] if scale == (1,) else None
    else:
        hc = hc_from_mix_width(base[0]) if scale == (3,) else None
    return hc if hc is not None and 1 <= hc <= MAX_HC_MULT else None


def read_part(ckpt: Checkpoint, site: HcSiteTensors, part: str) -> np.ndarray:
    if part not in site.parts:
        raise HcError(f"{ckpt.label}: tensor '{site.tensor_name(part)}' is not in the checkpoint")
    shard, info = site.parts[part]
    if info.dtype != "F32":
        raise HcError(f"{shard.path}: tensor '{info.name}' is {info.dtype}; expected F32")
    with ckpt.source(shard) as src:
        return np.array(read_tensor(src, shard.header, info.name), dtype=np.float32)


def count_nonfinite(ckpt: Checkpoint, site: HcSiteTensors, part: str) -> int:
    """NaN and Inf values in one of a site's tensors, read in bounded chunks (an fn
    projection is 2 MB in a real model, and whatever a header says in a hostile one)."""
    shard, info = site.parts[part]
    with ckpt.source(shard) as src:
        return sum(int(np.count_nonzero(~np.isfinite(v))) for v in iter_tensor_chunks(src, shard.header, info.name))


def read_base_scale(ckpt: Checkpoint, site: HcSiteTensors) -> tuple[np.ndarray, np.ndarray]:
    """A site's base and scale values; one read when they lie side by side in one shard,
    as releases write them (a round trip saved per site over HTTP)."""
    (bs, b), (ss, s) = site.parts["base"], site.parts["scale"]
    for shard, info in ((bs, b), (ss, s)):
        if info.nbytes > MAX_MIX_BYTES:
            raise HcError(f"{shard.file}: tensor '{info.name}' has {info.nbytes:,} bytes; a site's base and scale "
                          f"hold at most (2+hc)*hc = {MAX_MIX_BYTES // 4:,} F32 values (hc_mult at most {MAX_HC_MULT})")
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
