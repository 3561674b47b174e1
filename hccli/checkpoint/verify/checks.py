"""Verification findings: the index against the shard headers, the HC tensors
against each other and hc_mult, and (with a config) the inventory against the
headers. Each finding has a stable code and a severity ("error" | "warning").

Every finding is returned (a caller that shows people a summary cuts it there), and
no value is read whose size only a hostile header vouches for: base and scale within
the hc_mult bound, fn projections in chunks, within FN_READ_BUDGET bytes a run. A code lists
at most findings.MAX_FINDINGS_PER_CODE findings, then one that counts the rest."""

from __future__ import annotations

from dataclasses import replace
from itertools import compress, filterfalse
from operator import and_, attrgetter, itemgetter, ne
from pathlib import PurePosixPath
from typing import Any, NamedTuple

from hccli.base.words import noun_for, plural
from hccli.names import dialects as D
from hccli.base.bounded import one_line
from hccli.checkpoint.verify import agree
from hccli.checkpoint.verify.causes import GoneShards, grouped
from hccli.checkpoint.verify.damage import missing_roots
from hccli.checkpoint.verify.findings import CODES, MAX_FINDINGS_PER_CODE, Finding, capped, each, finding, more  # noqa: F401
from hccli.checkpoint.hc import (
    MAX_MIX_BYTES,
    count_nonfinite,
    gguf_model,
    is_gguf,
    second_spellings,
)
from hccli.checkpoint.safetensors.header_types import DTYPES
from hccli.checkpoint.shardset import Checkpoint
from hccli.base.errors import HcError
from hccli.base.vocab import HC_PARTS, MAX_HC_MULT, hc_from_mix_width

_INFO, _SHAPE, _DTYPE, _EXACT = itemgetter(1), attrgetter("shape"), attrgetter("dtype"), attrgetter("exact")
_SIGNATURE = attrgetter("dtype", "shape")  # equal for every tensor: no wrong shape, no wrong dtype

# fn bytes one verify reads at most: V4-Pro's projections are ~340 MB in all; past this a
# header would make verify read for minutes (a sparse file costs no disk for its claim).
FN_READ_BUDGET = 2 << 30


def verify(ckpt: Checkpoint, *, check_values: bool = True) -> list[Finding]:
    """Every finding, at most MAX_FINDINGS_PER_CODE of a code (findings.capped), each that follows
    from a root cause naming it (causes.py)."""
    return capped(_verify(ckpt, _HcCheck(ckpt, check_values), GoneShards(ckpt)))


def _verify(ckpt: Checkpoint, hc: _HcCheck, gone: GoneShards) -> list[Finding]:
    out: list[Finding] = []
    for s in ckpt.shards:
        if s.header is None:
            out.append(gone.root(s.file, s.error or f"{s.file}: unreadable"))
    for name in ckpt.unsafe:
        out.append(gone.root(name, f"index names shard '{name}', outside the checkpoint directory; not opened"))
    out += missing_roots(ckpt, gone)
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
        each(out, "duplicate_tensor", dups,
             lambda n: f"tensor '{n}' is in {len(occ[n])} shards: " + ", ".join(s.file for s in occ[n]))
    each(out, "duplicate_spelling", second_spellings(ckpt),
         lambda pair: f"'{one_line(pair[0], 120)}' and '{one_line(pair[1], 120)}' both spell "
                      f"'{one_line(pair[2], 120)}'; expected one name per tensor (a loader may take either)")
    if idx is None:
        if ckpt.kind == "directory" and len(ckpt.shards) > 1 and not is_gguf(ckpt.shards[0]):
            out.append(finding("no_index",
                               f"{ckpt.label}: {len(ckpt.shards)} shards and no model.safetensors.index.json"))
    else:
        absent = {*ckpt.unsafe, *ckpt.missing}
        unreadable = {s.file for s in ckpt.shards if s.header is None}
        if occ is not None:  # (the weight_map is parsed only here, where the index does not agree)
            _index_findings(out, ckpt, idx.weight_map, occ, absent, unreadable)
        for s in ckpt.shards:
            if not s.indexed:
                out.append(finding("unindexed_shard", f"{s.file} is in the directory but the index never names it"))
        if idx.total_size is not None:
            spans = sum(sum(s.header.columns.ends) - sum(s.header.columns.begins)
                        for s in ckpt.shards if s.header is not None and s.indexed)
            if spans != idx.total_size and not unreadable and not absent:
                out.append(finding("total_size_mismatch", f"metadata.total_size is {idx.total_size:,}; the shards' "
                                   f"tensors span {spans:,} bytes"))
    later: list[Finding] = []
    if ckpt.config_note is not None and ckpt.config_clash is None:  # (a config of another model: its own code)
        later.append(finding("config_unreadable", ckpt.config_note.line))
    config = _config_findings(ckpt, gone) if ckpt.config is not None else []
    return grouped(ckpt, gone, out, hc.findings(), hc.against_config, later, config)


def _index_findings(out: list[Finding], ckpt: Checkpoint, wm: dict[str, str], occ: Any, gone: set[str],
                    unreadable: set[str]) -> None:
    missing = sorted(n for n in filterfalse(occ.__contains__, wm) if wm[n] not in gone and wm[n] not in unreadable)
    each(out, "index_missing_tensor", missing,
         lambda n: f"index lists '{n}' in {wm[n]}, which does not hold it")
    unindexed = sorted(filterfalse(wm.__contains__, occ))
    each(out, "unindexed_tensor", unindexed,
         lambda n: f"tensor '{n}' in {occ[n][0].file} is not in the index")
    wrong = [] if agree.each_shard_named(ckpt, wm) else sorted(
        n for n, shards in occ.items()
        if n in wm and len(shards) == 1 and wm[n] != shards[0].file
        and _norm(wm[n]) != _norm(shards[0].file))  # equal names need no PurePosixPath
    each(out, "wrong_shard", wrong,
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
        self.against_config: set[int] = set()  # id() of the hc_shape findings held to the config's hc_mult
        self.jobs: list[tuple[Any, str]] = []
        # what the shapes are held to: the config's hc_mult, else a GGUF metadata's count and width
        meta = gguf_model(ckpt) if ckpt.config is None else None
        want = _Want(ckpt.config.hc_mult, None, "the config says") if ckpt.config is not None else \
            _Want(None, None, "") if meta is None else \
            _Want(meta.hc_mult, meta.dim, f"the GGUF metadata's {meta.key('hc_mult')} says",
                  f"{meta.key('dim')} {meta.dim}")
        # producers whose HC tensors may be stored below F32 on purpose: said as GGUF's are
        low_precision = ckpt.dialect.dialect in (D.MLX_LM, D.COMPRESSED_TENSORS)
        fn_budget = FN_READ_BUDGET
        # where reads cost a transfer the fn projections (2 MB a site, 169 MB for V4.1-Flash) are not fetched
        cheap = ckpt.store.bulk_reads_cheap
        out = self.items
        for s in self.sites:
            missing = [p for p in HC_PARTS if p not in s.parts]
            if missing:
                out.append(finding("hc_incomplete", f"{s.name} {s.site}: no " + ", ".join(
                    s.tensor_name(p) for p in missing), subject=s.tensor_name(missing[0])))
            for part, (shard, info) in s.parts.items():
                if info.dtype != "F32":
                    out.append(_dtype_finding(s.tensor_name(part), info, is_gguf(shard) or low_precision))
            shapes = {p: info.shape for p, (_, info) in s.parts.items()}
            problem = _hc_shape_problem(s.site, shapes, want)
            if problem:
                out.append(finding("hc_shape", f"{s.name} {s.site}: {problem}"))
                if ckpt.config is not None and _hc_shape_problem(s.site, shapes, _Want(None, None, "")) is None:
                    self.against_config.add(id(out[-1]))  # right in itself: the config's hc_mult is another
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
        return out + _gguf_findings(self.ckpt, self.sites)


def _dtype_finding(canonical: str, info, low_precision: bool) -> Finding:
    """low_precision: a GGUF or a producer that stores HC tensors below F32 on purpose (else hc_dtype)."""
    from hccli.checkpoint.gguf.store import FLOAT_TYPES, ROUNDING

    shown = f"'{info.name}'" + (f" ({canonical})" if info.name != canonical else "")
    if not low_precision or info.dtype == "F64":
        return finding("hc_dtype", f"{shown} is {info.dtype}; expected F32")
    if info.dtype in FLOAT_TYPES:
        return finding("hc_reduced_precision", f"{shown} is {info.dtype}: each value is rounded to "
                       f"{ROUNDING[info.dtype]} relative (the reference keeps HC tensors F32)")
    kind = "a packed or narrow type" if info.dtype in DTYPES else "a quantised GGML type"
    return finding("hc_quantised", f"{shown} is {info.dtype}, {kind}; the reference keeps HC tensors F32")


def _gguf_findings(ckpt: Checkpoint, sites: list) -> list[Finding]:
    """Each GGUF file's data layout, and without a config the sites its block_count implies."""
    if not any(is_gguf(s) for s in ckpt.shards):
        return []
    from hccli.checkpoint.gguf import verify as verify_gguf

    made = [item for s in ckpt.readable() if is_gguf(s) for item in verify_gguf.layout(s, MAX_FINDINGS_PER_CODE)]
    meta = gguf_model(ckpt) if ckpt.config is None else None
    if meta is not None and meta.n_layers is not None:
        made += verify_gguf.missing_sites(sites, meta.n_layers, meta.arch)
    return [more(code, n) if n else finding(code, message) for code, message, n in made]


class _Want(NamedTuple):
    """What a site's shapes are held to, and who says so."""

    hc_mult: int | None
    dim: int | None
    said: str
    dim_said: str = ""


def _hc_shape_problem(site: str, shapes: dict[str, tuple[int, ...]], want: _Want) -> str | None:
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
    if want.hc_mult is not None and hc != want.hc_mult:
        return f"shapes imply hc_mult {hc}; {want.said} {want.hc_mult}"
    if fn is not None and not fn[1]:
        return "fn has no columns; expected hc_mult x dim of them"
    if fn is not None and fn[1] % hc:
        return f"fn has {fn[1]} columns, not a multiple of hc_mult {hc}"
    if fn is not None and want.dim is not None and fn[1] != hc * want.dim:
        return f"fn has {fn[1]} columns; hc_mult x dim is {hc} x {want.dim} = {hc * want.dim:,} ({want.dim_said})"
    return None


def _config_findings(ckpt: Checkpoint, gone: GoneShards) -> list[Finding]:
    """The config's inventory against the headers, by canonical name, under the rules of the
    checkpoint's layout (reconcile.py); for the release layout, also where the tensors lie
    (placement.py)."""
    from hccli.checkpoint.verify import reconcile as R
    from hccli.model.inventory import build_inventory

    cfg = ckpt.config
    assert cfg is not None
    dialect = ckpt.dialect.dialect
    from hccli.checkpoint.verify import producers  # mlx-lm, compressed-tensors; what transformers leaves out

    inventory = build_inventory(cfg)
    if dialect in producers.PACKING:
        return [finding(code, msg) if sure or CODES[code][0] == "info" else
                Finding(code, "warning", one_line(msg + " (inventory best effort for this family)", 400))
                for code, msg, sure in producers.findings(ckpt, inventory, dialect)]
    left_out = [finding("dropped_by_producer", m) for m in producers.drop_messages(inventory, dialect, cfg)
                ] if dialect == D.TRANSFORMERS_SAVED else []
    if dialect not in R.RECONCILED:
        return []
    if dialect != D.RELEASE:
        return left_out + _inventory_findings(ckpt, inventory, dialect, gone)
    from hccli.checkpoint.verify.placement import placement_findings

    # the release's names: its inventory as it stands; where the shards agree with it, the
    # placement check starts from the same positions
    at = agree.positions(ckpt, inventory.columns)
    found = [] if at is not None else _inventory_findings(ckpt, inventory, dialect, gone)
    return found + placement_findings(ckpt, inventory, at)


def _inventory_findings(ckpt: Checkpoint, inventory: Any, dialect: str, gone: GoneShards) -> list[Finding]:
    from hccli.checkpoint.verify import producers
    from hccli.checkpoint.verify import reconcile as R

    stored = ckpt.tensors()
    inv = R.expected_layout(inventory, dialect, R.model_dtype(stored, dialect))
    all_exact = all(map(_EXACT, inv.values()))
    have, unmapped = R.canonical_tensors(stored, dialect)
    out: list[Finding] = []
    left_out: list[Finding] = []  # buffers a save leaves out: dropped_by_producer, listed first

    def shown(n: str) -> str:
        return n if have[n][1].name == n else f"{have[n][1].name}' ('{n}"

    def add(code: str, names: list[str], make, exact, cause=None) -> None:
        # where the config's inventory is best effort (V4 family, outside HC), a mismatch is a warning
        sure = [n for n in names if exact(n)]
        unsure = [n for n in names if not exact(n)]
        each(out, code, sure, make, cause)
        tail: list[Finding] = []
        each(tail, code, unsure, lambda n: make(n) + " (inventory best effort for this family)", cause)
        out.extend(replace(f, severity="warning") for f in tail)

    missing = list(filterfalse(have.__contains__, inv))
    if dialect == D.TRANSFORMERS_SAVED:  # a buffer a save may leave out is not a defect
        missing, buffers = producers.split_buffers(missing)
        left_out += [finding("dropped_by_producer", m) for m in producers.buffer_messages(buffers)]
    if dialect == D.GGUF:
        hc_missing = [n for n in missing if "hc_" in n]
        rest = [n for n in missing if "hc_" not in n]
        if rest:
            out.append(finding("partial_inventory", f"{ckpt.label} holds {len(inv) - len(missing):,} of the "
                               f"{len(inv):,} tensors llama.cpp's converter writes for this config; {len(rest):,} "
                               f"are not here (first: '{rest[0]}'), not listed one by one"))
        missing = hc_missing
    add("missing_tensor", missing,
        lambda n: f"'{n}' {inv[n].dtype or ''} {list(inv[n].shape)} is implied by the config but absent",
        lambda n: inv[n].exact, gone.cause_of if gone else None)  # absent with its shard: that shard's
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
        out.append(finding("unmapped_tensor", f"{plural(len(unmapped), 'tensor')} whose {noun_for(len(unmapped), 'name')} the {dialect} layout does not "
                      f"define (first: '{unmapped[0]}')"))
    return left_out + out
