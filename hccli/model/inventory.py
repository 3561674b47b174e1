"""The tensors a config implies: name, shape, safetensors dtype, component, shard.

This is the one source of truth that count-params, make-checkpoint and verify
read. What is exact (TensorSpec.exact, Inventory.release):
- the five published releases (hccli/model/releases.py says how a config is
  recognised as one): every name, dtype, shape and shard, and the totals, as
  their public headers and index files have them (tests pin the figures);
- any other V4.1 config: names, dtypes and shapes by the reference
  implementation's rules (reference/deepseek-v4-family.md); shards by the
  releases' pattern;
- any other V4 config: the hyper-connection tensors, head mix included; the
  rest is best effort (exact=False) and the output says so.

Quantised weights: fp8(o, i) is `.weight` F8_E4M3 [o, i] plus `.scale` F8_E8M0
[ceil(o/B), ceil(i/B)] with B the config's block; fp4(o, i) is `.weight` I8
[o, i/2] (two E2M1 values a byte) plus `.scale` F8_E8M0 [o, i/32].
"""

from __future__ import annotations

from functools import lru_cache
from itertools import product, repeat
from math import ceil, prod

from hccli.model.config.model import ModelConfig
from hccli.model.inventory_types import DTYPE_BYTES, Inventory, InventoryColumns, TensorSpec
from hccli.model.layers import LayerPlan, plan_layers
from hccli.model.packing import fp4_shapes
from hccli.model.releases import Release, release_candidate, shard_layout
from hccli.base.vocab import owner_of

class _Builder:
    def __init__(self, cfg: ModelConfig, *, exact: bool, hc_only: bool = False):
        self.cfg = cfg
        self.out = InventoryColumns([], [], [], [], [], [], [], [], [])
        self.nbytes = 0  # Inventory.total_size, kept as tensors are added
        self.layer: int | None = None
        self.scope = "text"
        self.exact = exact
        self.hc_only = hc_only  # count-params needs the HC tensors alone, without the expert lists
        self.layout = shard_layout(cfg)
        self.shard = 0

    def add(self, name: str, shape: tuple[int, ...], dtype: str, component: str, *, exact: bool | None = None,
            fp4: bool = False, shard: int | None = None) -> None:
        if self.hc_only and component != "hyper_connections":
            return
        if self.scope == "stage":  # the component view counts a stage's tensors as the stage's
            component = "dspark"
            owner = owner_of(name)  # a release keeps each stage whole, extras and head mix included
            if owner is not None:
                shard = self.layout.stage(owner[1])
        spec = (name, tuple(shape), dtype, component, self.layer, self.scope, fp4,
                self.exact if exact is None else exact, self.shard if shard is None else shard)
        for column, value in zip(self.out, spec):
            column.append(value)
        self.nbytes += prod(spec[1]) * DTYPE_BYTES[dtype]

    def fp8(self, prefix: str, o: int, i: int, component: str) -> None:
        b = self.cfg.fp8_block
        self.add(f"{prefix}.weight", (o, i), "F8_E4M3", component)
        self.add(f"{prefix}.scale", (ceil(o / b), ceil(i / b)), "F8_E8M0", component)

    def fp4(self, prefix: str, o: int, i: int, component: str) -> None:
        weight, scale = fp4_shapes(o, i)
        self.add(f"{prefix}.weight", weight, "I8", component, fp4=True)
        self.add(f"{prefix}.scale", scale, "F8_E8M0", component)

    def _quantised(self, o: int, i: int) -> tuple[tuple[str, tuple[int, ...], str, bool], ...]:
        """(suffix, shape, dtype, fp4) of what fp4() or fp8() adds for an expert linear."""
        if self.cfg.expert_dtype == "fp4":
            weight, scale = fp4_shapes(o, i)
            return ((".weight", weight, "I8", True), (".scale", scale, "F8_E8M0", False))
        b = self.cfg.fp8_block
        return ((".weight", (o, i), "F8_E4M3", False), (".scale", (ceil(o / b), ceil(i / b)), "F8_E8M0", False))

    def experts(self, p: str, n: int, linears: tuple[tuple[str, int, int], ...]) -> None:
        """`{p}.ffn.experts.{x}.{linear}` for x < n: what expert_linear() adds for each, in the
        same order and with the same fields, made from one template per linear (~65k tensors in
        a V4.1 inventory: one add() each cost most of building it)."""
        if self.hc_only:
            return
        component, shard = "routed_experts", self.shard
        if self.scope == "stage":  # as add(): a stage's tensors count as the stage's, in its shard
            component = "dspark"
            owner = owner_of(f"{p}.ffn.experts.0")
            if owner is not None:
                shard = self.layout.stage(owner[1])
        template = [(f".{name}{suffix}", shape, dtype, fp4)
                    for name, o, i in linears for suffix, shape, dtype, fp4 in self._quantised(o, i)]
        suffixes, shapes, dtypes, fp4s = zip(*template)
        # names by joining (expert prefix, suffix) pairs, the columns by C-level extends (the
        # template's own columns repeated): ~95k tensors
        k = n * len(template)
        c = self.out
        c.name.extend(map("".join, product([f"{p}.ffn.experts.{x}" for x in range(n)], suffixes)))
        c.shape.extend(shapes * n)
        c.dtype.extend(dtypes * n)
        c.component.extend(repeat(component, k))
        c.layer.extend(repeat(self.layer, k))
        c.scope.extend(repeat(self.scope, k))
        c.fp4_packed.extend(fp4s * n)
        c.exact.extend(repeat(self.exact, k))
        c.shard.extend(repeat(shard, k))
        self.nbytes += n * sum(prod(shape) * DTYPE_BYTES[dtype] for shape, dtype in zip(shapes, dtypes))


def _hc_site(b: _Builder, prefix: str, site: str) -> None:
    cfg = b.cfg
    p = f"{prefix}." if prefix else ""
    mix = cfg.mix_hc if site != "head" else cfg.hc_mult
    n_scale = 3 if site != "head" else 1
    b.add(f"{p}hc_{site}_fn", (mix, cfg.hc_mult * cfg.dim), "F32", "hyper_connections", exact=True)
    b.add(f"{p}hc_{site}_base", (mix,), "F32", "hyper_connections", exact=True)
    b.add(f"{p}hc_{site}_scale", (n_scale,), "F32", "hyper_connections", exact=True)


def _attention(b: _Builder, p: str) -> None:
    cfg = b.cfg
    H, hd, D = cfg.n_heads, cfg.head_dim, cfg.dim
    b.fp8(f"{p}.attn.wq_a", cfg.q_lora_rank, D, "attention")
    b.add(f"{p}.attn.q_norm.weight", (cfg.q_lora_rank,), "BF16", "attention")
    b.fp8(f"{p}.attn.wq_b", H * hd, cfg.q_lora_rank, "attention")
    b.fp8(f"{p}.attn.wkv", hd, D, "attention")
    b.add(f"{p}.attn.kv_norm.weight", (hd,), "BF16", "attention")
    b.fp8(f"{p}.attn.wo_a", cfg.o_groups * cfg.o_lora_rank, H * hd // cfg.o_groups, "attention")
    b.fp8(f"{p}.attn.wo_b", D, cfg.o_groups * cfg.o_lora_rank, "attention")
    b.add(f"{p}.attn.attn_sink", (H,), "F32", "attention")


def _compressor_v41(b: _Builder, p: str, ratio: int) -> None:
    cfg = b.cfg
    b.add(f"{p}.attn.compressor.wkv.weight", (cfg.head_dim, cfg.dim), "BF16", "compressor")
    if ratio == 2:  # softmax pooling of pairs needs the gate
        b.add(f"{p}.attn.compressor.wgate.weight", (cfg.head_dim, cfg.dim), "BF16", "compressor")
    b.add(f"{p}.attn.compressor.norm.weight", (cfg.head_dim,), "BF16", "compressor")
    b.add(f"{p}.attn.indexer.wk.weight", (cfg.index_head_dim, cfg.head_dim), "BF16", "indexer")
    b.add(f"{p}.attn.indexer.k_norm.weight", (cfg.index_head_dim,), "BF16", "indexer")


def _index_query(b: _Builder, p: str) -> None:
    cfg = b.cfg
    b.fp8(f"{p}.attn.indexer.wq_b", cfg.index_n_heads * cfg.index_head_dim, cfg.q_lora_rank, "indexer")
    b.add(f"{p}.attn.indexer.weights_proj.weight", (cfg.index_n_heads, cfg.dim), "BF16", "indexer")


def _compressor_v4(b: _Builder, prefix: str, ratio: int, head_dim: int, component: str) -> None:
    # Best effort (third-party header readings): overlapping ratio-4 compression doubles the width.
    coeff = 2 if ratio == 4 else 1
    b.add(f"{prefix}.ape", (ratio, coeff * head_dim), "F32", component)
    b.add(f"{prefix}.wkv.weight", (coeff * head_dim, b.cfg.dim), "BF16", component)
    b.add(f"{prefix}.wgate.weight", (coeff * head_dim, b.cfg.dim), "BF16", component)
    b.add(f"{prefix}.norm.weight", (head_dim,), "BF16", component)


def _ffn(b: _Builder, p: str, n_experts: int, hash_routed: bool) -> None:
    cfg = b.cfg
    D, I = cfg.dim, cfg.moe_inter_dim
    b.add(f"{p}.ffn.gate.weight", (n_experts, D), "BF16", "router")
    if hash_routed:
        b.add(f"{p}.ffn.gate.tid2eid", (cfg.vocab_size, cfg.n_activated_experts), "I64", "router")
    else:
        b.add(f"{p}.ffn.gate.bias", (n_experts,), "F32", "router")
        if cfg.family == "v4.1":
            b.add(f"{p}.ffn.gate.bias_vl", (n_experts,), "F32", "router")
    b.experts(p, n_experts, (("w1", I, D), ("w3", I, D), ("w2", D, I)))
    if cfg.n_shared_experts:
        Is = I * cfg.n_shared_experts
        b.fp8(f"{p}.ffn.shared_experts.w1", Is, D, "shared_expert")
        b.fp8(f"{p}.ffn.shared_experts.w3", Is, D, "shared_expert")
        b.fp8(f"{p}.ffn.shared_experts.w2", D, Is, "shared_expert")


def _engram(b: _Builder, p: str, rows: int) -> None:
    cfg = b.cfg
    n, hd = cfg.engram_max_ngram_size, cfg.engram_head_dim
    table = b.layout.engram[b.layer]  # type: ignore[index]
    b.add(f"{p}.engram.embed.weight", (rows, hd), "F8_E4M3", "engram", shard=table)
    b.add(f"{p}.engram.embed.scale", (rows, ceil(hd / cfg.fp8_block)), "F8_E8M0", "engram", shard=table)
    b.fp8(f"{p}.engram.wkv", cfg.dim * (n + 1), (n - 1) * cfg.engram_n_heads * hd, "engram")
    b.add(f"{p}.engram.q_weight", (n, cfg.dim), "BF16", "engram")
    b.add(f"{p}.engram.k_weight", (n, cfg.dim), "BF16", "engram")


def _block(b: _Builder, plan: LayerPlan, i: int) -> None:
    cfg = b.cfg
    info = plan.layers[i]
    p = info.name
    _hc_site(b, p, "attn")
    _hc_site(b, p, "ffn")
    if b.hc_only:
        return
    b.add(f"{p}.attn_norm.weight", (cfg.dim,), "BF16", "norms")
    b.add(f"{p}.ffn_norm.weight", (cfg.dim,), "BF16", "norms")
    _attention(b, p)
    ratio = info.compress_ratio
    if cfg.family == "v4.1":
        if not info.is_stage:
            if info.role == "source":
                _compressor_v41(b, p, ratio)
            if ratio and i in cfg.index_source_layers:
                _index_query(b, p)
            if info.engram:
                _engram(b, p, cfg.engram_num_embeddings[cfg.engram_layer_ids.index(i)])
    elif ratio:
        _compressor_v4(b, f"{p}.attn.compressor", ratio, cfg.head_dim, "compressor")
        if ratio == 4:
            _index_query(b, p)
            _compressor_v4(b, f"{p}.attn.indexer.compressor", ratio, cfg.index_head_dim, "indexer")
    n_experts = cfg.stage_routed_experts if info.is_stage else cfg.n_routed_experts
    _ffn(b, p, n_experts, info.hash_routed)


def _stages_extra(b: _Builder) -> None:
    cfg = b.cfg
    D = cfg.dim
    last = f"mtp.{cfg.n_stages - 1}"
    if b.hc_only:
        pass
    elif cfg.stage_kind == "dspark":
        b.fp8("mtp.0.main_proj", D, len(cfg.dspark_target_layer_ids) * D, "dspark")
        b.add("mtp.0.main_norm.weight", (D,), "BF16", "dspark")
        b.add(f"{last}.norm.weight", (D,), "BF16", "dspark")
        r = cfg.dspark_markov_rank
        if cfg.family == "v4.1":
            b.add(f"{last}.markov_head.embed.weight", (cfg.vocab_size, r), "BF16", "dspark")
            b.add(f"{last}.markov_head.head.weight", (cfg.vocab_size, r), "BF16", "dspark")
        else:
            b.add(f"{last}.markov_head.markov_w1.weight", (cfg.vocab_size, r), "BF16", "dspark")
            b.add(f"{last}.markov_head.markov_w2.weight", (cfg.vocab_size, r), "BF16", "dspark")
        b.add(f"{last}.confidence_head.proj.weight", (1, D + r), "BF16", "dspark")
    else:  # next-token prediction layers in the V3 manner (best effort)
        for s in range(cfg.n_stages):
            p = f"mtp.{s}"
            b.layer = cfg.n_layers + s
            b.fp8(f"{p}.e_proj", D, D, "dspark")
            b.fp8(f"{p}.h_proj", D, D, "dspark")
            b.add(f"{p}.enorm.weight", (D,), "BF16", "dspark")
            b.add(f"{p}.hnorm.weight", (D,), "BF16", "dspark")
            b.add(f"{p}.norm.weight", (D,), "BF16", "dspark")
    if cfg.has_head_mix:
        b.layer = cfg.n_layers + cfg.n_stages - 1
        _hc_site(b, last, "head")


def _vision(b: _Builder) -> None:
    v = b.cfg.vision
    assert v is not None
    D = b.cfg.dim
    b.scope = "vision"
    b.layer = None
    b.shard = b.layout.vision  # type: ignore[assignment]
    add = lambda name, shape: b.add(name, shape, "BF16", "vision")  # noqa: E731
    add("vision.patch_embed.proj.weight", (v.dim, 3 * v.patch_size * v.patch_size))
    add("vision.patch_embed.proj.bias", (v.dim,))
    for k in range(v.n_layers):
        q = f"vision.blocks.{k}"
        add(f"{q}.attn.wqkv.weight", (3 * v.dim, v.dim))
        add(f"{q}.attn.wqkv.bias", (3 * v.dim,))
        add(f"{q}.attn.wo.weight", (v.dim, v.dim))
        add(f"{q}.attn.wo.bias", (v.dim,))
        add(f"{q}.mlp.w1.weight", (2 * v.inter_dim, v.dim))
        add(f"{q}.mlp.w2.weight", (v.dim, v.inter_dim))
        add(f"{q}.norm1.weight", (v.dim,))
        add(f"{q}.norm2.weight", (v.dim,))
    add("vision.norm.weight", (v.dim,))
    r = v.downsample_ratio
    add("aligner.w1.weight", (D, v.dim * r * r))
    add("aligner.w1.bias", (D,))
    add("aligner.w2.weight", (D, D))
    add("aligner.w2.bias", (D,))
    for name in ("image_start", "image_end", "image_newline"):
        add(name, (D,))


def _walk(b: _Builder, plan: LayerPlan) -> None:
    cfg = b.cfg
    lay = b.layout
    D, V = cfg.dim, cfg.vocab_size
    b.shard = lay.embed
    b.add("embed.weight", (V, D), "BF16", "embeddings_head")
    for i in range(cfg.n_layers):
        b.layer = i
        b.shard = lay.layer(i)
        _block(b, plan, i)
    b.layer = None
    b.shard = lay.final
    b.add("norm.weight", (D,), "BF16", "norms")
    b.add("head.weight", (V, D), "BF16", "embeddings_head")
    if cfg.has_head_mix:
        _hc_site(b, "", "head")
    if cfg.n_stages:
        b.scope = "stage"  # add() places each stage tensor by its owner
        for s in range(cfg.n_stages):
            b.layer = cfg.n_layers + s
            _block(b, plan, cfg.n_layers + s)
        b.layer = cfg.n_layers
        _stages_extra(b)
    if cfg.vision is not None and not b.hc_only:
        _vision(b)


def _build(cfg: ModelConfig, plan: LayerPlan, release: Release | None) -> Inventory:
    b = _Builder(cfg, exact=cfg.family == "v4.1" or release is not None)
    _walk(b, plan)
    return Inventory(cfg, plan, b.out, b.layout, b.nbytes, release)


def build_inventory(cfg: ModelConfig, plan: LayerPlan | None = None) -> Inventory:
    if plan is None:
        try:
            return _cached_inventory(cfg)
        except TypeError:  # a config that cannot be hashed (a future list field) is built uncached
            plan = plan_layers(cfg)
    return _inventory(cfg, plan)


@lru_cache(maxsize=2)
def _cached_inventory(cfg: ModelConfig) -> Inventory:
    # verify and its placement check ask for the same config's inventory (100k+ tensors) in turn
    return _inventory(cfg, plan_layers(cfg))


def _inventory(cfg: ModelConfig, plan: LayerPlan) -> Inventory:
    candidate = release_candidate(cfg)
    inv = _build(cfg, plan, candidate)
    if candidate is not None and (len(inv.columns.name), inv.total_size, inv.n_shards) != (
            candidate.tensors, candidate.total_size, candidate.shards):
        inv = _build(cfg, plan, None)  # its values look like a release's, its inventory is another
    return inv


def build_hc_inventory(cfg: ModelConfig) -> tuple[TensorSpec, ...]:
    """Only the hyper-connection tensors, in inventory order, through the same
    walk as build_inventory (cheap: count-params needs no expert list)."""
    b = _Builder(cfg, exact=True, hc_only=True)
    _walk(b, plan_layers(cfg))
    return tuple(map(tuple.__new__, repeat(TensorSpec), zip(*b.out)))
