"""The `hc inspect` report: typed rows from a checkpoint's headers (and its HC
values), ready for tables or, field by field, JSON. Reads headers and the HC
base/scale tensors only."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hccli.checkpoint.hc import (
    HcSiteTensors,
    dialect_of,
    find_hc,
    gguf_architecture,
    gguf_settings,
    is_gguf,
    layer_counts,
    op_settings,
    read_base_scale_lists,
    site_hc,
)
from hccli.checkpoint.header import Columns
from hccli.checkpoint.shardset import Checkpoint, open_checkpoint
from hccli.dialects import DESCRIPTIONS, canonical_name
from hccli.errors import HcError
from hccli.inspect_tree import (
    TreeNode,
    build_tree_columns,
    merged_columns,
    totals_from_columns,
)
from hccli.layers import format_ranges
from hccli.sinkhorn_f32 import head_pre_zero, split_sinkhorn_zero, supports
from hccli.vocab import BACKBONE, STAGE, owner_of

if TYPE_CHECKING:  # verify's modules load only for --verify
    from hccli.checkpoint.verify import Finding


@dataclass(frozen=True)
class TensorRow:
    name: str
    dtype: str
    shape: tuple[int, ...]
    bytes: int
    shard: str
    offset: int  # of its first byte in the shard file


@dataclass(frozen=True, slots=True)
class DtypeTotal:
    tensors: int
    bytes: int


@dataclass(frozen=True, slots=True)
class HeadParts:
    """A head mix's base: hc pre offsets, nothing else."""

    pre: list[float]


@dataclass(frozen=True, slots=True)
class SplitParts:
    """An attn/ffn site's base, (2 + hc) * hc values: pre, post, then the comb rows."""

    pre: list[float]
    post: list[float]
    comb: list[list[float]]


@dataclass(frozen=True, slots=True)
class HcEntry:
    """One HC site's values and what its base alone yields (mixes = 0). As is, the root
    or a stage's head mix (no Sinkhorn there); attn and ffn sites are HcSplitEntry."""

    layer: int
    name: str  # "layers.3", "mtp.0" or "head"
    site: str
    stage: bool
    scale: list[float]
    base: list[float]
    base_parts: HeadParts | SplitParts
    pre_from_base: list[float]

    @property
    def hc(self) -> int:
        return len(self.pre_from_base)


@dataclass(frozen=True, slots=True)
class HcSplitEntry(HcEntry):
    post_from_base: list[float]
    comb_from_base: list[list[float]]


@dataclass(frozen=True, slots=True)
class UnreadableShard:
    file: str
    error: str | None


@dataclass(frozen=True, slots=True)
class LayerNumbering:
    n_layers: int
    n_stages: int
    stages: str = "numbered n_layers + s, named mtp.s"
    root_head: str = "numbered n_layers + n_stages, named head"


@dataclass(frozen=True, slots=True)
class RemoteInfo:
    repo: str
    revision: str
    sha: str
    subfolder: str | None
    endpoint: str
    requests: int
    cached_files: int
    offline: bool


@dataclass(frozen=True, slots=True)
class DialectInfo:
    name: str  # dialects.DIALECTS, or "unknown"
    description: str
    evidence: str  # the first name that decided it
    note: str


@dataclass(frozen=True, slots=True)
class GgufInfo:
    architecture: str
    settings: dict[str, Any]  # the `{architecture}.*` metadata keys, prefix removed


@dataclass(frozen=True, slots=True)
class InspectDocument:
    """`hc inspect --json`, field by field in its order."""

    path: str
    kind: str
    dialect: DialectInfo
    config: str | None
    gguf: GgufInfo | None
    shards: int
    tensors: int
    stored_bytes: int
    logical_params: int
    dtypes: dict[str, DtypeTotal]
    layer_numbering: LayerNumbering
    hc: list[HcEntry]
    findings: list[Finding]
    unreadable_shards: list[UnreadableShard]
    transferred_bytes: int
    remote: RemoteInfo | None
    verified: bool


@dataclass(frozen=True, slots=True)
class InspectListDocument(InspectDocument):
    """The document when tensors were listed: the list comes last."""

    tensor_list: list[TensorRow]


def read_hc_entries(ckpt: Checkpoint, sites: list[HcSiteTensors]) -> list[HcEntry]:
    iters, eps = op_settings(ckpt)
    usable = [s for s in sites if site_hc(s) is not None
              and all(s.parts[p][1].dtype == "F32" or is_gguf(s.parts[p][0]) for p in ("base", "scale"))]
    # (the others are --verify's to report: hc_incomplete / hc_shape / hc_dtype; nothing to compute,
    # and nothing read: a header past the hc_mult bound may claim gigabytes)

    def read(s: HcSiteTensors):
        base, scale = read_base_scale_lists(ckpt, s)
        return s, base, scale

    workers = ckpt.store.workers if ckpt.store is not None else 1
    if workers > 1:  # each read is a round trip: overlap them
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2 * workers) as pool:
            values = list(pool.map(read, usable))
    else:
        values = [read(s) for s in usable]
    out: dict[int, HcEntry] = {}
    # the sites of one shape go through the op together, one row each (mixes = 0)
    by_shape: dict[tuple[int, bool], list] = {}
    for i, (s, base, scale) in enumerate(values):
        by_shape.setdefault((site_hc(s), s.site == "head"), []).append(i)
    for (hc, head), idx in by_shape.items():
        bases, scales = [values[i][1] for i in idx], [values[i][2] for i in idx]
        if head:
            pre = head_pre_zero(bases, scales, eps)
        elif supports(hc):
            pre, post, comb = split_sinkhorn_zero(bases, scales, hc, iters, eps)
        else:  # no pure halving tree: numpy's op (sinkhorn_np.py)
            pre, post, comb = _split_sinkhorn_np(bases, scales, hc, iters, eps)
        for row, i in enumerate(idx):
            s, b, scale = values[i]
            common = (s.layer, s.name, s.site, s.is_stage, scale, b)
            if head:
                out[i] = HcEntry(*common, HeadParts(b), pre[row])
            else:
                parts = SplitParts(b[:hc], b[hc:2 * hc], [b[(2 + j) * hc:(3 + j) * hc] for j in range(hc)])
                out[i] = HcSplitEntry(*common, parts, pre[row], post[row], comb[row])
    return [out[i] for i in sorted(out)]


def _split_sinkhorn_np(bases: list, scales: list, hc: int, iters: int, eps: float) -> tuple[list, list, list]:
    import numpy as np

    from hccli.sinkhorn_np import split_sinkhorn

    b = np.array(bases, dtype=np.float32)
    with np.errstate(all="ignore"):
        pre, post, comb = split_sinkhorn(np.zeros_like(b), np.array(scales, dtype=np.float32), b, hc, iters, eps)
    return pre.tolist(), post.tolist(), comb.tolist()


def _build_tree(ckpt: Checkpoint) -> list[TreeNode]:
    return build_tree_columns(_columns(ckpt))


@dataclass
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

    def dialect_info(self) -> DialectInfo:
        d = dialect_of(self.ckpt)
        return DialectInfo(d.dialect, DESCRIPTIONS.get(d.dialect, ""), d.evidence, d.note)

    def gguf_info(self) -> GgufInfo | None:
        # llama.cpp's names can be in a safetensors file too: no GGUF file, no metadata to show
        if dialect_of(self.ckpt).dialect != "gguf" or not any(is_gguf(s) for s in self.ckpt.shards):
            return None
        return GgufInfo(gguf_architecture(self.ckpt), gguf_settings(self.ckpt))

    def document(self) -> InspectDocument:
        c = self.ckpt
        remote = c.remote
        fields: dict[str, Any] = dict(
            path=c.label,
            kind=c.kind,
            dialect=self.dialect_info(),
            config=c.config.source if c.config else None,
            gguf=self.gguf_info(),
            shards=len(c.shards),
            tensors=self.n_tensors,
            stored_bytes=self.stored_bytes,
            logical_params=self.logical_params,
            dtypes=self.dtypes,
            layer_numbering=LayerNumbering(self.n_layers, self.n_stages),
            hc=self.hc,
            findings=self.findings if self.findings is not None else [],
            unreadable_shards=[UnreadableShard(s.file, s.error) for s in c.shards if s.header is None],
            transferred_bytes=remote.transfer.bytes if remote is not None else 0,
            remote=None if remote is None else RemoteInfo(
                repo=remote.ref.repo_id, revision=remote.ref.revision or "main", sha=remote.sha,
                subfolder=remote.ref.subfolder, endpoint=remote.endpoint, requests=remote.transfer.requests,
                cached_files=remote.transfer.cached_files, offline=remote.offline),
            verified=self.findings is not None,
        )
        if self.rows is not None:
            return InspectListDocument(**fields, tensor_list=self.rows)
        return InspectDocument(**fields)


def _columns(ckpt: Checkpoint) -> list[Columns]:
    """Each header's columns when no name repeats across shards (the merged table of ~100k entries
    is built only if something asks for it), else the merged table's."""
    if ckpt.names_unique():
        return [s.header.columns for s in ckpt.readable()]
    return [merged_columns(ckpt.tensors())]


def _layer_of(name: str, n_layers: int) -> int | None:
    owner = owner_of(name)
    if owner is None:
        return None
    kind, num = owner
    return num if kind == BACKBONE else n_layers + num if kind == STAGE else None


def _check_layers(what: str, layers: Collection[int], label: str, n_layers: int, n_stages: int) -> None:
    last = n_layers + n_stages  # the root head mix's number, whether or not the family has one
    past = [n for n in layers if n > last]
    if past:
        kinds = [f"backbone {format_ranges(list(range(n_layers)))}"] if n_layers else []
        kinds += [f"stages {format_ranges(list(range(n_layers, last)))}"] if n_stages else []
        kinds.append(f"root head mix {last}")
        raise HcError(f"{label}: layer {max(past)} for {what} is out of range; this checkpoint numbers its layers "
                      f"0-{last} ({', '.join(kinds)})")


def build_inspect(
    path: str | Path,
    *,
    config: str | Path | None = None,
    name_glob: str | None = None,
    layers: Collection[int] | None = None,
    dtype: str | None = None,
    list_tensors: bool = False,
    run_verify: bool = False,
    hc_layers: Collection[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> InspectReport:
    """`layers` selects tensors to list and `hc_layers` HC sites to read, by layer number
    (stages after the backbone, the root head mix last); `dtype` as headers spell it."""
    ckpt = open_checkpoint(path, config=config, progress=progress)
    return _report(ckpt, find_hc(ckpt), name_glob, layers, dtype, list_tensors, run_verify, hc_layers)


def _report(ckpt: Checkpoint, sites: list[HcSiteTensors], name_glob: str | None, layers: Collection[int] | None,
            dtype: str | None, list_tensors: bool, run_verify: bool, hc_layers: Collection[int] | None
            ) -> InspectReport:
    n_layers, n_stages = layer_counts(ckpt, ckpt.all_names() if ckpt.config is None else ())
    for what, chosen in (("the tensor list", layers), ("the HC sites", hc_layers)):
        if chosen is not None:
            _check_layers(what, chosen, ckpt.label, n_layers, n_stages)
    n_tensors, per_dtype, logical = totals_from_columns(_columns(ckpt))
    dtypes = {d: DtypeTotal(*v) for d, v in per_dtype.items()}
    stored = sum(d.bytes for d in dtypes.values())
    rows = None
    if name_glob or layers is not None or dtype or list_tensors:
        tensors = ckpt.tensors()
        rows = []
        dialect = dialect_of(ckpt).dialect
        canonical = (lambda n: n) if dialect == "release" else (lambda n: canonical_name(n, dialect) or n)
        for name, (shard, t) in tensors.items():
            if name_glob and not fnmatch.fnmatchcase(name, name_glob):
                continue
            if dtype and t.dtype != dtype:
                continue
            if layers is not None and _layer_of(canonical(name), n_layers) not in layers:
                continue
            rows.append(TensorRow(name, t.dtype, t.shape, t.nbytes, shard.file, t.abs_begin))
    all_sites = sites
    if hc_layers is not None:
        have = sorted({s.layer for s in sites})
        sites = [s for s in sites if s.layer in hc_layers]
        if not sites:
            where = f"HC sites at layers {format_ranges(have)}" if have else "no hc_* tensors"
            raise HcError(f"{ckpt.label}: no HC sites at layer {format_ranges(sorted(hc_layers))}; "
                          f"this checkpoint has {where}")
    entries = read_hc_entries(ckpt, sites)
    findings = None
    if run_verify:
        from hccli.checkpoint.verify import verify

        findings = verify(ckpt, sites=all_sites)
    return InspectReport(ckpt, n_tensors, n_layers, n_stages, stored, logical, dtypes, rows,
                         entries, findings, len(sites))
