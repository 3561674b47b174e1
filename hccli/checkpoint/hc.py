"""The hyper-connection tensors of a checkpoint: finding them by name, numbering
their layers, and reading their values (a few KB, at validated offsets).

Layers are numbered as in count-params: backbone `layers.L` is L, DSpark/MTP
stage `mtp.s` is n_layers + s, and the V4 family's root head mix comes last, as
n_layers + n_stages, named "head". Names are vocab's: a checkpoint in another
dialect (transformers save, GGUF, ...; dialects.py) is read by canonical name, and
its values come back as float32 in the release's layout whatever they are stored in.
"""

from __future__ import annotations

import sys
from array import array
from itertools import chain, compress, repeat
from operator import contains
from typing import TYPE_CHECKING, Iterator

from hccli import dialects as D
from hccli.checkpoint.header_types import TensorInfo
from hccli.checkpoint.shardset import Checkpoint, HcSiteTensors, Shard
from hccli.errors import HcError
from hccli.vocab import (
    BACKBONE,
    DEFAULT_HC_EPS,
    DEFAULT_SINKHORN_ITERS,
    MAX_HC_MULT,
    SITE_ORDER,
    STAGE,
    hc_from_mix_width,
    HcName,
    mix_width,
    owner_of,
    parse_hc_name,
)

if TYPE_CHECKING:  # numpy is imported where values are decoded: `inspect --json` never needs it
    import numpy as np

    from hccli.config import ModelConfig


# The most bytes a site's base (or scale) can have: (2 + hc) * hc F32 values at the bound.
# Checked before a byte is read: a header may claim gigabytes.
MAX_MIX_BYTES = 4 * mix_width(MAX_HC_MULT)
# The most values of one HC tensor decoded from another type (F16, BF16, a GGML quant)
# into float32: a V4-Pro fn is 24 x 4*7168 = 688k.
MAX_DECODED_ELEMENTS = 1 << 26


def detect(shards: list[Shard], names: list[str], raw_config: dict | None) -> D.Detection:
    """The dialect the checkpoint's names are written in. raw_config, the config.json as read,
    settles names that fit a transformers save and a prefixed release."""
    if any(is_gguf(s) for s in shards):
        return D.Detection(D.GGUF, "a GGUF file")
    return D.detect_dialect(names, raw_config)


def _hc_parser(dialect: str):
    if dialect in (D.RELEASE, D.UNKNOWN):
        return parse_hc_name
    return lambda name: D.hc_name(name, dialect)


def gguf_settings(ckpt: Checkpoint) -> dict:
    """A GGUF's model settings from its metadata ({} for any other checkpoint)."""
    return _gguf_settings(ckpt.shards)


def _gguf_settings(shards: list[Shard]) -> dict:
    from hccli.checkpoint.gguf_store import gguf_kv, settings

    return settings(gguf_kv(shards))


def gguf_architecture(ckpt: Checkpoint) -> str:
    """A GGUF's general.architecture ("" where it has none, or is no GGUF)."""
    from hccli.checkpoint.gguf_store import gguf_kv

    arch = gguf_kv(ckpt.shards).get("general.architecture")
    return arch if isinstance(arch, str) else ""


def op_settings(ckpt: Checkpoint) -> tuple[int, float]:
    """(Sinkhorn iterations, eps): the config's, a GGUF's metadata's, or the reference defaults."""
    if ckpt.config is not None:
        return ckpt.config.hc_sinkhorn_iters, ckpt.config.hc_eps
    g = gguf_settings(ckpt) if ckpt.dialect.dialect == D.GGUF else {}
    iters, eps = g.get("hyper_connection.sinkhorn_iterations"), g.get("hyper_connection.epsilon")
    ok_iters = isinstance(iters, int) and not isinstance(iters, bool) and 0 < iters <= 10_000
    ok_eps = isinstance(eps, float) and 0 < eps < 1
    return (iters if ok_iters else DEFAULT_SINKHORN_ITERS), (eps if ok_eps else DEFAULT_HC_EPS)


def find_sites(shards: list[Shard], merged: dict | None, dialect: str, config: ModelConfig | None
               ) -> tuple[int, int, list[HcSiteTensors]]:
    """(n_layers, n_stages, every HC site by canonical (layer, site, part)) of the readable shards
    in any dialect; merged: the merged table where names repeat across shards."""
    n_layers, n_stages = _layer_counts(shards, merged, dialect, config)
    parse = _hc_parser(dialect)
    groups: dict[tuple[str, str], dict] = {}
    owners: dict[str, HcName] = {}
    for name, ref in _hc_candidates(shards, merged):
        hn = parse(name)
        if hn is not None:
            groups.setdefault((hn.owner, hn.site), {})[hn.part] = ref
            owners[hn.owner] = hn
    out = []
    for (owner, site), parts in groups.items():
        hn = owners[owner]
        label = owner or "head"
        out.append(HcSiteTensors(owner, site, hn.layer(n_layers, n_stages), label, hn.is_stage, parts))
    out.sort(key=lambda s: (s.layer, SITE_ORDER[s.site]))
    return n_layers, n_stages, out


def _layer_counts(shards: list[Shard], merged: dict | None, dialect: str, config: ModelConfig | None
                  ) -> tuple[int, int]:
    """(n_layers, n_stages): from the config when there is one, else from a GGUF's metadata, else
    from the names."""
    if config is not None:
        return config.n_layers, config.n_stages
    block_count = _gguf_settings(shards).get("block_count") if dialect == D.GGUF else None
    if isinstance(block_count, int) and not isinstance(block_count, bool) and 0 < block_count < 1 << 20:
        return block_count, 0
    names = list(merged) if merged is not None else chain.from_iterable(s.header.names for s in shards)
    most = {BACKBONE: -1, STAGE: -1}
    if dialect not in (D.RELEASE, D.RELEASE_PREFIXED, D.UNKNOWN):
        # the other dialects hold no stages; their layers are numbered by their HC sites
        for n in names:
            hn = D.hc_name(n, dialect)
            if hn is not None and hn.kind == BACKBONE and hn.num > most[BACKBONE]:
                most[BACKBONE] = hn.num
        return most[BACKBONE] + 1, 0
    cut = 6 if dialect == D.RELEASE_PREFIXED else 0
    for n in names:
        owner = owner_of(n[cut:] if cut and n.startswith("model.") else n)
        if owner is not None and owner[1] > most[owner[0]]:
            most[owner[0]] = owner[1]
    return most[BACKBONE] + 1, most[STAGE] + 1


def _hc_candidates(shards: list[Shard], merged: dict | None) -> Iterator[tuple[str, tuple[Shard, TensorInfo]]]:
    """(name, (shard, entry)) of the tensors whose names hold "hc", as every dialect spells an HC
    tensor (~0.3% of a checkpoint): picked per header by C-level scans of its name column when
    no name repeats across shards, else from the merged table (first occurrence wins)."""
    if merged is not None:
        yield from ((n, ref) for n, ref in merged.items() if "hc" in n)
        return
    for s in shards:
        names = s.header.names
        for i in compress(range(len(names)), map(contains, names, repeat("hc"))):
            yield names[i], (s, s.header.entry(i))


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
    """One part's values as float32 in the release's shape: F32 as stored, F16/BF16 and
    GGUF's types (Q8_0, ...) decoded, the latter by the gguf package."""
    if part not in site.parts:
        raise HcError(f"{ckpt.label}: tensor '{site.tensor_name(part)}' is not in the checkpoint")
    shard, info = site.parts[part]
    gguf = is_gguf(shard)
    if info.dtype != "F32" and not gguf and info.dtype not in ("F16", "BF16"):
        raise HcError(f"{shard.path}: tensor '{info.name}' is {info.dtype}; expected F32 (or F16/BF16)")
    if info.dtype != "F32" and info.n_elements > MAX_DECODED_ELEMENTS:
        raise HcError(f"{shard.path}: tensor '{info.name}' has {info.n_elements:,} elements; expected at most "
                      f"{MAX_DECODED_ELEMENTS:,} for an HC tensor")
    import numpy as np

    from hccli.checkpoint.values import read_tensor

    with ckpt.source(shard) as src:
        if gguf and info.dtype != "F32":
            from hccli.checkpoint.gguf_store import dequantize
            from hccli.checkpoint.values import read_tensor_bytes

            raw = read_tensor_bytes(src, shard.header, info.name)
            return dequantize(raw, info.dtype, info.shape, f"{shard.path}: tensor '{info.name}'")
        return np.array(read_tensor(src, shard.header, info.name), dtype=np.float32)


def is_gguf(shard: Shard) -> bool:
    return shard.file.endswith(".gguf")


def count_nonfinite(ckpt: Checkpoint, site: HcSiteTensors, part: str) -> int:
    """NaN and Inf values in one of a site's tensors, read in bounded chunks (an fn
    projection is 2 MB in a real model, and whatever a header says in a hostile one)."""
    from hccli.checkpoint.values import count_nonfinite_f32, iter_tensor_bytes

    shard, info = site.parts[part]
    if info.dtype != "F32":  # decoded whole to float32, within read_part's bound
        return count_nonfinite_f32(read_part(ckpt, site, part).astype("<f4").tobytes())
    with ckpt.source(shard) as src:
        return sum(map(count_nonfinite_f32, iter_tensor_bytes(src, shard.header, info.name)))


def read_base_scale(ckpt: Checkpoint, site: HcSiteTensors) -> tuple[np.ndarray, np.ndarray]:
    """A site's base and scale values as float32 arrays in their header shapes (see
    read_base_scale_lists for how they are read)."""
    import numpy as np

    values = _f32_values(ckpt, site)
    if values is None:
        return read_part(ckpt, site, "base"), read_part(ckpt, site, "scale")
    (_, b), (_, s) = site.parts["base"], site.parts["scale"]
    return np.array(values[0], dtype=np.float32).reshape(b.shape), np.array(values[1], dtype=np.float32).reshape(s.shape)


def read_base_scale_lists(ckpt: Checkpoint, site: HcSiteTensors) -> tuple[list[float], list[float]]:
    """A site's base and scale values, flat, as Python floats holding float32 values: without numpy
    for the F32 tensors of safetensors checkpoints (`inspect --json` imports no numpy), decoded by
    read_part otherwise."""
    values = _f32_values(ckpt, site)
    if values is None:
        return read_part(ckpt, site, "base").reshape(-1).tolist(), read_part(ckpt, site, "scale").reshape(-1).tolist()
    return values


def _f32_values(ckpt: Checkpoint, site: HcSiteTensors) -> tuple[list[float], list[float]] | None:
    """F32 base and scale of a safetensors checkpoint, read without numpy: one read when they lie
    side by side in one shard, as releases write them (a round trip saved per site over HTTP);
    None for anything to decode. Sizes are checked before a byte is read."""
    for shard, info in (site.parts["base"], site.parts["scale"]):
        if info.nbytes > MAX_MIX_BYTES:
            raise HcError(f"{shard.file}: tensor '{info.name}' has {info.nbytes:,} bytes; a site's base and scale "
                          f"hold at most (2+hc)*hc = {MAX_MIX_BYTES // 4:,} F32 values (hc_mult at most {MAX_HC_MULT})")
    (bs, b), (ss, s) = site.parts["base"], site.parts["scale"]
    if b.dtype != "F32" or s.dtype != "F32" or is_gguf(bs) or is_gguf(ss):
        return None
    if bs is ss and b.end == s.begin:
        with ckpt.source(bs) as src:
            both = _f32_list(src.read(b.abs_begin, b.nbytes + s.nbytes))
        return both[: b.nbytes // 4], both[b.nbytes // 4:]
    out = []
    for shard, info in (site.parts["base"], site.parts["scale"]):
        with ckpt.source(shard) as src:
            out.append(_f32_list(src.read(info.abs_begin, info.nbytes)))
    return out[0], out[1]


def _f32_list(raw: bytes) -> list[float]:
    values = array("f", raw)  # len(raw) % 4 == 0: an F32 entry's span is 4 x its elements
    if sys.byteorder != "little":
        values.byteswap()
    return values.tolist()


def select_site(ckpt: Checkpoint, layer: int, site: str) -> HcSiteTensors:
    sites = ckpt.hc_sites
    for s in sites:
        if s.layer == layer and s.site == site:
            return s
    from hccli.layers import format_ranges  # (the layer plan's module: loaded for this message only)

    have = sorted({s.layer for s in sites if s.site == site})
    shown = format_ranges(have) if have else "none"
    raise HcError(f"{ckpt.label}: no hc_{site}_* tensors for layer {layer}; this checkpoint has {site} sites "
                  f"at layers {shown}")
