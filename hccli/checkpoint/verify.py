"""Verification findings: the index against the shard headers, the HC tensors
against each other and hc_mult, and (with a config) the inventory against the
headers. Each finding has a stable code and a severity ("error" | "warning").

Every finding is returned (a caller that shows people a summary cuts it there), and
no value is read whose size only a hostile header vouches for: base and scale within
the hc_mult bound, fn projections in chunks, within FN_READ_BUDGET bytes a run."""

from __future__ import annotations

from itertools import compress, filterfalse
from operator import and_, attrgetter, itemgetter, ne
from pathlib import PurePosixPath
from typing import Any

from hccli import dialects as D
from hccli.checkpoint import agree
from hccli.checkpoint.findings import Finding, finding
from hccli.checkpoint.hc import MAX_MIX_BYTES, count_nonfinite, gguf_settings, is_gguf
from hccli.checkpoint.shardset import Checkpoint
from hccli.errors import HcError
from hccli.vocab import HC_PARTS, MAX_HC_MULT, HcName, hc_from_mix_width

_INFO, _SHAPE, _DTYPE, _EXACT = itemgetter(1), attrgetter("shape"), attrgetter("dtype"), attrgetter("exact")
_SIGNATURE = attrgetter("dtype", "shape")  # equal for every tensor: no wrong shape, no wrong dtype

# fn bytes one verify reads at most: V4-Pro's projections are ~340 MB in all; past this a
# header would make verify read for minutes (a sparse file costs no disk for its claim).
FN_READ_BUDGET = 2 << 30


def _each(findings: list[Finding], code: str, items: list[str], make) -> None:
    findings.extend(finding(code, make(item)) for item in items)


def verify(ckpt: Checkpoint, *, check_values: bool = True) -> list[Finding]:
    hc = _HcCheck(ckpt, check_values)
    out: list[Finding] = []
    for s in ckpt.shards:
        if s.header is None:
            out.append(finding("unreadable_shard", s.error or f"{s.file}: unreadable"))
    for name in ckpt.unsafe:
        out.append(finding("unsafe_shard_path",
                           f"index names shard '{name}', outside the checkpoint directory; not opened"))
    for name in ckpt.missing:
        named = "index names" if ckpt.index is not None else "the other shards' -of-N names imply"
        out.append(finding("missing_shard", f"{named} shard '{name}', which is not in {ckpt.label}"))
    for name in ckpt.partial:
        out.append(finding("partial_file", f"'{name}' is a .partial file (an interrupted download or write?); "
                           "the checkpoint may be incomplete"))
    idx = ckpt.index
    if idx is not None and agree.index_agrees(ckpt, idx.weight_map):
        occ: Any = None  # no duplicate and nothing the index misplaces: no table of names to build
    elif ckpt.unique:  # no duplicates to list: the merged table says where each name is
        occ = _Single(ckpt.tensors())
    else:
        occ = ckpt.occurrences()
        dups = sorted(n for n, shards in occ.items() if len(shards) > 1)
        _each(out, "duplicate_tensor", dups,
              lambda n: f"tensor '{n}' is in {len(occ[n])} shards: " + ", ".join(s.file for s in occ[n]))
    if idx is None:
        if ckpt.kind == "directory" and len(ckpt.shards) > 1 and not is_gguf(ckpt.shards[0]):
            out.append(finding("no_index",
                               f"{ckpt.label}: {len(ckpt.shards)} shards and no model.safetensors.index.json"))
    else:
        gone = {*ckpt.unsafe, *ckpt.missing}
        unreadable = {s.file for s in ckpt.shards if s.header is None}
        if occ is not None:  # (the weight_map is parsed only here, where the index does not agree)
            _index_findings(out, ckpt, idx.weight_map, occ, gone, unreadable)
        for s in ckpt.shards:
            if not s.indexed:
                out.append(finding("unindexed_shard", f"{s.file} is in the directory but the index never names it"))
        if idx.total_size is not None:
            spans = sum(sum(s.header.columns.ends) - sum(s.header.columns.begins)
                        for s in ckpt.shards if s.header is not None and s.indexed)
            if spans != idx.total_size and not unreadable and not gone:
                out.append(finding("total_size_mismatch", f"metadata.total_size is {idx.total_size:,}; the shards' "
                                   f"tensors span {spans:,} bytes"))
    later: list[Finding] = []
    if ckpt.config_error:
        later.append(finding("config_unreadable", ckpt.config_error))
    if ckpt.config is not None:
        later += _config_findings(ckpt)
    return out + hc.findings() + later


def _index_findings(out: list[Finding], ckpt: Checkpoint, wm: dict[str, str], occ: Any, gone: set[str],
                    unreadable: set[str]) -> None:
    missing = sorted(n for n in filterfalse(occ.__contains__, wm) if wm[n] not in gone and wm[n] not in unreadable)
    _each(out, "index_missing_tensor", missing,
          lambda n: f"index lists '{n}' in {wm[n]}, which does not hold it")
    unindexed = sorted(filterfalse(wm.__contains__, occ))
    _each(out, "unindexed_tensor", unindexed,
          lambda n: f"tensor '{n}' in {occ[n][0].file} is not in the index")
    wrong = [] if agree.each_shard_named(ckpt, wm) else sorted(
        n for n, shards in occ.items()
        if n in wm and len(shards) == 1 and wm[n] != shards[0].file
        and _norm(wm[n]) != _norm(shards[0].file))  # equal names need no PurePosixPath
    _each(out, "wrong_shard", wrong,
          lambda n: f"tensor '{n}' is in {occ[n][0].file}; the index says {wm[n]}")


class _Single:
    """The merged table read as occurrences (name -> its one shard) when no name repeats: no
    second table of ~100k entries."""

    def __init__(self, tensors: dict):
        self._t = tensors

    def __contains__(self, name: object) -> bool:
        return name in self._t

    def __getitem__(self, name: str) -> tuple:
        return (self._t[name][0],)

    def __iter__(self):
        return iter(self._t)

    def items(self):
        return ((n, (ref[0],)) for n, ref in self._t.items())


def _norm(name: str) -> str:
    return str(PurePosixPath(name.replace("\\", "/")))


class _HcCheck:
    """The HC checks: shapes and dtypes, and the values (NaN/Inf) read by a scan; findings() gives
    them in site order."""

    def __init__(self, ckpt: Checkpoint, check_values: bool):
        self.ckpt = ckpt
        self.sites = ckpt.hc_sites
        self.items: list[Finding | int] = []  # a finding, or the index of a value job
        self.jobs: list[tuple[Any, str]] = []
        hc_mult = ckpt.config.hc_mult if ckpt.config is not None else None
        fn_budget = FN_READ_BUDGET
        # where reads cost a transfer the fn projections (2 MB a site, 169 MB for V4.1-Flash) are not fetched
        cheap = ckpt.store.bulk_reads_cheap
        out = self.items
        for s in self.sites:
            missing = [p for p in HC_PARTS if p not in s.parts]
            if missing:
                out.append(finding("hc_incomplete",
                                   f"{s.name} {s.site}: no " + ", ".join(s.tensor_name(p) for p in missing)))
            for part, (shard, info) in s.parts.items():
                if info.dtype != "F32":
                    out.append(_dtype_finding(s.tensor_name(part), info, is_gguf(shard)))
            shapes = {p: info.shape for p, (_, info) in s.parts.items()}
            problem = _hc_shape_problem(s.site, shapes, hc_mult)
            if problem:
                out.append(finding("hc_shape", f"{s.name} {s.site}: {problem}"))
            if not check_values:
                continue
            for part in ("base", "scale", "fn") if cheap else ("base", "scale"):
                if part not in s.parts or (s.parts[part][1].dtype != "F32" and not is_gguf(s.parts[part][0])):
                    continue
                nbytes = s.parts[part][1].nbytes
                if part != "fn" and nbytes > MAX_MIX_BYTES:
                    continue  # past the hc_mult bound: a shape finding above, and its claimed size is not read
                if part == "fn":
                    if nbytes > fn_budget:
                        out.append(finding("hc_unchecked", f"'{s.tensor_name(part)}' ({nbytes:,} bytes) not read: "
                                           f"past the {FN_READ_BUDGET:,} bytes of fn values one verify reads"))
                        continue
                    fn_budget -= nbytes
                out.append(len(self.jobs))
                self.jobs.append((s, part))

    def _scan(self) -> list[list]:
        """[NaN/Inf count, None] or [None, why it was not read] for each job."""
        out: list[list] = []
        for s, part in self.jobs:
            try:
                out.append([count_nonfinite(self.ckpt, s, part), None])
            except HcError as exc:  # a GGML type the gguf package cannot decode, past a bound, ...
                out.append([None, exc.message])
        return out

    def findings(self) -> list[Finding]:
        counts = self._scan()
        out: list[Finding] = []
        for item in self.items:
            if isinstance(item, Finding):
                out.append(item)
                continue
            (s, part), (bad, why) = self.jobs[item], counts[item]
            if why is not None:
                out.append(finding("hc_unchecked", f"'{s.stored_name(part)}' not read: {why}"))
            elif bad:
                out.append(finding("hc_nonfinite", f"'{s.stored_name(part)}' holds {bad} NaN/Inf values"))
        if self.ckpt.config is None:
            out += _gguf_missing_sites(self.ckpt, self.sites)
        return out


def _dtype_finding(canonical: str, info, gguf: bool) -> Finding:
    from hccli.checkpoint.gguf_store import FLOAT_TYPES, ROUNDING

    shown = f"'{info.name}'" + (f" ({canonical})" if info.name != canonical else "")
    if not gguf:
        return finding("hc_dtype", f"{shown} is {info.dtype}; expected F32")
    if info.dtype in FLOAT_TYPES:
        return finding("hc_reduced_precision", f"{shown} is {info.dtype}: each value is rounded to "
                       f"{ROUNDING[info.dtype]} relative (the reference keeps HC tensors F32)")
    return finding("hc_quantised",
                   f"{shown} is {info.dtype}, a quantised GGML type; the reference keeps HC tensors F32")


def _gguf_missing_sites(ckpt: Checkpoint, sites) -> list[Finding]:
    """Without a config, a GGUF's metadata still says how many blocks it has: every one holds
    an attn and an ffn site, and deepseek4 a head mix (deepseek41 has none)."""
    if ckpt.dialect.dialect != D.GGUF:
        return []
    n = gguf_settings(ckpt).get("block_count")
    if not isinstance(n, int) or isinstance(n, bool) or not 0 < n < 1 << 20:
        return []
    have = {(x.layer, x.site) for x in sites}
    want = [(layer, site) for layer in range(n) for site in ("attn", "ffn")]
    arch = next((x.header.architecture for x in ckpt.shards if x.header is not None), "")
    if arch == "deepseek4":
        want.append((n, "head"))

    def gguf_name(layer: int, site: str) -> str:
        owner = HcName("", None, "head", "fn") if site == "head" else HcName("layers", layer, site, "fn")
        return D.spell_hc(owner, D.GGUF) or ""

    return [finding("hc_missing_site", f"no {gguf_name(layer, site)} (nor its base and scale); the metadata's "
                    f"block_count {n} implies it") for layer, site in want
            if (layer, site) not in have]


def _hc_shape_problem(site: str, shapes: dict[str, tuple[int, ...]], hc_mult: int | None) -> str | None:
    base, scale, fn = shapes.get("base"), shapes.get("scale"), shapes.get("fn")
    if base is not None and len(base) != 1:
        return f"base has shape {list(base)}; expected one dimension"
    if scale is not None and scale != ((1,) if site == "head" else (3,)):
        return f"scale has shape {list(scale)}; expected {[1] if site == 'head' else [3]}"
    if fn is not None and len(fn) != 2:
        return f"fn has shape {list(fn)}; expected two dimensions"
    if base is not None and fn is not None and fn[0] != base[0]:
        return f"fn has {fn[0]} rows but base has {base[0]} values"
    if base is None:
        return None
    n = base[0]
    if site == "head":
        hc = n
        if hc < 1:
            return "base has no values; expected hc_mult of them"
    else:
        hc = hc_from_mix_width(n)
        if hc is None:
            return f"base has {n} values, which is (2+hc)*hc for no whole hc"
    if hc > MAX_HC_MULT:
        return f"shapes imply hc_mult {hc:,}, past the bound of {MAX_HC_MULT} streams"
    if hc_mult is not None and hc != hc_mult:
        return f"shapes imply hc_mult {hc}; the config says {hc_mult}"
    if fn is not None and fn[1] % hc:
        return f"fn has {fn[1]} columns, not a multiple of hc_mult {hc}"
    return None


def _config_findings(ckpt: Checkpoint) -> list[Finding]:
    """The config's inventory against the headers, by canonical name, under the rules of the
    checkpoint's layout (reconcile.py); for the release layout, also where the tensors lie
    (placement.py)."""
    from hccli.checkpoint import reconcile as R
    from hccli.inventory import build_inventory

    assert ckpt.config is not None
    dialect = ckpt.dialect.dialect
    if dialect not in R.RECONCILED:
        return []
    inventory = build_inventory(ckpt.config)
    if dialect != D.RELEASE:
        return _inventory_findings(ckpt, inventory, dialect)
    from hccli.checkpoint.placement import placement_findings

    # the release's names: its inventory as it stands; where the shards agree with it, the
    # placement check starts from the same positions
    at = agree.positions(ckpt, inventory.columns)
    found = [] if at is not None else _inventory_findings(ckpt, inventory, dialect)
    return found + placement_findings(ckpt, inventory, at)


def _inventory_findings(ckpt: Checkpoint, inventory: Any, dialect: str) -> list[Finding]:
    from hccli.checkpoint import reconcile as R

    stored = ckpt.tensors()
    inv = R.expected_layout(inventory, dialect, R.model_dtype(stored, dialect))
    all_exact = all(map(_EXACT, inv.values()))
    have, unmapped = R.canonical_tensors(stored, dialect)
    out: list[Finding] = []

    def shown(n: str) -> str:
        return n if have[n][1].name == n else f"{have[n][1].name}' ('{n}"

    def add(code: str, names: list[str], make, exact) -> None:
        # where the config's inventory is best effort (V4 family, outside HC), a mismatch is a warning
        sure = [n for n in names if exact(n)]
        unsure = [n for n in names if not exact(n)]
        _each(out, code, sure, make)
        tail: list[Finding] = []
        _each(tail, code, unsure, lambda n: make(n) + " (inventory best effort for this family)")
        out.extend(Finding(f.code, "warning", f.message) for f in tail)

    missing = list(filterfalse(have.__contains__, inv))
    if dialect == D.GGUF:
        hc_missing = [n for n in missing if "hc_" in n]
        rest = [n for n in missing if "hc_" not in n]
        if rest:
            out.append(finding("partial_inventory",
                               f"{ckpt.label} holds {len(inv) - len(missing):,} of the {len(inv):,} "
                               f"tensors llama.cpp's converter writes for this config; {len(rest):,} are not here "
                               f"(first: '{rest[0]}'), not listed one by one"))
        missing = hc_missing
    add("missing_tensor", missing,
        lambda n: f"'{n}' {inv[n].dtype or ''} {list(inv[n].shape)} is implied by the config but absent",
        lambda n: inv[n].exact)
    add("unexpected_tensor", sorted(filterfalse(inv.__contains__, have)),
        lambda n: f"'{shown(n)}' in {have[n][0].file} is not implied by the config",
        lambda n: all_exact)
    # both checks over ~100k names as C-level maps over columns, each tensor looked up once
    names = list(compress(inv, map(have.__contains__, inv)))
    specs = list(map(inv.__getitem__, names))
    infos = list(map(_INFO, map(have.__getitem__, names)))
    if list(map(_SIGNATURE, infos)) == list(map(_SIGNATURE, specs)):  # the usual case: all as implied
        bad_shape, bad_dtype = [], []
    else:
        bad_shape = list(compress(names, map(ne, map(tuple, map(_SHAPE, infos)), map(_SHAPE, specs))))
        want = list(map(_DTYPE, specs))
        bad_dtype = list(compress(names, map(and_, map(bool, want), map(ne, map(_DTYPE, infos), want))))
    add("wrong_shape", bad_shape,
        lambda n: f"'{shown(n)}' has shape {list(have[n][1].shape)}; the config implies {list(inv[n].shape)}",
        lambda n: inv[n].exact)
    add("wrong_dtype", bad_dtype,
        lambda n: f"'{shown(n)}' is {have[n][1].dtype}; the config implies {inv[n].dtype}",
        lambda n: inv[n].exact)
    if unmapped:
        out.append(finding("unmapped_tensor", f"{len(unmapped):,} tensors whose names the {dialect} layout does not "
                           f"define (first: '{unmapped[0]}')"))
    return out
