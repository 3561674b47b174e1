"""The hyper-connection tensors of a checkpoint: finding them by name, numbering
their layers, and reading their values (a few KB, at validated offsets).

Layers are numbered as in count-params: backbone `layers.L` is L, DSpark/MTP
stage `mtp.s` is n_layers + s, and the V4 family's root head mix comes last, as
n_layers + n_stages, named "head". Names are vocab's: a checkpoint in another
dialect (transformers save, GGUF, ...; names/dialects.py) is read by canonical name, and
its values come back as float32 in the release's layout whatever they are stored in.
"""

from __future__ import annotations

import sys
from array import array
from itertools import chain, compress, repeat
from operator import contains
from typing import TYPE_CHECKING, Callable, Iterator

from hccli.names import dialects as D
from hccli.base.bounded import one_line
from hccli.checkpoint.safetensors.header_types import TensorInfo
from hccli.checkpoint.shardset import Checkpoint, HcSiteTensors, Shard
from hccli.checkpoint.source import ByteSource
from hccli.model.config.bounds import MAX_LAYERS, MAX_STAGES
from hccli.base.errors import HcError
from hccli.base.vocab import (
    BACKBONE,
    DEFAULT_HC_EPS,
    DEFAULT_SINKHORN_ITERS,
    MAX_HC_MULT,
    SITE_ORDER,
    STAGE,
    hc_from_mix_width,
    HcName,
    mix_width,
    owners,
    parse_hc_name,
)

if TYPE_CHECKING:  # numpy is imported where values are decoded: `inspect --json` never needs it
    import numpy as np

    from hccli.checkpoint.gguf.settings import GgufModel
    from hccli.checkpoint.values import TensorStream
    from hccli.model.config.model import ModelConfig


# The most bytes a site's base (or scale) can have: (2 + hc) * hc F32 values at the bound.
# Checked before a byte is read: a header may claim gigabytes.
MAX_MIX_BYTES = 4 * mix_width(MAX_HC_MULT)
# The most values of one HC tensor read (diff's view) or decoded from another type (F16, BF16, a
# GGML quant) into float32: a V4-Pro fn is 24 x 4*7168 = 688k; 64M is past any real one.
MAX_HC_ELEMENTS = 1 << 26
# HC sites a checkpoint may hold: two a backbone layer, attn, ffn and a head mix a stage, and the
# root head mix, at the bounds a config is held to; past it the names are refused, not grouped
MAX_HC_SITES = 2 * MAX_LAYERS + 3 * MAX_STAGES + 1


def detect(shards: list[Shard], names: list[str], raw_config: dict | None, quant: str | None = None
           ) -> D.Detection:
    """The dialect the checkpoint's names are written in. raw_config, the config.json as read,
    settles names that fit a transformers save and a prefixed release; quant, the kind of its
    quantisation block, an mlx-lm or compressed-tensors one."""
    if any(is_gguf(s) for s in shards):
        return D.Detection(D.GGUF, "a GGUF file")
    return D.detect_dialect(names, raw_config, quant)


def second_spellings(ckpt: Checkpoint) -> list[tuple[str, str, str]]:
    """names/spellings.py's second_spellings of the checkpoint's names in its dialect: pairs of names that
    spell one tensor, which verify reports and diff refuses to compare."""
    from hccli.names.spellings import second_spellings as spellings

    return spellings(ckpt.all_names(), ckpt.dialect.dialect)


def _hc_parser(dialect: str):
    if dialect in (D.RELEASE, D.UNKNOWN):
        return parse_hc_name
    return lambda name: D.hc_name(name, dialect)


def gguf_settings(ckpt: Checkpoint) -> dict:
    """A GGUF's model settings from its metadata ({} for any other checkpoint)."""
    from hccli.checkpoint.gguf.store import gguf_kv, settings

    return settings(gguf_kv(ckpt.shards))


def gguf_architecture(ckpt: Checkpoint) -> str:
    """A GGUF's general.architecture ("" where it has none, or is no GGUF)."""
    from hccli.checkpoint.gguf.store import gguf_kv

    arch = gguf_kv(ckpt.shards).get("general.architecture")
    return arch if isinstance(arch, str) else ""


def gguf_model(ckpt: Checkpoint) -> GgufModel | None:
    """The model settings a GGUF's metadata gives, each within a config's bound (HcError naming
    the file, the key and the bound otherwise); None for any other checkpoint."""
    return _gguf_model(ckpt.shards) if ckpt.dialect.dialect == D.GGUF else None


def _gguf_model(shards: list[Shard]) -> GgufModel | None:
    from hccli.checkpoint.gguf.settings import read_model
    from hccli.checkpoint.gguf.store import GgufHeader, settings

    shard = next((s for s in shards if isinstance(s.header, GgufHeader)), None)
    if shard is None:  # llama.cpp's names in a safetensors file: no metadata
        return None
    return read_model(one_line(str(shard.path)), shard.header.architecture, settings(shard.header.kv))


def op_settings(ckpt: Checkpoint) -> tuple[int, float]:
    """(Sinkhorn iterations, eps): the config's, a GGUF's metadata's, or the reference defaults."""
    if ckpt.config is not None:
        return ckpt.config.hc_sinkhorn_iters, ckpt.config.hc_eps
    m = gguf_model(ckpt)
    iters = m.iters if m is not None and m.iters is not None else DEFAULT_SINKHORN_ITERS
    eps = m.eps if m is not None and m.eps is not None else DEFAULT_HC_EPS
    return iters, eps


def find_sites(shards: list[Shard], merged: dict | None, dialect: str, config: ModelConfig | None,
               where: str) -> tuple[int, int, list[HcSiteTensors]]:
    """(n_layers, n_stages, every HC site by canonical (layer, site, part)) of the readable shards
    in any dialect; merged: the merged table where names repeat across shards."""
    n_layers, n_stages = _layer_counts(shards, merged, dialect, config)
    parse = _hc_parser(dialect)
    groups: dict[tuple[str, str], dict] = {}
    by_owner: dict[str, HcName] = {}
    for name, ref in _hc_candidates(shards, merged):
        hn = parse(name)
        if hn is not None:
            key = (hn.owner, hn.site)
            if key not in groups and len(groups) == MAX_HC_SITES:
                raise HcError(f"{one_line(where)}: more than {MAX_HC_SITES:,} HC sites; expected at most two a "
                              f"layer for {MAX_LAYERS:,} layers, three a stage for {MAX_STAGES} stages and one head "
                              "mix (hc's bounds on layers and stages)")
            groups.setdefault(key, {})[hn.part] = ref
            by_owner[hn.owner] = hn
    out = []
    for (owner, site), parts in groups.items():
        hn = by_owner[owner]
        label = owner or "head"
        out.append(HcSiteTensors(owner, site, hn.layer(n_layers, n_stages), label, hn.is_stage, parts))
    out.sort(key=lambda s: (s.layer, SITE_ORDER[s.site]))
    return n_layers, n_stages, out


def own_layer_counts(ckpt: Checkpoint, more_names: list[str]) -> tuple[int, int]:
    """(n_layers, n_stages) as the checkpoint itself numbers them, whatever its config says: a
    GGUF's metadata, else its names and `more_names` (what the index places in shards that
    could not be read)."""
    return _layer_counts(ckpt.readable(), ckpt.merged, ckpt.dialect.dialect, None, more_names)


def _layer_counts(shards: list[Shard], merged: dict | None, dialect: str, config: ModelConfig | None,
                  more_names: list[str] = ()) -> tuple[int, int]:
    """(n_layers, n_stages): from the config when there is one, else from a GGUF's metadata, else
    from the names."""
    if config is not None:
        return config.n_layers, config.n_stages
    m = _gguf_model(shards) if dialect == D.GGUF else None
    if m is not None and m.n_layers is not None:
        return m.n_layers, 0
    # a list: the scan below walks the names twice (the names, and whether each holds "hc")
    names = [*(merged if merged is not None else chain.from_iterable(s.header.names for s in shards)), *more_names]
    most = {BACKBONE: -1, STAGE: -1}
    if dialect not in (D.RELEASE, D.RELEASE_PREFIXED, D.UNKNOWN):
        # the other dialects hold no stages; their layers are numbered by their HC sites (whose
        # names hold "hc", picked by a C-level scan: a header may hold a million other names)
        for n in compress(names, map(contains, names, repeat("hc"))):
            hn = D.hc_name(n, dialect)
            if hn is not None and hn.kind == BACKBONE and hn.num > most[BACKBONE]:
                most[BACKBONE] = hn.num
        return most[BACKBONE] + 1, 0
    if dialect == D.RELEASE_PREFIXED:
        names = [n[6:] if n.startswith("model.") else n for n in names]
    for kind, num in owners(names):
        most[kind] = max(most[kind], num)
    return most[BACKBONE] + 1, most[STAGE] + 1


def split_set_problems(ckpt: Checkpoint, *, unreadable: bool = True, missing: bool = True) -> list[str]:
    """What keeps a GGUF split set from being one model, one line each: parts missing (with
    `missing`), parts unreadable (with `unreadable`), tensors stored in two parts (llama.cpp
    refuses those). [] for a whole one, and for any other checkpoint."""
    if not any(is_gguf(s) for s in ckpt.shards):
        return []
    label = one_line(ckpt.label)
    out = [f"{label}: part {one_line(m)} of the split set is missing; expected "
           f"{len(ckpt.shards) + len(ckpt.missing)} parts" for m in ckpt.missing] if missing else []
    if unreadable:
        out += [s.error or f"{one_line(s.file)}: unreadable" for s in ckpt.shards if s.header is None]
    if not ckpt.unique:
        repeated = [(n, shards) for n, shards in ckpt.occurrences().items() if len(shards) > 1]
        name, shards = repeated[0]
        more = f" ({len(repeated) - 1:,} more tensors in two parts)" if len(repeated) > 1 else ""
        out.append(f"{label}: tensor '{one_line(name, 80)}' is in {len(shards)} parts ("
                   + ", ".join(one_line(s.file) for s in shards) + f"); expected each tensor in one part{more}")
    return out


def require_whole(ckpt: Checkpoint) -> None:
    """A GGUF is one model: a part missing or unreadable, or a tensor in two parts, is an error,
    not a smaller model (diff, run-kernel)."""
    problems = split_set_problems(ckpt)
    if problems:
        raise HcError(problems[0])


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
    require_parts(ckpt, site, (part,))
    shard, info = site.parts[part]
    gguf = is_gguf(shard)
    if info.dtype != "F32" and not gguf and info.dtype not in ("F16", "BF16"):
        raise HcError(f"{shard.path}: tensor '{info.name}' is {info.dtype}; expected F32 (or F16/BF16)")
    if info.dtype != "F32" and info.n_elements > MAX_HC_ELEMENTS:
        raise HcError(f"{shard.path}: tensor '{info.name}' has {info.n_elements:,} elements; expected at most "
                      f"{MAX_HC_ELEMENTS:,} for an HC tensor")
    import numpy as np

    from hccli.checkpoint.values import read_tensor

    with ckpt.source(shard) as src:
        if gguf and info.dtype != "F32":
            from hccli.checkpoint.gguf.store import dequantize
            from hccli.checkpoint.values import read_tensor_bytes

            raw = read_tensor_bytes(src, shard.header, info.name)
            return dequantize(raw, info.dtype, info.shape, f"{shard.path}: tensor '{info.name}'")
        return np.array(read_tensor(src, shard.header, info.name), dtype=np.float32)


def require_parts(ckpt: Checkpoint, site: HcSiteTensors, parts: tuple[str, ...]) -> None:
    """A site whose values are read must hold each of `parts`: the first it lacks is named as
    the checkpoint spells it (a header may hold a site's fn and scale but no base)."""
    for part in parts:
        if part not in site.parts:
            name = site.tensor_name(part)
            hn = parse_hc_name(name)
            stored = (D.spell_hc(hn, ckpt.dialect.dialect) if hn is not None else None) or name
            have = ", ".join(f"hc_{site.site}_{p}" for p in ("fn", "base", "scale") if p in site.parts)
            raise HcError(f"{ckpt.label}: tensor '{stored}' of the {site.site} site of {site.name} (layer "
                          f"{site.layer}) is not in the checkpoint; expected hc_{site.site}_{part} beside its {have}")


def is_gguf(shard: Shard) -> bool:
    return shard.file.endswith(".gguf")


def count_nonfinite(ckpt: Checkpoint, site: HcSiteTensors, part: str, source: ByteSource | None = None) -> int:
    """NaN and Inf values in one of a site's tensors, read in bounded chunks (an fn
    projection is 2 MB in a real model, and whatever a header says in a hostile one). source:
    the part's shard, already open (a caller reading many tensors of one shard opens it once)."""
    from hccli.checkpoint.values import TensorStream, count_nonfinite_f32

    shard, info = site.parts[part]
    if info.dtype != "F32":  # decoded whole to float32, within read_part's bound
        return count_nonfinite_f32(read_part(ckpt, site, part).astype("<f4").tobytes())
    if source is None:
        with ckpt.source(shard) as own:
            return count_nonfinite(ckpt, site, part, own)
    return sum(map(count_nonfinite_f32, TensorStream(shard.header, info, lambda: source).chunks(source, source.chunk_bytes // 4)))


def value_stream(ckpt: Checkpoint, shard: Shard, info: TensorInfo,
                 wrap: Callable[[ByteSource], ByteSource] | None = None) -> TensorStream | None:
    """One tensor's stored bytes in bounded chunks and their values (values.TensorStream), so that
    a tensor of any size is looked at without holding it: a type values.py decodes, or a GGML
    quant's whole blocks dequantised by the gguf package; None for a type decoded nowhere.
    wrap: around the source (a counter of the bytes read)."""
    from hccli.checkpoint.values import READABLE_DTYPES, TensorStream, tensor_stream

    def source() -> ByteSource:
        src = ckpt.source(shard)
        return wrap(src) if wrap is not None else src

    if info.dtype in READABLE_DTYPES:
        return tensor_stream(source, shard.header, info.name)
    if not is_gguf(shard):
        return None
    from hccli.checkpoint.gguf.store import dequantize, quant_block

    values, size = block = quant_block(info.dtype)
    where = f"{shard.path}: tensor '{one_line(info.name)}'"
    return TensorStream(shard.header, info, source, block,
                        lambda raw: dequantize(raw, info.dtype, (len(raw) // size * values,), where))


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
    require_parts(ckpt, site, ("base", "scale"))
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
    """One site to run the op on: of a whole model (require_whole), never of part of a split set."""
    require_whole(ckpt)
    sites = ckpt.hc_sites
    for s in sites:
        if s.layer == layer and s.site == site:
            return s
    from hccli.model.layers import format_ranges  # (the layer plan's module: loaded for this message only)

    have = sorted({s.layer for s in sites if s.site == site})
    shown = format_ranges(have) if have else "none"
    raise HcError(f"{ckpt.label}: no hc_{site}_* tensors for layer {layer}; this checkpoint has {site} sites "
                  f"at layers {shown}")
