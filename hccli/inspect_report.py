"""The `hc inspect` report: plain data from a checkpoint's headers (and its HC
values), ready for tables or JSON. Reads headers and the HC base/scale tensors only."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hccli.checkpoint.hc import HcSiteTensors, find_hc, hc_from_mix_width, layer_counts, read_base_scale
from hccli.checkpoint.header import DTYPES, TensorInfo
from hccli.checkpoint.shardset import Checkpoint, open_checkpoint
from hccli.checkpoint.verify import Finding, verify
from hccli.layers import format_ranges
from hccli.sinkhorn_np import head_pre, split_sinkhorn

_BEGIN, _END = attrgetter("begin"), attrgetter("end")


def by_dtype(tensors: dict) -> dict[str, list[TensorInfo]]:
    """The tensors grouped by dtype, dtypes in order of first appearance."""
    groups: dict[str, list[TensorInfo]] = {}
    for _, t in tensors.values():
        group = groups.get(t.dtype)
        if group is None:
            group = groups[t.dtype] = []
        group.append(t)
    return groups


def _stored_bytes(group: list[TensorInfo]) -> int:
    return sum(map(_END, group)) - sum(map(_BEGIN, group))  # the sum of nbytes, without a call per tensor


def logical_params(tensors: dict, groups: dict[str, list[TensorInfo]] | None = None) -> int:
    """Parameters from headers alone: an I8 weight whose sibling F8_E8M0 scale has one
    value per 32 inputs is packed fp4 (two parameters a byte); scales count 0.
    `groups` is by_dtype(tensors) when the caller has it already."""
    groups = by_dtype(tensors) if groups is None else groups
    # A validated entry's bytes are exactly its elements x bits / 8, so a dtype's elements are
    # its bytes x 8 / bits: no product of dims per tensor.
    total = sum(_stored_bytes(g) * 8 // DTYPES[d] for d, g in groups.items() if d != "F8_E8M0")
    get = tensors.get
    for t in groups.get("I8", ()):
        shape = t.shape
        if len(shape) == 2 and t.name.endswith(".weight"):
            sib = get(t.name[:-7] + ".scale")
            if sib is not None:
                # One scale per 32 fp4 values, two values a byte: [rows, cols] beside [rows, cols / 16].
                s = sib[1]
                if s.dtype == "F8_E8M0" and s.shape == (shape[0], shape[1] // 16) and shape[1] % 16 == 0:
                    total += shape[0] * shape[1]  # packed fp4: its elements count a second time
    return total


@dataclass
class TreeNode:
    label: str
    count: int
    detail: str = ""
    children: list["TreeNode"] = field(default_factory=list)


def build_tree(tensors: dict) -> list[TreeNode]:
    """Collapse repeated layers: `layers.[0-39] x40` with the tensors every member
    holds, and the exceptions (`in 2,8,14,20`); inner numbers (experts) collapse too."""
    tops: dict[str, list] = {}  # key -> [members, templates, first info]
    for name, (_, t) in tensors.items():
        parts = name.split(".")
        if len(parts) > 2 and parts[1].isdigit():
            top = tops.get(parts[0])
            if top is None:
                top = tops[parts[0]] = [set(), {}, t]
            member = int(parts[1])
            top[0].add(member)
            rest = parts[2:]
            inner = [int(p) for p in rest if p.isdigit()]
            tpl = ".".join(["#" if p.isdigit() else p for p in rest]) if inner else ".".join(rest)
            entry = top[1].get(tpl)
            if entry is None:
                entry = top[1][tpl] = [set(), set(), 0, set()]
            entry[0].add(member)
            entry[1].update(inner)
            entry[2] += 1
            entry[3].add((t.dtype, t.shape))
        else:
            tops.setdefault(name, [set(), {}, t])
    nodes = []
    for key, (members, templates, info) in tops.items():
        if not members:
            nodes.append(TreeNode(key, 1, f"{info.dtype} {list(info.shape)}"))
            continue
        node = TreeNode(f"{key}.[{format_ranges(sorted(members))}]", len(members), f"x{len(members)}")
        for tpl, (where_set, inner, count, sigs) in templates.items():
            label = tpl.replace("#", f"[{format_ranges(sorted(inner))}]", 1) if inner else tpl
            sig = "; ".join(f"{d} {list(s)}" for d, s in sorted(sigs)) if len(sigs) <= 2 else f"{len(sigs)} shapes"
            where = "" if where_set == members else f" in {format_ranges(sorted(where_set))}"
            node.children.append(TreeNode(label, count, f"{sig} x{count}{where}"))
        nodes.append(node)
    return nodes


@dataclass(frozen=True)
class HcEntry:
    layer: int
    name: str
    site: str
    is_stage: bool
    scale: list[float]
    base: list[float]
    hc: int
    comb_from_base: list[list[float]] | None  # mixes = 0
    pre_from_base: list[float]
    post_from_base: list[float] | None

    def parts(self) -> dict[str, Any]:
        hc = self.hc
        if self.site == "head":
            return {"pre": self.base}
        return {"pre": self.base[:hc], "post": self.base[hc:2 * hc],
                "comb": [self.base[2 * hc + j * hc: 2 * hc + (j + 1) * hc] for j in range(hc)]}

    def to_json(self) -> dict[str, Any]:
        doc = {"layer": self.layer, "name": self.name, "site": self.site, "stage": self.is_stage,
               "scale": self.scale, "base": self.base, "base_parts": self.parts(),
               "pre_from_base": self.pre_from_base}
        if self.site != "head":
            doc["post_from_base"] = self.post_from_base
            doc["comb_from_base"] = self.comb_from_base
        return doc


def read_hc_entries(ckpt: Checkpoint, sites: list[HcSiteTensors]) -> list[HcEntry]:
    iters = ckpt.config.hc_sinkhorn_iters if ckpt.config else 20
    eps = ckpt.config.hc_eps if ckpt.config else 1e-6
    usable = [s for s in sites
              if all(p in s.parts and s.parts[p][1].dtype == "F32" for p in ("base", "scale"))]
    # (the others are --verify's to report: hc_incomplete / hc_dtype; nothing to compute)

    def read(s: HcSiteTensors):
        base, scale = read_base_scale(ckpt, s)
        return s, base.reshape(-1), scale.reshape(-1)

    workers = ckpt.store.workers if ckpt.store is not None else 1
    if workers > 1:  # each read is a round trip: overlap them
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2 * workers) as pool:
            values = list(pool.map(read, usable))
    else:
        values = [read(s) for s in usable]
    out: dict[int, HcEntry] = {}
    # the sites of one shape go through the op together, one row each (mixes = 0)
    by_shape: dict[tuple[int, int, str], list] = {}
    for i, (s, base, scale) in enumerate(values):
        by_shape.setdefault((base.size, scale.size, s.site == "head"), []).append(i)
    for (nb, ns, head), idx in by_shape.items():
        bases = np.stack([values[i][1] for i in idx])
        scales = np.stack([values[i][2] for i in idx])
        with np.errstate(all="ignore"):
            if head:
                pre = head_pre(np.zeros_like(bases), scales, bases, eps)
                post = comb = None
                hc = nb
            else:
                hc = hc_from_mix_width(nb)
                if hc is None or ns != 3:
                    continue  # a shape finding; nothing meaningful to compute
                pre, post, comb = split_sinkhorn(np.zeros_like(bases), scales, bases, hc, iters, eps)
        for row, i in enumerate(idx):
            s, base, scale = values[i]
            out[i] = HcEntry(s.layer, s.name, s.site, s.is_stage, scale.tolist(), base.tolist(), hc,
                             comb[row].tolist() if comb is not None else None, pre[row].tolist(),
                             post[row].tolist() if post is not None else None)
    return [out[i] for i in sorted(out)]


@dataclass
class InspectReport:
    ckpt: Checkpoint
    tensors: dict
    n_layers: int
    n_stages: int
    stored_bytes: int
    logical_params: int
    dtypes: dict[str, dict[str, int]]
    rows: list[dict[str, Any]] | None
    hc: list[HcEntry]
    findings: list[Finding] | None
    filters: str

    def tree(self) -> list[TreeNode]:
        return build_tree(self.tensors)  # only people see the tree; --json never pays for it

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings or [] if f.severity == "error")

    def to_json(self) -> dict[str, Any]:
        c = self.ckpt
        remote = c.remote
        doc: dict[str, Any] = {
            "path": c.label,
            "kind": c.kind,
            "config": c.config.source if c.config else None,
            "shards": len(c.shards),
            "tensors": len(self.tensors),
            "stored_bytes": self.stored_bytes,
            "logical_params": self.logical_params,
            "dtypes": self.dtypes,
            "layer_numbering": {"n_layers": self.n_layers, "n_stages": self.n_stages,
                                "stages": "numbered n_layers + s, named mtp.s",
                                "root_head": "numbered n_layers + n_stages, named head"},
            "hc": [e.to_json() for e in self.hc],
            "findings": [f.to_json() for f in self.findings] if self.findings is not None else [],
            "unreadable_shards": [{"file": s.file, "error": s.error} for s in c.shards if s.header is None],
            "transferred_bytes": remote.transfer.bytes if remote is not None else 0,
            "remote": None if remote is None else {
                "repo": remote.ref.repo_id, "revision": remote.ref.revision or "main", "sha": remote.sha,
                "subfolder": remote.ref.subfolder, "endpoint": remote.endpoint, "requests": remote.transfer.requests,
                "cached_files": remote.transfer.cached_files, "offline": remote.offline},
            "verified": self.findings is not None,
        }
        if self.rows is not None:
            doc["tensor_list"] = self.rows
        return doc


def _layer_of(name: str, n_layers: int) -> int | None:
    parts = name.split(".")
    if len(parts) > 1 and parts[1].isdigit():
        if parts[0] == "layers":
            return int(parts[1])
        if parts[0] == "mtp":
            return n_layers + int(parts[1])
    return None


def build_inspect(
    path: str | Path,
    *,
    config: str | Path | None = None,
    name_glob: str | None = None,
    layers: set[int] | None = None,
    dtype: str | None = None,
    list_tensors: bool = False,
    run_verify: bool = False,
    hc_layers: set[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> InspectReport:
    ckpt = open_checkpoint(path, config=config, progress=progress)
    tensors = ckpt.tensors()
    n_layers, n_stages = layer_counts(ckpt, tensors)
    groups = by_dtype(tensors)
    dtypes = {d: {"tensors": len(g), "bytes": _stored_bytes(g)} for d, g in groups.items()}
    stored = sum(d["bytes"] for d in dtypes.values())
    rows = None
    filters = []
    if name_glob or layers is not None or dtype or list_tensors:
        rows = []
        for name, (shard, t) in tensors.items():
            if name_glob and not fnmatch.fnmatchcase(name, name_glob):
                continue
            if dtype and t.dtype != dtype.upper():
                continue
            if layers is not None and _layer_of(name, n_layers) not in layers:
                continue
            rows.append({"name": name, "dtype": t.dtype, "shape": list(t.shape), "bytes": t.nbytes,
                         "shard": shard.file, "offset": t.abs_begin})
        filters = [f for f in (f"name {name_glob}" if name_glob else "", f"dtype {dtype.upper()}" if dtype else "",
                               "layers selected" if layers is not None else "") if f]
    sites = find_hc(ckpt)
    if hc_layers is not None:
        sites = [s for s in sites if s.layer in hc_layers]
    findings = verify(ckpt) if run_verify else None
    return InspectReport(ckpt, tensors, n_layers, n_stages, stored, logical_params(tensors, groups), dtypes, rows,
                         read_hc_entries(ckpt, sites), findings, ", ".join(filters))
