"""A checkpoint as a set of shards in a store: its types.

Opening (opening.py) reads the index and every shard's header (never tensor data), keeps what
went wrong per shard so that --verify can report it, and works out once what the names say: the
dialect they are written in and the HC sites, with their layers numbered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain, repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hccli.checkpoint.safetensors.header import gc_paused
from hccli.checkpoint.safetensors.header_types import Header, TensorInfo
from hccli.checkpoint.source import ByteSource
from hccli.checkpoint.store_protocol import Store
from hccli.model.config.model import ConfigUnusable, ModelConfig
from hccli.names.dialects import Detection
from hccli.base.vocab import hc_tensor_name

if TYPE_CHECKING:
    from hccli.checkpoint.verify.findings import Finding


@dataclass(frozen=True, slots=True)
class Shard:
    file: str  # as the index names it (or the file name)
    path: Path | None  # None when the name is unsafe and was not opened
    header: Header | None
    error: str | None  # why it could not be read
    error_code: str | None = None
    indexed: bool = True


@dataclass(frozen=True, slots=True)
class Index:
    """A parsed model.safetensors.index.json: the weight_map, metadata.total_size, the metadata,
    and the shard files it names (in first-named order)."""

    path: Path | str
    weight_map: dict[str, str]
    total_size: int | None
    metadata: dict
    files: list[str]


@dataclass(frozen=True, slots=True)
class HcSiteTensors:
    """One HC site (layer and site) and the tensors of its parts, found by canonical name."""

    owner: str  # "layers.3", "mtp.0" or "" (root head mix)
    site: str
    layer: int
    name: str  # "layers.3", "mtp.0" or "head"
    is_stage: bool
    parts: dict[str, tuple[Shard, TensorInfo]]  # "fn" / "base" / "scale"

    def tensor_name(self, part: str) -> str:
        """The canonical (release) name of one part."""
        return hc_tensor_name(self.owner, self.site, part)

    def stored_name(self, part: str) -> str:
        """The part's name as the checkpoint spells it (the canonical one where it has none)."""
        return self.parts[part][1].name if part in self.parts else self.tensor_name(part)


def names_unique(readable: list[Shard]) -> bool:
    """Whether no tensor name is in two of these (readable) shards: then every shard's entries are
    the checkpoint's, and totals can be taken per header without the merged table."""
    headers = [s.header for s in readable]
    total = sum(len(h.names) for h in headers)
    return len(headers) <= 1 or len(set().union(*(h.names for h in headers))) == total


def first_occurrences(readable: list[Shard]) -> dict[str, tuple[Shard, TensorInfo]]:
    """Every tensor of these (readable) shards, first occurrence in shard order."""
    out: dict[str, tuple[Shard, TensorInfo]] = {}
    # ~100k entries for a full checkpoint: built by C iterators, with the cyclic GC held off (it
    # would walk the growing dict again and again; nothing here forms a cycle).
    with gc_paused():
        for s in readable:
            h = s.header
            if out.keys().isdisjoint(h.by_name):  # by_name is in h.tensors' order
                out.update(zip(h.by_name, zip(repeat(s), h.tensors)))
            else:  # a name already seen in an earlier shard keeps that shard
                for t in h.tensors:
                    out.setdefault(t.name, (s, t))
    return out


@dataclass(frozen=True)
class Checkpoint:
    """An opened checkpoint (opening.open_checkpoint). Not slotted: the merged table of a
    checkpoint whose names are unique is built on first use (a cached_property)."""

    path: Path  # what the user named
    root: Path  # the directory the shards live in
    kind: str  # "directory" | "index" | "file" | "hub"
    index: Index | None
    shards: list[Shard]
    config: ModelConfig | None
    config_note: ConfigUnusable | None  # the config.json beside it, set aside (config is then None)
    unsafe: list[str]  # index shard names that were not opened
    missing: list[str]  # shard names (from the index, or implied by -of-N) with no file
    store: Store
    label: str
    partial: list[str]  # *.partial files: an interrupted download or write
    unique: bool  # no tensor name in two readable shards (names_unique)
    dialect: Detection  # the dialect the names are written in
    n_layers: int  # the backbone layers the HC sites are numbered by, then the stages
    n_stages: int
    hc_sites: tuple[HcSiteTensors, ...]  # in layer and site order
    merged: dict | None = field(default=None, repr=False, compare=False)  # the merged table, where names repeat
    config_data: dict | None = field(default=None, repr=False, compare=False)  # the config.json used, as decoded
    # config_mismatch: the config and the headers are different models (checkpoint/verify/damage.py); a
    # config.json found beside it is then set aside (config None, config_note says why)
    config_clash: Finding | None = None

    def readable(self) -> list[Shard]:
        return [s for s in self.shards if s.header is not None]

    def tensors(self) -> dict[str, tuple[Shard, TensorInfo]]:
        """Every tensor, first occurrence in shard order (duplicates are a finding)."""
        return self.merged if self.merged is not None else self._table

    @cached_property
    def _table(self) -> dict[str, tuple[Shard, TensorInfo]]:
        return first_occurrences(self.readable())

    def all_names(self) -> list[str]:
        """Every tensor name in shard order, each once (the merged table's keys, in its order)."""
        if self.unique:
            return list(chain.from_iterable(s.header.names for s in self.readable()))
        return list(self.tensors())

    def occurrences(self) -> dict[str, tuple[Shard, ...]]:
        """The shards holding each tensor name, in shard order."""
        out: dict[str, tuple[Shard, ...]] = {}
        with gc_paused():
            for s in self.readable():
                by_name = s.header.by_name
                one = (s,)  # shared by every name only this shard holds: no container per tensor
                if out.keys().isdisjoint(by_name):
                    out.update(dict.fromkeys(by_name, one))
                else:
                    for name in by_name:
                        seen = out.get(name)
                        out[name] = one if seen is None else seen + one
        return out

    @property
    def remote(self) -> Any:
        """The hub repository's particulars (endpoint, commit, transfer) for reports, else None."""
        return self.store.hub

    def source(self, shard: Shard) -> ByteSource:
        return self.store.source(shard.file, shard.header.file_size if shard.header else None)
