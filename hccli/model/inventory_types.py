"""The inventory's types: one TensorSpec per tensor a config implies, the same as columns, and
the Inventory that holds them with the shard layout (model/inventory.py builds it)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import repeat
from math import prod
from typing import NamedTuple

from hccli.model.config.model import ModelConfig
from hccli.model.layers import LayerPlan
from hccli.model.packing import FP4_PER_BYTE
from hccli.model.releases import Release, ShardLayout

# Components, in the order --model lists them.
COMPONENTS = (
    "attention",
    "indexer",
    "compressor",
    "router",
    "routed_experts",
    "shared_expert",
    "norms",
    "embeddings_head",
    "engram",
    "hyper_connections",
    "vision",
    "dspark",
)

DTYPE_BYTES = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "F8_E8M0": 1, "I8": 1, "I64": 8}


class TensorSpec(NamedTuple):
    """One tensor of the inventory. A named tuple: a full V4.1 inventory holds ~100k of them,
    built at C speed (a frozen dataclass's __init__ runs Python code for each)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    component: str
    layer: int | None  # backbone layer, or n_layers + s for stage s; None for global tensors
    scope: str  # "text" | "vision" | "stage"
    fp4_packed: bool = False  # I8 bytes holding FP4_PER_BYTE E2M1 values each (model/packing.py)
    exact: bool = True
    shard: int = 0  # 1-based: model-<shard>-of-<Inventory.n_shards>.safetensors

    @property
    def elements(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.elements * DTYPE_BYTES[self.dtype]

    @property
    def is_scale(self) -> bool:
        """F8_E8M0 tensors are quantisation metadata, not parameters."""
        return self.dtype == "F8_E8M0"

    @property
    def logical_params(self) -> int:
        if self.is_scale:
            return 0
        return self.elements * FP4_PER_BYTE if self.fp4_packed else self.elements


class InventoryColumns(NamedTuple):
    """The inventory as one list per TensorSpec field, in inventory order: what verify compares
    with the shards' columns, built by C-level extends (a record per tensor is made only for a
    caller that asks for `Inventory.tensors`)."""

    name: list[str]
    shape: list[tuple[int, ...]]
    dtype: list[str]
    component: list[str]
    layer: list[int | None]
    scope: list[str]
    fp4_packed: list[bool]
    exact: list[bool]
    shard: list[int]


@dataclass(frozen=True)
class Inventory:
    config: ModelConfig
    plan: LayerPlan
    columns: InventoryColumns
    layout: ShardLayout
    total_size: int  # the index's metadata.total_size: the sum of the tensors' byte spans (kept by the builder)
    release: Release | None = None  # the published release this config is (names, shapes, placement, totals)

    @cached_property
    def tensors(self) -> tuple[TensorSpec, ...]:
        return tuple(map(tuple.__new__, repeat(TensorSpec), zip(*self.columns)))

    @property
    def exact(self) -> bool:
        return all(self.columns.exact)

    @property
    def n_shards(self) -> int:
        return self.layout.count

    def shard_file(self, t: TensorSpec) -> str:
        return self.layout.file(t.shard)

    def by_name(self) -> dict[str, TensorSpec]:
        return dict(zip(self.columns.name, self.tensors))
