"""The facts one verification needs, gathered once, in one place: `gather` reads the opened
checkpoint and everything below it, and gives a frozen `Facts`.

Verification runs in one direction: gather the facts (here) -> run the checks, each a function
of the facts returning findings (checks.py, and the layout rules of producers.py, placement.py
and gguf/verify.py) -> group the findings by root cause (causes.grouped, once, at the end) ->
cap them (findings.capped). No check asks another module to work out a fact again: what the
shards, the index, the HC sites and the config's inventory say is here, in the words the checks
use, so a reader of a check sees every input it has in one record.

What is gathered costs what the checks of it cost before and no more: a fact that only a
disagreement needs (the table of name occurrences, the stored tensors by canonical name) is
worked out only where the short answers of agree.py say "look closer".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from hccli.base.bounded import one_line
from hccli.base.errors import HcError
from hccli.base.vocab import HC_PARTS
from hccli.base.words import plural
from hccli.checkpoint.hc import MAX_MIX_BYTES, count_nonfinite, gguf_model, is_gguf, second_spellings
from hccli.checkpoint.shardset import Checkpoint
from hccli.checkpoint.verify import agree
from hccli.checkpoint.verify.findings import Finding, finding
from hccli.names import dialects as D

# fn bytes one verify reads at most: V4-Pro's projections are ~340 MB in all; past this a
# header would make verify read for minutes (a sparse file costs no disk for its claim).
FN_READ_BUDGET = 2 << 30

# HC owners (layers.3, mtp.0, head) a gone shard's finding names; the rest are counted
OWNERS_NAMED = 6


class GoneShards:
    """The shards whose tensors are not there to check: unreadable, missing, outside the checkpoint,
    and what the index places in each."""

    def __init__(self, ckpt: Checkpoint):
        self.ckpt = ckpt
        self.code = {**{s.file: "unreadable_shard" for s in ckpt.shards if s.header is None},
                     **dict.fromkeys(ckpt.unsafe, "unsafe_shard_path"), **dict.fromkeys(ckpt.missing, "missing_shard")}
        self._held: dict[str, list[str]] | None = None
        self._by_name: dict[str, str] | None = None

    def __bool__(self) -> bool:
        return bool(self.code)

    def id_of(self, file: str) -> str:
        return f"{self.code[file]}:{one_line(file, 200)}"

    def held(self) -> dict[str, list[str]]:
        """file -> the names the index places there (none without an index), one pass over it."""
        if self._held is None:
            out: dict[str, list[str]] = {f: [] for f in self.code}
            if self.ckpt.index is not None:
                for name, file in self.ckpt.index.weight_map.items():
                    got = out.get(file)
                    if got is not None:
                        got.append(name)
            self._held = out
        return self._held

    def roots(self) -> list[Finding]:
        """Each gone shard's finding, saying what the index places there: the unreadable ones in
        the shards' order, then those outside the checkpoint, then those named and not there."""
        out = [self._root(s.file, s.error or f"{s.file}: unreadable") for s in self.ckpt.shards if s.header is None]
        out += [self._root(name, f"index names shard '{name}', outside the checkpoint directory; not opened")
                for name in self.ckpt.unsafe]
        return out + self.missing_roots()

    def missing_roots(self) -> list[Finding]:
        """A missing_shard finding per shard file named and not there."""
        ckpt = self.ckpt
        out = []
        for name in ckpt.missing:
            if ckpt.index is not None:
                said = f"index names shard '{name}', which is not in {ckpt.label}"
            elif name.endswith(".gguf"):
                said = (f"part '{name}' of the split set is missing from {ckpt.label}; its names imply "
                        f"{len(ckpt.shards) + len(ckpt.missing)} parts")
            else:
                said = f"the other shards' -of-N names imply shard '{name}', which is not in {ckpt.label}"
            out.append(self._root(name, said))
        return out

    def _root(self, file: str, message: str) -> Finding:
        return finding(self.code[file], message + self._contents(file), root_id=self.id_of(file))

    def _contents(self, file: str) -> str:
        if self.ckpt.index is None:
            return ""
        names = self.held()[file]
        dialect = self.ckpt.dialect.dialect
        owners: dict[str, list[str]] = {}
        for hn in filter(None, (D.hc_name(n, dialect) for n in names)):
            sites = owners.setdefault(hn.owner or "head", [])
            if hn.site not in sites:
                sites.append(hn.site)
        if not owners:
            return f"; the index places {plural(len(names), 'tensor')} there, none of them HC"
        order = sorted(owners, key=lambda o: (o == "head", o.split(".")[0], int(o.split(".")[-1]) if "." in o else 0))
        shown = ", ".join(f"{o} ({', '.join(owners[o])})" if o != "head" else o for o in order[:OWNERS_NAMED])
        rest = f" and {len(order) - OWNERS_NAMED:,} more" if len(order) > OWNERS_NAMED else ""
        sites = sum(map(len, owners.values()))
        return (f"; the index places {plural(len(names), 'tensor')} there, those of {plural(sites, 'HC site')} among them: "
                f"{shown}{rest}")

    def file_of(self, canonical: str | None) -> str | None:
        """The gone shard a tensor (canonical name) was in, else None; without an index, the one
        gone shard where there is only one (with several, none is named)."""
        if not self.code or canonical is None:
            return None
        if self.ckpt.index is None:
            return next(iter(self.code)) if len(self.code) == 1 else None
        return self.by_name().get(canonical)

    def by_name(self) -> dict[str, str]:
        """canonical name -> the gone shard the index places it in, worked out once."""
        if self._by_name is None:
            dialect = self.ckpt.dialect.dialect
            self._by_name = {(n if dialect == D.RELEASE else D.canonical_name(n, dialect) or n): f
                             for f, names in self.held().items() for n in names}
        return self._by_name

    def cause_of(self, canonical: str | None) -> str | None:
        """The root id of the gone shard a tensor (canonical name) was in, else None."""
        file = self.file_of(canonical)
        return None if file is None else self.id_of(file)


class Single:
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


class HcWant(NamedTuple):
    """What a site's shapes are held to, and who says so."""

    hc_mult: int | None
    dim: int | None
    said: str
    dim_said: str = ""


class HcPart(NamedTuple):
    """One HC tensor of a site, as the checks see it."""

    canonical: str
    stored: str  # as the checkpoint spells it
    shape: tuple[int, ...]
    dtype: str
    in_gguf: bool
    nbytes: int


class SiteFacts(NamedTuple):
    """An HC site's parts, and what verify found of their values: per part read or set aside,
    (part, NaN/Inf count or None, why it was not read or None, bytes past the fn budget or 0)."""

    name: str
    site: str
    lacking: tuple[str, ...]  # canonical names of the parts it has not
    parts: dict[str, HcPart]
    values: tuple[tuple[str, int | None, str | None, int], ...]


@dataclass(frozen=True, slots=True)
class Facts:
    ckpt: Checkpoint
    gone: GoneShards
    shard_roots: list[Finding]  # GoneShards.roots()
    gone_causes: dict[str, str]  # canonical name -> the root id of the gone shard it was in
    gone_sole: str | None  # without an index, the root id of the one gone shard (every absent name's)
    occurrences: Any  # name -> its shards; None where the index agrees with the headers
    each_shard_named: bool  # agree.each_shard_named, where the index does not agree
    spellings: list[tuple[str, str, str]]  # hc.second_spellings
    first_is_gguf: bool
    any_gguf: bool
    gguf_readable: list  # the readable GGUF files, whose data layouts are checked
    indexed_spans: int  # the byte spans of the tensors of the readable shards the index names
    want: HcWant
    sites: tuple[SiteFacts, ...]
    against_config: bool  # the sites' shapes are held to the config's hc_mult
    gguf_meta: Any  # a GGUF's own model settings where there is no config
    inventory: Any  # the config's, else None
    positions: list[int] | None  # agree.positions of a release's inventory
    stored: Any  # Stored, where the inventory is compared name by name


class Stored(NamedTuple):
    """The stored tensors by canonical name, and what the layout implies of each."""

    have: dict[str, Any]
    unmapped: list[str]
    expected: dict[str, Any]


def gather(ckpt: Checkpoint, check_values: bool = True) -> Facts:
    gone = GoneShards(ckpt)
    idx = ckpt.index
    named = True
    if idx is not None and agree.index_agrees(ckpt, idx.weight_map):
        occ: Any = None  # no duplicate and nothing the index misplaces: no table of names to build
    else:
        occ = Single(ckpt.tensors()) if ckpt.unique else ckpt.occurrences()
        named = idx is not None and agree.each_shard_named(ckpt, idx.weight_map)
    spellings = second_spellings(ckpt)
    spans = 0
    if idx is not None and idx.total_size is not None:
        spans = sum(sum(s.header.columns.ends) - sum(s.header.columns.begins)
                    for s in ckpt.shards if s.header is not None and s.indexed)
    any_gguf = any(is_gguf(s) for s in ckpt.shards)
    meta = gguf_model(ckpt) if ckpt.config is None else None
    # what the shapes are held to: the config's hc_mult, else a GGUF metadata's count and width
    want = HcWant(ckpt.config.hc_mult, None, "the config says") if ckpt.config is not None else \
        HcWant(None, None, "") if meta is None else \
        HcWant(meta.hc_mult, meta.dim, f"the GGUF metadata's {meta.key('hc_mult')} says",
               f"{meta.key('dim')} {meta.dim}")
    inventory, at, stored = _inventory_facts(ckpt)
    causes: dict[str, str] = {}
    sole = None
    if gone.code and idx is not None:
        causes = {name: gone.id_of(file) for name, file in gone.by_name().items()}
    elif len(gone.code) == 1:
        sole = gone.id_of(next(iter(gone.code)))
    gguf_readable = [s for s in ckpt.readable() if is_gguf(s)] if any_gguf else []
    return Facts(ckpt, gone, gone.roots(), causes, sole, occ, named, spellings, is_gguf(ckpt.shards[0]), any_gguf,
                 gguf_readable, spans, want, tuple(_sites(ckpt, check_values)), ckpt.config is not None, meta,
                 inventory, at, stored)


def _sites(ckpt: Checkpoint, check_values: bool) -> list[SiteFacts]:
    """Each HC site's parts, and its values read (base and scale within the hc_mult bound, fn
    projections within FN_READ_BUDGET a run, and not at all where reads cost a transfer)."""
    fn_budget = FN_READ_BUDGET
    # where reads cost a transfer the fn projections (2 MB a site, 169 MB for V4.1-Flash) are not fetched
    cheap = ckpt.store.bulk_reads_cheap
    out = []
    sources: dict[str, Any] = {}  # each shard opened once for the HC tensors it holds (two sites' worth)
    try:
        for s in ckpt.hc_sites:
            parts = {p: HcPart(s.tensor_name(p), info.name, info.shape, info.dtype, is_gguf(shard), info.nbytes)
                     for p, (shard, info) in s.parts.items()}
            values = []
            read = ("base", "scale", "fn") if check_values and cheap else ("base", "scale") if check_values else ()
            for part in read:
                got = parts.get(part)
                if got is None or (got.dtype != "F32" and not got.in_gguf):
                    continue
                if part != "fn" and got.nbytes > MAX_MIX_BYTES:
                    continue  # past the hc_mult bound: a shape finding, and its claimed size is not read
                if part == "fn":
                    if got.nbytes > fn_budget:
                        values.append((part, None, None, got.nbytes))
                        continue
                    fn_budget -= got.nbytes
                try:
                    shard = s.parts[part][0]
                    if shard.file not in sources:
                        sources[shard.file] = ckpt.source(shard)
                    values.append((part, count_nonfinite(ckpt, s, part, sources[shard.file]), None, 0))
                except HcError as exc:  # a GGML type the gguf package cannot decode, past a bound, ...
                    values.append((part, None, exc.message, 0))
            out.append(SiteFacts(s.name, s.site, tuple(s.tensor_name(p) for p in HC_PARTS if p not in s.parts),
                                 parts, tuple(values)))
    finally:
        for src in sources.values():
            src.close()
    return out


def _inventory_facts(ckpt: Checkpoint) -> tuple[Any, list[int] | None, Stored | None]:
    """(the config's inventory, where a release's tensors are among the shards' entries when they
    agree with it, the stored tensors by canonical name where they are compared one by one)."""
    cfg = ckpt.config
    if cfg is None:
        return None, None, None
    from hccli.checkpoint.verify import reconcile as R
    from hccli.model.inventory import build_inventory

    dialect = ckpt.dialect.dialect
    inventory = build_inventory(cfg)
    if dialect not in R.RECONCILED:  # (mlx-lm's and compressed-tensors' rules are producers.py's own)
        return inventory, None, None
    # the release's names: its inventory as it stands; where the shards agree with it, the
    # placement check starts from the same positions
    at = agree.positions(ckpt, inventory.columns) if dialect == D.RELEASE else None
    if at is not None:
        return inventory, at, None
    tensors = ckpt.tensors()
    expected = R.expected_layout(inventory, dialect, R.model_dtype(tensors, dialect))
    have, unmapped = R.canonical_tensors(tensors, dialect)
    return inventory, None, Stored(have, unmapped, expected)
