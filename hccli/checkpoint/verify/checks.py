"""Verification findings: the index against the shard headers, the HC tensors
against each other and hc_mult, and (with a config) the inventory against the
headers. Each finding has a stable code and a severity ("error" | "warning").

Every finding is returned (a caller that shows people a summary cuts it there), and
no value is read whose size only a hostile header vouches for: base and scale within
the hc_mult bound, fn projections in chunks, within facts.FN_READ_BUDGET bytes a run. A code
lists at most findings.MAX_FINDINGS_PER_CODE findings, then one that counts the rest.

`verify` is one pass: the checkpoint's facts gathered once (facts.gather), each check below a
function of them returning its findings, the root causes named once over all of them
(causes.grouped), the caps last (findings.capped)."""

from __future__ import annotations

from dataclasses import replace
from itertools import compress, filterfalse
from operator import and_, attrgetter, itemgetter, ne
from pathlib import PurePosixPath
from typing import Any

from hccli.base.words import noun_for, plural
from hccli.names import dialects as D
from hccli.base.bounded import one_line
from hccli.checkpoint.verify.causes import grouped
from hccli.checkpoint.verify.facts import FN_READ_BUDGET, Facts, HcPart, HcWant, gather
from hccli.checkpoint.verify.findings import CODES, MAX_FINDINGS_PER_CODE, Finding, capped, each, finding, more  # noqa: F401
from hccli.checkpoint.safetensors.header_types import DTYPES
from hccli.checkpoint.shardset import Checkpoint
from hccli.base.vocab import MAX_HC_MULT, hc_from_mix_width

_INFO, _SHAPE, _DTYPE, _EXACT = itemgetter(1), attrgetter("shape"), attrgetter("dtype"), attrgetter("exact")
_SIGNATURE = attrgetter("dtype", "shape")  # equal for every tensor: no wrong shape, no wrong dtype
_NO_WANT = HcWant(None, None, "")


def verify(ckpt: Checkpoint, *, check_values: bool = True) -> list[Finding]:
    """Every finding, at most MAX_FINDINGS_PER_CODE of a code (findings.capped), each that follows
    from a root cause naming it (causes.py)."""
    facts = gather(ckpt, check_values)
    hc, against = _hc_findings(facts)
    return capped(grouped(facts, _index_findings(facts), hc + _gguf_findings(facts), against,
                          _config_note(facts), _config_findings(facts)))


def _index_findings(facts: Facts) -> list[Finding]:
    """The shards gone, .partial files, and the index against the headers."""
    ckpt = facts.ckpt
    out = list(facts.shard_roots)
    for name in ckpt.partial:
        out.append(finding("partial_file", f"'{name}' is a .partial file (an interrupted download or write?); "
                           "the checkpoint may be incomplete"))
    idx, occ = ckpt.index, facts.occurrences
    if occ is not None and not ckpt.unique:
        dups = sorted(n for n, shards in occ.items() if len(shards) > 1)
        each(out, "duplicate_tensor", dups,
             lambda n: f"tensor '{n}' is in {len(occ[n])} shards: " + ", ".join(s.file for s in occ[n]))
    each(out, "duplicate_spelling", facts.spellings,
         lambda pair: f"'{one_line(pair[0], 120)}' and '{one_line(pair[1], 120)}' both spell "
                      f"'{one_line(pair[2], 120)}'; expected one name per tensor (a loader may take either)")
    if idx is None:
        if ckpt.kind == "directory" and len(ckpt.shards) > 1 and not facts.first_is_gguf:
            out.append(finding("no_index",
                               f"{ckpt.label}: {len(ckpt.shards)} shards and no model.safetensors.index.json"))
        return out
    absent = {*ckpt.unsafe, *ckpt.missing}
    unreadable = {s.file for s in ckpt.shards if s.header is None}
    if occ is not None:  # (the weight_map is read only here, where the index does not agree)
        _weight_map_findings(out, facts, idx.weight_map, occ, absent, unreadable)
    for s in ckpt.shards:
        if not s.indexed:
            out.append(finding("unindexed_shard", f"{s.file} is in the directory but the index never names it"))
    spans = facts.indexed_spans
    if idx.total_size is not None and spans != idx.total_size and not unreadable and not absent:
        out.append(finding("total_size_mismatch", f"metadata.total_size is {idx.total_size:,}; the shards' "
                           f"tensors span {spans:,} bytes"))
    return out


def _weight_map_findings(out: list[Finding], facts: Facts, wm: dict[str, str], occ: Any, gone: set[str],
                         unreadable: set[str]) -> None:
    missing = sorted(n for n in filterfalse(occ.__contains__, wm) if wm[n] not in gone and wm[n] not in unreadable)
    each(out, "index_missing_tensor", missing,
         lambda n: f"index lists '{n}' in {wm[n]}, which does not hold it")
    unindexed = sorted(filterfalse(wm.__contains__, occ))
    each(out, "unindexed_tensor", unindexed,
         lambda n: f"tensor '{n}' in {occ[n][0].file} is not in the index")
    wrong = [] if facts.each_shard_named else sorted(
        n for n, shards in occ.items()
        if n in wm and len(shards) == 1 and wm[n] != shards[0].file
        and _norm(wm[n]) != _norm(shards[0].file))  # equal names need no PurePosixPath
    each(out, "wrong_shard", wrong,
         lambda n: f"tensor '{n}' is in {occ[n][0].file}; the index says {wm[n]}")


def _norm(name: str) -> str:
    return str(PurePosixPath(name.replace("\\", "/")))


def _hc_findings(facts: Facts) -> tuple[list[Finding], set[int]]:
    """The HC checks in site order: parts lacking, dtypes, shapes, the values read; and the id()
    of the hc_shape findings held to the config's hc_mult that are right in themselves."""
    # producers whose HC tensors may be stored below F32 on purpose: said as GGUF's are
    low_precision = facts.ckpt.dialect.dialect in (D.MLX_LM, D.COMPRESSED_TENSORS)
    out: list[Finding] = []
    against: set[int] = set()
    for s in facts.sites:
        if s.lacking:
            out.append(finding("hc_incomplete", f"{s.name} {s.site}: no " + ", ".join(s.lacking),
                               subject=s.lacking[0]))
        for p in s.parts.values():
            if p.dtype != "F32":
                out.append(_dtype_finding(p, p.in_gguf or low_precision))
        shapes = {part: p.shape for part, p in s.parts.items()}
        problem = _hc_shape_problem(s.site, shapes, facts.want)
        if problem:
            out.append(finding("hc_shape", f"{s.name} {s.site}: {problem}"))
            if facts.against_config and _hc_shape_problem(s.site, shapes, _NO_WANT) is None:
                against.add(id(out[-1]))  # right in itself: the config's hc_mult is another
        for part, bad, why, over in s.values:
            p = s.parts[part]
            if over:
                out.append(finding("hc_unchecked", f"'{p.canonical}' ({over:,} bytes) not read: "
                                   f"past the {FN_READ_BUDGET:,} bytes of fn values one verify reads"))
            elif why is not None:
                out.append(finding("hc_unchecked", f"'{p.stored}' not read: {why}"))
            elif bad:
                out.append(finding("hc_nonfinite", f"'{p.stored}' holds {bad} NaN/Inf values"))
    return out, against


def _dtype_finding(p: HcPart, low_precision: bool) -> Finding:
    """low_precision: a GGUF or a producer that stores HC tensors below F32 on purpose (else hc_dtype)."""
    from hccli.checkpoint.gguf.store import FLOAT_TYPES, ROUNDING

    shown = f"'{p.stored}'" + (f" ({p.canonical})" if p.stored != p.canonical else "")
    if not low_precision or p.dtype == "F64":
        return finding("hc_dtype", f"{shown} is {p.dtype}; expected F32")
    if p.dtype in FLOAT_TYPES:
        return finding("hc_reduced_precision", f"{shown} is {p.dtype}: each value is rounded to "
                       f"{ROUNDING[p.dtype]} relative (the reference keeps HC tensors F32)")
    kind = "a packed or narrow type" if p.dtype in DTYPES else "a quantised GGML type"
    return finding("hc_quantised", f"{shown} is {p.dtype}, {kind}; the reference keeps HC tensors F32")


def _gguf_findings(facts: Facts) -> list[Finding]:
    """Each GGUF file's data layout, and without a config the sites its block_count implies."""
    if not facts.any_gguf:
        return []
    from hccli.checkpoint.gguf import verify as verify_gguf

    ckpt, meta = facts.ckpt, facts.gguf_meta
    made = [item for s in facts.gguf_readable for item in verify_gguf.layout(s, MAX_FINDINGS_PER_CODE)]
    if meta is not None and meta.n_layers is not None:
        made += verify_gguf.missing_sites(list(ckpt.hc_sites), meta.n_layers, meta.arch)
    return [more(code, n) if n else finding(code, message) for code, message, n in made]


def _hc_shape_problem(site: str, shapes: dict[str, tuple[int, ...]], want: HcWant) -> str | None:
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


def _config_note(facts: Facts) -> list[Finding]:
    ckpt = facts.ckpt
    if ckpt.config_note is not None and ckpt.config_clash is None:  # (a config of another model: its own code)
        return [finding("config_unreadable", ckpt.config_note.line)]
    return []


def _config_findings(facts: Facts) -> list[Finding]:
    """The config's inventory against the headers, by canonical name, under the rules of the
    checkpoint's layout (reconcile.py); for the release layout, also where the tensors lie
    (placement.py)."""
    ckpt, inventory = facts.ckpt, facts.inventory
    if inventory is None:
        return []
    dialect = ckpt.dialect.dialect
    from hccli.checkpoint.verify import producers  # mlx-lm, compressed-tensors; what transformers leaves out

    if dialect in D.PACKING:
        return [finding(code, msg) if sure or CODES[code][0] == "info" else
                Finding(code, "warning", one_line(msg + " (inventory best effort for this family)", 400))
                for code, msg, sure in producers.findings(ckpt, inventory, dialect)]
    left_out = [finding("dropped_by_producer", m) for m in producers.drop_messages(inventory, dialect, ckpt.config)
                ] if dialect == D.TRANSFORMERS_SAVED else []
    found = _inventory_findings(facts) if facts.stored is not None else []
    if dialect != D.RELEASE:
        return left_out + found
    from hccli.checkpoint.verify.placement import placement_findings

    return found + placement_findings(ckpt, inventory, facts.positions)


def _inventory_findings(facts: Facts) -> list[Finding]:
    from hccli.checkpoint.verify import producers

    ckpt = facts.ckpt
    dialect = ckpt.dialect.dialect
    have, unmapped, inv = facts.stored
    all_exact = all(map(_EXACT, inv.values()))
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
        lambda n: inv[n].exact, (lambda n: facts.gone_sole or facts.gone_causes.get(n))
        if facts.shard_roots else None)  # absent with its shard: that shard's
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
