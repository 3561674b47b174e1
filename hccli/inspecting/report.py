"""The `hc inspect` report: typed rows from a checkpoint's headers (and its HC
values), ready for tables or, field by field, JSON. Reads headers and the HC
base/scale tensors only."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hccli.checkpoint.verify.damage import absence, findings as damage_findings, site_absent
from hccli.checkpoint.hc import gguf_architecture, gguf_settings, is_gguf, split_set_problems
from hccli.checkpoint.safetensors.header_types import Columns
from hccli.checkpoint.opening import open_checkpoint
from hccli.checkpoint.shardset import Checkpoint
from hccli.names.dialects import DESCRIPTIONS, PACKING, canonical_name
from hccli.base.errors import HcError
from hccli.inspecting.doc import (
    DialectInfo,
    DtypeTotal,
    GgufInfo,
    InspectDocument,
    LayerNumbering,
    RemoteInfo,
    TensorRow,
    UnreadableShard,
    verify_exit_code,
)
from hccli.inspecting.hc import HcEntry, HcSplitEntry, read_hc_entries  # noqa: F401 - the HC entries' home; renderers import them here
from hccli.inspecting.tree import TreeNode, build_tree_columns, merged_columns, totals_from_columns
from hccli.base.vocab import BACKBONE, STAGE, owner_of

if TYPE_CHECKING:  # verify's modules load only for --verify, producers' only for a packing dialect
    from hccli.checkpoint.verify.findings import Finding, Verdict
    from hccli.checkpoint.verify.producers import ComponentTable
    from hccli.checkpoint.shardset import HcSiteTensors
    from hccli.inspecting.meta import FileMetadata
    from hccli.inspecting.stats import TensorStats


def _build_tree(ckpt: Checkpoint) -> list[TreeNode]:
    return build_tree_columns(_columns(ckpt))


@dataclass(frozen=True, slots=True)
class InspectReport:
    ckpt: Checkpoint
    n_tensors: int
    n_layers: int
    n_stages: int
    stored_bytes: int
    logical_params: int
    dtypes: dict[str, DtypeTotal]
    rows: list[TensorRow] | None
    hc: list[HcEntry]
    findings: list[Finding] | None
    hc_sites: int = 0  # HC sites found by name; those whose tensors yield no values are not in `hc`
    components: ComponentTable | None = None
    notes: list[str] = field(default_factory=list, repr=False, compare=False)  # warnings for people, not in JSON
    metadata: list[FileMetadata] | None = None  # --metadata: each file's own
    stats: list[TensorStats] | None = None  # --stats: the selected sites' HC tensors
    stats_bytes_read: int | None = None  # --stats: the bytes of their values read
    sites: tuple[HcSiteTensors, ...] = field(default=(), repr=False, compare=False)  # the HC sites selected
    damage: list[Finding] = field(default_factory=list)  # what opening found (checkpoint/verify/damage.py), --verify or not

    def with_stats(self, progress: Callable[[int, int, str], None] | None = None) -> InspectReport:
        """This report with the value statistics of its selected sites' HC tensors (read here, in
        bounded chunks: a second pass the command shows its own progress for)."""
        from hccli.inspecting.stats import hc_stats

        stats, notes, read = hc_stats(self.ckpt, list(self.sites), progress)
        return replace(self, stats=stats, stats_bytes_read=read, notes=[*self.notes, *notes])

    @property
    def tensors(self) -> dict:
        """The merged table (name -> (shard, entry)), built on first use."""
        return self.ckpt.tensors()

    def tree(self) -> list[TreeNode]:
        # only people see the tree; --json never pays for it
        return _build_tree(self.ckpt)

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings or [] if f.severity == "error")

    @property
    def exit_code(self) -> int:
        """The exit code, the document's (doc.verify_exit_code)."""
        return verify_exit_code(self.findings)

    def verdict(self) -> Verdict | None:
        """--verify's counts: root causes and findings of no cause by severity, follow-ons apart."""
        if self.findings is None:
            return None
        from hccli.checkpoint.verify.findings import verdict

        return verdict(self.findings)

    def follow_ons(self) -> dict[str, Any]:
        """root id -> what follows from it (findings.follow_ons): counts and first names per code."""
        from hccli.checkpoint.verify.findings import follow_ons

        return follow_ons(self.findings or [])

    def dialect_info(self) -> DialectInfo:
        d = self.ckpt.dialect
        return DialectInfo(d.dialect, DESCRIPTIONS.get(d.dialect, ""), d.evidence, d.note)

    def gguf_info(self) -> GgufInfo | None:
        # llama.cpp's names can be in a safetensors file too: no GGUF file, no metadata to show
        if self.ckpt.dialect.dialect != "gguf" or not any(is_gguf(s) for s in self.ckpt.shards):
            return None
        return GgufInfo(gguf_architecture(self.ckpt), gguf_settings(self.ckpt))

    def document(self) -> InspectDocument:
        c = self.ckpt
        remote = c.remote
        fields: dict[str, Any] = dict(
            path=c.label,
            kind=c.kind,
            dialect=self.dialect_info(),
            config=c.config.source if c.config else None, config_note=c.config_note,
            gguf=self.gguf_info(),
            shards=len(c.shards),
            tensors=self.n_tensors,
            stored_bytes=self.stored_bytes,
            logical_params=self.logical_params,
            dtypes=self.dtypes,
            components=self.components,
            layer_numbering=LayerNumbering(self.n_layers, self.n_stages),
            hc=self.hc,
            findings=self.findings if self.findings is not None else self.damage,
            verify_counts=self.verdict(),
            unreadable_shards=[UnreadableShard(s.file, s.error) for s in c.shards if s.header is None],
            transferred_bytes=remote.transfer.bytes if remote is not None else 0,
            remote=None if remote is None else RemoteInfo(
                repo=remote.ref.repo_id, revision=remote.ref.revision or "main", sha=remote.sha,
                subfolder=remote.ref.subfolder, endpoint=remote.endpoint, requests=remote.transfer.requests,
                cached_files=remote.transfer.cached_files, offline=remote.offline),
            verified=self.findings is not None,
        )
        return InspectDocument(**fields, metadata=self.metadata, stats_bytes_read=self.stats_bytes_read,
                               stats=self.stats, tensor_list=self.rows)


def _columns(ckpt: Checkpoint) -> list[Columns]:
    """Each header's columns when no name repeats across shards (the merged table of ~100k entries
    is built only if something asks for it), else the merged table's."""
    if ckpt.unique:
        return [s.header.columns for s in ckpt.readable()]
    return [merged_columns(ckpt.tensors())]


def _layer_of(name: str, n_layers: int) -> int | None:
    owner = owner_of(name)
    if owner is None:
        return None
    kind, num = owner
    return num if kind == BACKBONE else n_layers + num if kind == STAGE else None


def _head_mix(ckpt: Checkpoint) -> bool:
    """Whether the layer numbers end with a root head mix: the config's family says so; without
    a config, a root head mix among the HC sites does."""
    if ckpt.config is not None:
        return ckpt.config.has_head_mix
    return any(s.site == "head" and not s.is_stage for s in ckpt.hc_sites)


def _nothing_selected(ckpt: Checkpoint, tensors, name_glob: str | None, dtype: str | None,
                      layers: Collection[int] | None, layer_of: Callable[[str], int | None]) -> HcError:
    """What a tensor selection that matched nothing was matched against, and what is near: the
    option that matched nothing alone, or, each matching some, that they match none together."""
    from hccli.base.words import close_names, listed, plural
    from hccli.model.layers import format_ranges

    names = list(tensors)
    example = next((n for n in names if "hc_" in n), names[0] if names else "")
    where = f"{ckpt.label}: "
    alone = []
    if name_glob:
        hits = sum(fnmatch.fnmatchcase(n, name_glob) for n in names)
        if not hits:
            rule = (f"--name {name_glob!r} matches no tensor: it is a glob ('*', '?', '[...]') over whole tensor "
                    f"names as this checkpoint stores them ({ckpt.dialect.dialect}, e.g. {example!r})" if names else
                    f"--name {name_glob!r} matches no tensor: this checkpoint holds none")
            if names and not any(c in name_glob for c in "*?["):
                for wider in (f"{name_glob}*", f"*{name_glob}*"):
                    n = sum(fnmatch.fnmatchcase(x, wider) for x in names)
                    if n:
                        return HcError(f"{where}{rule}; {wider!r} matches {plural(n, 'tensor')}")
            close = close_names(name_glob, names)
            return HcError(where + rule + (f"; close names: {listed(close, quote=True)}" if close else ""))
        alone.append(f"--name matches {hits:,}")
    if dtype:
        hits = sum(t.dtype == dtype for _, t in tensors.values())
        if not hits:
            stored = sorted({t.dtype for _, t in tensors.values()})
            return HcError(f"{where}--dtype {dtype} matches no tensor: this checkpoint stores "
                           f"{listed(stored, n=len(stored), quote=False) or 'no tensor'}")
        alone.append(f"--dtype {hits:,}")
    if layers is not None:
        held = [layer_of(n) for n in names]
        hits = sum(x in layers for x in held)
        if not hits:
            have = sorted({x for x in held if x is not None})
            return HcError(f"{where}--layers {format_ranges(sorted(layers))} matches no tensor: tensors are under "
                           f"layers {format_ranges(have) if have else '(none)'}")
        alone.append(f"--layers {hits:,}")
    options = [a.split(" ")[0] for a in alone]
    return HcError(f"{where}no tensor matches {', '.join(options[:-1])} and {options[-1]} together "
                   f"(alone: {', '.join(alone)})")


@dataclass(frozen=True)
class InspectRequest:
    """What `hc inspect` is asked beside the checkpoint: `layers` selects tensors to list and
    `hc_layers` HC sites to read, by layer number (stages after the backbone, the root head mix
    last); `dtype` as headers spell it; `metadata`: each file's own metadata too (--stats:
    `with_stats` on the report)."""

    config: str | Path | None = None
    name_glob: str | None = None
    layers: Collection[int] | None = None
    dtype: str | None = None
    list_tensors: bool = False
    run_verify: bool = False
    metadata: bool = False
    hc_layers: Collection[int] | None = None


def build_inspect(path: str | Path, request: InspectRequest = InspectRequest(), *,
                  progress: Callable[[int, int], None] | None = None) -> InspectReport:
    """The report on the checkpoint at path (a local path or a hub name), as request selects."""
    layers, hc_layers = request.layers, request.hc_layers
    ckpt = open_checkpoint(path, config=request.config, progress=progress)
    n_layers, n_stages = ckpt.n_layers, ckpt.n_stages
    if layers is not None or hc_layers is not None:
        from hccli.model.layers import check_layer_range  # (the layer plan's module: loaded for a selection only)

        # a LayerSpec (mtp.N, head) becomes this checkpoint's numbers; one past them is the one line
        layers, hc_layers = (None if chosen is None else
                             check_layer_range(chosen, n_layers, n_stages, _head_mix(ckpt), ckpt.label)
                             for chosen in (layers, hc_layers))
    n_tensors, per_dtype, logical = totals_from_columns(_columns(ckpt))
    table = None
    if ckpt.dialect.dialect in PACKING:
        from hccli.checkpoint.verify.producers import component_table

        table = component_table(ckpt, ckpt.dialect.dialect)
    logical = table.logical_params if table is not None else logical  # the packing's own count
    dtypes = {d: DtypeTotal(*v) for d, v in per_dtype.items()}
    stored = sum(d.bytes for d in dtypes.values())
    rows = None
    if request.name_glob or layers is not None or request.dtype or request.list_tensors:
        tensors = ckpt.tensors()
        rows = []
        dialect = ckpt.dialect.dialect
        canonical = (lambda n: n) if dialect == "release" else (lambda n: canonical_name(n, dialect) or n)
        for name, (shard, t) in tensors.items():
            if request.name_glob and not fnmatch.fnmatchcase(name, request.name_glob):
                continue
            if request.dtype and t.dtype != request.dtype:
                continue
            if layers is not None and _layer_of(canonical(name), n_layers) not in layers:
                continue
            rows.append(TensorRow(name, t.dtype, t.shape, t.nbytes, shard.file, t.abs_begin))
        if not rows and (request.name_glob or layers is not None or request.dtype):
            raise _nothing_selected(ckpt, tensors, request.name_glob, request.dtype, layers,
                                    lambda n: _layer_of(canonical(n), n_layers))
    sites = list(ckpt.hc_sites)
    if hc_layers is not None:
        have = sorted({s.layer for s in sites})
        sites = [s for s in sites if s.layer in hc_layers]
        if not sites:
            from hccli.model.layers import format_ranges

            gone = absence(ckpt)
            for layer in sorted(hc_layers):  # a shard that is gone took them: name it
                why = next(filter(None, (site_absent(ckpt, layer, s, gone) for s in ("attn", "ffn", "head"))), None)
                if why is not None:
                    raise HcError(f"{ckpt.label}: no HC sites at layer {layer}: {why}")
            where = f"HC sites at layers {format_ranges(have)}" if have else "no hc_* tensors"
            raise HcError(f"{ckpt.label}: no HC sites at layer {format_ranges(sorted(hc_layers))}; "
                          f"this checkpoint has {where}")
    entries, notes = read_hc_entries(ckpt, sites)
    findings = None
    if request.run_verify:
        from hccli.checkpoint.verify.checks import verify

        findings = verify(ckpt)
    else:  # (--verify words these as findings; unreadable parts the command warns of itself, missing ones damage)
        notes = split_set_problems(ckpt, unreadable=False, missing=False) + notes
    meta = None
    if request.metadata:
        from hccli.inspecting.meta import file_metadata

        meta = file_metadata(ckpt)
    return InspectReport(ckpt, n_tensors, n_layers, n_stages, stored, logical, dtypes, rows,
                         entries, findings, len(sites), components=table, notes=notes, metadata=meta,
                         sites=tuple(sites), damage=damage_findings(ckpt))
