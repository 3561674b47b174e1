"""The five published releases and where their checkpoints put each tensor.

Placement (file order of the shards) was read off the public header listings
and holds for every release:

    [vision, aligner, image_*]   V4.1 only, shard 1
    embed                        next shard
    layers.L                     one shard per layer, in order (Engram tables excepted)
    norm, head, hc_head_*        one shard after the last layer
    mtp.K                        one shard per stage, whole (its extras and head mix included)
    layers.L.engram.embed.*      V4.1 only: one shard per Engram table, last, in layer order

Any other config is placed by the same pattern (best effort: no release to
compare with).

A config is recognised as a release from its values (family, hidden size,
layers, stage kind and count), and only counts as that release when the
inventory it implies also has exactly the release's published tensor count,
index total_size and shard count (the figures below, from the public index
files and headers). A config that looks like a release but implies another
inventory is not one.
"""

from __future__ import annotations

from dataclasses import dataclass

from hccli.model.config.model import ModelConfig


@dataclass(frozen=True, slots=True)
class Release:
    name: str
    family: str
    dim: int
    n_layers: int
    n_stages: int
    stage_kind: str
    # published: shard files, tensors in the index, the index's metadata.total_size
    shards: int
    tensors: int
    total_size: int

    def looks_like(self, cfg: ModelConfig) -> bool:
        return (cfg.family, cfg.dim, cfg.n_layers, cfg.n_stages, cfg.stage_kind) == (
            self.family, self.dim, self.n_layers, self.n_stages, self.stage_kind)


RELEASES = (
    Release("DeepSeek-V4-Flash", "v4", 4096, 43, 1, "mtp", 46, 69_187, 159_609_485_896),
    Release("DeepSeek-V4-Flash-0731", "v4", 4096, 43, 3, "dspark", 48, 72_317, 166_878_536_440),
    Release("DeepSeek-V4-Pro", "v4", 7168, 61, 1, "mtp", 64, 145_116, 864_704_792_696),
    Release("DeepSeek-V4-Pro-0813", "v4", 7168, 61, 3, "dspark", 66, 149_782, 892_727_580_904),
    Release("DeepSeek-V4.1-Flash", "v4.1", 5120, 40, 3, "dspark", 48, 96_085, 510_286_023_000),
)


def release_candidate(cfg: ModelConfig) -> Release | None:
    """The release whose defining values the config has (to be confirmed by its inventory)."""
    return next((r for r in RELEASES if r.looks_like(cfg)), None)


@dataclass(frozen=True, slots=True)
class ShardLayout:
    """1-based shard numbers of each part of a checkpoint, in the releases' order."""

    vision: int | None
    embed: int
    first_layer: int
    final: int
    first_stage: int
    engram: dict[int, int]  # layer -> the shard of its Engram table
    count: int

    def layer(self, i: int) -> int:
        return self.first_layer + i

    def stage(self, s: int) -> int:
        return self.first_stage + s

    def file(self, shard: int) -> str:
        return shard_file(shard, self.count)


def shard_file(shard: int, count: int) -> str:
    return f"model-{shard:05d}-of-{count:05d}.safetensors"


def shard_layout(cfg: ModelConfig) -> ShardLayout:
    k = 1
    vision = None
    if cfg.vision is not None:
        vision, k = k, k + 1
    embed, k = k, k + 1
    first_layer, k = k, k + cfg.n_layers
    final, k = k, k + 1
    first_stage, k = k, k + cfg.n_stages
    engram = {}
    for layer in sorted(cfg.engram_layer_ids):
        engram[layer], k = k, k + 1
    return ShardLayout(vision, embed, first_layer, final, first_stage, engram, k - 1)
