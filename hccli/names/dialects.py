"""Dialects: the ways other tools spell the model's tensors, mapped onto the
release names that the rest of `hc` uses (see hccli/base/vocab.py).

Every spelling below is taken from its producer's public source, recorded with
its path in docs/DIALECTS.md; none is guessed. In short:

    release              layers.3.hc_attn_fn        hc_head_fn           (DeepSeek's own shards)
    release-prefixed     model.layers.3.hc_attn_fn  model.hc_head_fn     (the same under `model.`)
    transformers-saved   model.layers.3.hc_attn_fn  model.hc_head.hc_fn  (what save_pretrained writes)
    transformers-memory  model.layers.3.attn_hc.fn  model.hc_head.hc_fn  (module names in memory)
    megatron             decoder.layers.3.hc_attn_fn  decoder.hc_head_params.hc_head_fn
    gguf                 blk.3.hc_attn_fn.weight    output_hc_fn.weight  (llama.cpp deepseek4/deepseek41)
    mlx-lm               model.layers.3.attn_hc.fn  (none: V4.1)     (mlx_lm deepseek_v41; names/mlx.py)
    compressed-tensors   model.layers.3.hc_attn_fn  model.hc_head.hc_fn  (a quantised save; names/ct.py)

No producer transposes or reshapes an HC tensor. GGUF lists dimensions fastest
first, so its shapes read reversed (`fn` [24, 4*dim] is ne = [4*dim, 24]); that is
the only layout change (`canonical_shape`). Only the release dialects hold the
DSpark/MTP stages (`mtp.S.*`): transformers skips them on load and the GGUF
converters drop them (V4.1 DSpark goes to a separate `dflash` GGUF, not mapped).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from itertools import repeat
from operator import itemgetter
from dataclasses import dataclass, field
from typing import Any

from hccli.names import ct as dialect_ct, mlx as dialect_mlx
from hccli.model.config.quant import COMPRESSED_TENSORS as _CT_BLOCK, MLX as _MLX_BLOCK, RELEASE_FP8 as _FP8_BLOCK
from hccli.base.vocab import NUMBER, HcName, hc_tensor_name, parse_hc_name

RELEASE = "release"
RELEASE_PREFIXED = "release-prefixed"
TRANSFORMERS_SAVED = "transformers-saved"
TRANSFORMERS_MEMORY = "transformers-memory"
MEGATRON = "megatron"
GGUF = "gguf"
MLX_LM = "mlx-lm"
COMPRESSED_TENSORS = "compressed-tensors"
UNKNOWN = "unknown"
DIALECTS = (RELEASE, RELEASE_PREFIXED, TRANSFORMERS_SAVED, TRANSFORMERS_MEMORY, MEGATRON, GGUF, MLX_LM,
            COMPRESSED_TENSORS)
PACKING = (MLX_LM, COMPRESSED_TENSORS)  # packed their producers' way: checkpoint/verify/producers.py

DESCRIPTIONS = {
    RELEASE: "DeepSeek release layout",
    RELEASE_PREFIXED: "release layout under a `model.` prefix",
    TRANSFORMERS_SAVED: "transformers save_pretrained layout (DeepseekV4ForCausalLM)",
    TRANSFORMERS_MEMORY: "transformers in-memory module names",
    MEGATRON: "Megatron-style (decoder.*) names",
    GGUF: "llama.cpp GGUF (deepseek4 / deepseek41)",
    MLX_LM: "mlx-lm's save_model of deepseek_v41 (mlx_lm.convert)",
    COMPRESSED_TENSORS: "compressed-tensors' quantised save of transformers' DeepseekV4ForCausalLM "
                        "as llm-compressor or ModelCompressor writes it",
    UNKNOWN: "no known dialect",
}

# A name with "*" stands for every routed expert stacked into one tensor
# (GGUF ffn_*_exps; transformers' gate_up_proj holds w1 and w3 concatenated).
FUSED_MARK = "*"

_N = rf"(?P<num>{NUMBER})"
_HC = {
    TRANSFORMERS_SAVED: re.compile(
        rf"^model\.(?:layers\.{_N}\.hc_(?P<site>attn|ffn)_(?P<part>fn|base|scale)"
        r"|hc_head\.hc_(?P<hpart>fn|base|scale))$"),
    TRANSFORMERS_MEMORY: re.compile(
        rf"^(?:model\.)?(?:layers\.{_N}\.(?P<site>attn|ffn)_hc\.(?P<part>fn|base|scale)"
        r"|hc_head\.hc_(?P<hpart>fn|base|scale))$"),
    MEGATRON: re.compile(
        rf"^decoder\.(?:layers\.{_N}\.hc_(?P<site>attn|ffn)_(?P<part>fn|base|scale)"
        r"|hc_head_params\.hc_head_(?P<hpart>fn|base|scale))$"),
    GGUF: re.compile(
        rf"^(?:blk\.{_N}\.hc_(?P<site>attn|ffn)_(?P<part>fn|base|scale)|output_hc_(?P<hpart>fn|base|scale))\.weight$"),
    MLX_LM: re.compile(rf"^model\.layers\.{_N}\.(?P<site>attn|ffn)_hc\.(?P<part>fn|base|scale)$"),  # no head mix
}
_HC[COMPRESSED_TENSORS] = _HC[TRANSFORMERS_SAVED]  # HC tensors are parameters, never a compressor's


def hc_name(name: str, dialect: str) -> HcName | None:
    """One tensor name in `dialect` -> its canonical HcName; None for any other tensor."""
    if "hc" not in name:  # every HC spelling holds "hc"; ~0.1% of a checkpoint's names do
        return None
    if dialect == RELEASE:
        return parse_hc_name(name)
    if dialect == RELEASE_PREFIXED:
        return parse_hc_name(name[6:]) if name.startswith("model.") else None
    rx = _HC.get(dialect)
    m = rx.match(name) if rx is not None else None
    if m is None:
        return None
    if "hpart" in rx.groupindex and m["hpart"] is not None:
        return HcName("", None, "head", m["hpart"])
    return HcName("layers", int(m["num"]), m["site"], m["part"])


def spell_hc(hc: HcName, dialect: str) -> str | None:
    """The canonical HcName as `dialect` writes it; None where the dialect has no such tensor."""
    if dialect == RELEASE:
        return hc.canonical()
    if dialect == RELEASE_PREFIXED:
        return "model." + hc.canonical()
    if hc.kind == "mtp":  # only the release layouts carry the stages
        return None
    head = hc.kind == ""
    if dialect in (TRANSFORMERS_SAVED, COMPRESSED_TENSORS):
        return f"model.hc_head.hc_{hc.part}" if head else f"model.{hc.canonical()}"
    if dialect == MLX_LM:
        return None if head else f"model.layers.{hc.num}.{hc.site}_hc.{hc.part}"
    if dialect == TRANSFORMERS_MEMORY:
        return f"model.hc_head.hc_{hc.part}" if head else f"model.layers.{hc.num}.{hc.site}_hc.{hc.part}"
    if dialect == MEGATRON:
        return f"decoder.hc_head_params.hc_head_{hc.part}" if head else f"decoder.{hc.canonical()}"
    if dialect == GGUF:
        return f"output_hc_{hc.part}.weight" if head else f"blk.{hc.num}.hc_{hc.site}_{hc.part}.weight"
    return None


# --- every other tensor ---------------------------------------------------------------

def _compressor(src: str, dst: str, kv: str, gate: str, ape: str, norm: str) -> dict[str, str]:
    return {f"{src}{kv}": f"{dst}wkv.weight", f"{src}{gate}": f"{dst}wgate.weight",
            f"{src}{ape}": f"{dst}ape", f"{src}{norm}": f"{dst}norm.weight"}


# layer-relative names (after "blk.L." / "layers.L."), dialect -> canonical
_GGUF_LAYER = {
    "attn_sinks.weight": "attn.attn_sink",
    "attn_q_a.weight": "attn.wq_a.weight",
    "attn_q_b.weight": "attn.wq_b.weight",
    "attn_q_a_norm.weight": "attn.q_norm.weight",
    "attn_kv.weight": "attn.wkv.weight",
    "attn_kv_a_norm.weight": "attn.kv_norm.weight",
    "attn_output_a.weight": "attn.wo_a.weight",
    "attn_output_b.weight": "attn.wo_b.weight",
    **_compressor("attn_compressor_", "attn.compressor.", "kv.weight", "gate.weight", "ape.weight", "norm.weight"),
    **_compressor("indexer_compressor_", "attn.indexer.compressor.", "kv.weight", "gate.weight", "ape.weight",
                  "norm.weight"),
    "indexer.attn_q_b.weight": "attn.indexer.wq_b.weight",
    "indexer.proj.weight": "attn.indexer.weights_proj.weight",
    "indexer.attn_k.weight": "attn.indexer.wk.weight",  # deepseek41
    "indexer.k_norm.weight": "attn.indexer.k_norm.weight",  # deepseek41
    "attn_norm.weight": "attn_norm.weight",
    "ffn_norm.weight": "ffn_norm.weight",
    "ffn_gate_inp.weight": "ffn.gate.weight",
    "exp_probs_b.bias": "ffn.gate.bias",
    "ffn_gate_tid2eid.weight": "ffn.gate.tid2eid",
    "ffn_gate_shexp.weight": "ffn.shared_experts.w1.weight",
    "ffn_up_shexp.weight": "ffn.shared_experts.w3.weight",
    "ffn_down_shexp.weight": "ffn.shared_experts.w2.weight",
    "ffn_gate_exps.weight": "ffn.experts.*.w1.weight",
    "ffn_up_exps.weight": "ffn.experts.*.w3.weight",
    "ffn_down_exps.weight": "ffn.experts.*.w2.weight",
}
_GGUF_TOP = {"token_embd.weight": "embed.weight", "output_norm.weight": "norm.weight", "output.weight": "head.weight"}

_TF_MEMORY_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.sinks": "attn.attn_sink",
    "self_attn.q_a_proj.weight": "attn.wq_a.weight",
    "self_attn.q_a_norm.weight": "attn.q_norm.weight",
    "self_attn.q_b_proj.weight": "attn.wq_b.weight",
    "self_attn.kv_proj.weight": "attn.wkv.weight",
    "self_attn.kv_norm.weight": "attn.kv_norm.weight",
    "self_attn.o_a_proj.weight": "attn.wo_a.weight",
    "self_attn.o_b_proj.weight": "attn.wo_b.weight",
    **_compressor("self_attn.compressor.", "attn.compressor.", "kv_proj.weight", "gate_proj.weight",
                  "position_bias", "kv_norm.weight"),
    **_compressor("self_attn.compressor.indexer.", "attn.indexer.compressor.", "kv_proj.weight",
                  "gate_proj.weight", "position_bias", "kv_norm.weight"),
    "self_attn.compressor.indexer.q_b_proj.weight": "attn.indexer.wq_b.weight",
    "self_attn.compressor.indexer.scorer.weights_proj.weight": "attn.indexer.weights_proj.weight",
    "mlp.gate.weight": "ffn.gate.weight",
    "mlp.gate.e_score_correction_bias": "ffn.gate.bias",
    "mlp.gate.tid2eid": "ffn.gate.tid2eid",
    "mlp.shared_experts.gate_proj.weight": "ffn.shared_experts.w1.weight",
    "mlp.shared_experts.up_proj.weight": "ffn.shared_experts.w3.weight",
    "mlp.shared_experts.down_proj.weight": "ffn.shared_experts.w2.weight",
    "mlp.experts.gate_up_proj": "ffn.experts.*.w1+w3.weight",
    "mlp.experts.down_proj": "ffn.experts.*.w2.weight",
}
_TF_MEMORY_TOP = {"embed_tokens.weight": "embed.weight", "lm_head.weight": "head.weight", "norm.weight": "norm.weight"}

# save_pretrained runs transformers' renames backwards; three of them do not
# land on the release name (the anchored ^embed / ^hc_head patterns miss the
# `model.` prefix, and `.norm.` -> `.kv_norm.` reverses onto the main kv norm)
_TF_SAVED_TOP = {"embed_tokens.weight": "embed.weight", "hc_head.hc_fn": "hc_head_fn",
                 "hc_head.hc_base": "hc_head_base", "hc_head.hc_scale": "hc_head_scale"}

_MEGATRON_LAYER = {
    **{f"self_attention.{k}.weight": f"attn.{k}.weight" for k in ("wq_a", "q_norm", "wq_b", "wkv", "kv_norm",
                                                                  "wo_a", "wo_b")},
    "self_attention.attn_sink": "attn.attn_sink",
    **_compressor("self_attention.compressor.", "attn.compressor.", "wkv.weight", "wgate.weight", "ape",
                  "norm.weight"),
    **_compressor("self_attention.indexer.compressor.", "attn.indexer.compressor.", "wkv.weight", "wgate.weight",
                  "ape", "norm.weight"),
    "self_attention.indexer.linear_wq_b.weight": "attn.indexer.wq_b.weight",
    "self_attention.indexer.linear_weights_proj.weight": "attn.indexer.weights_proj.weight",
}

_LAYER = re.compile(rf"^(?:blk|layers)\.({NUMBER})\.(.+)$")


def _layer_map(rest: str, table: Mapping[str, str]) -> str | None:
    m = _LAYER.match(rest)
    if m is None:
        return None
    mapped = table.get(m[2])
    return f"layers.{m[1]}.{mapped}" if mapped is not None else None


def canonical_name(name: str, dialect: str) -> str | None:
    """Any tensor name in `dialect` -> its release name; None when the dialect's
    producer defines no such tensor. Fused experts map to a name holding FUSED_MARK."""
    hc = hc_name(name, dialect)
    if hc is not None:
        return hc.canonical()
    if dialect == RELEASE:
        return name
    if dialect == RELEASE_PREFIXED:
        return name[6:] if name.startswith("model.") else name
    if dialect == TRANSFORMERS_SAVED:
        if not name.startswith("model."):
            return name  # head.weight: lm_head reverses to the release name at the root
        rest = name[6:]
        if rest in _TF_SAVED_TOP:
            return _TF_SAVED_TOP[rest]
        m = _LAYER.match(rest)
        if m is not None and m[2] == "attn.norm.weight":
            return f"layers.{m[1]}.attn.kv_norm.weight"
        return rest
    if dialect == TRANSFORMERS_MEMORY:
        rest = name[6:] if name.startswith("model.") else name
        return _TF_MEMORY_TOP.get(rest) or _layer_map(rest, _TF_MEMORY_LAYER)
    if dialect == MEGATRON:
        return _layer_map(name[8:], _MEGATRON_LAYER) if name.startswith("decoder.") else None
    if dialect == GGUF:
        return _GGUF_TOP.get(name) or _layer_map(name, _GGUF_LAYER)
    if dialect == MLX_LM:
        return dialect_mlx.canonical(name)
    if dialect == COMPRESSED_TENSORS:
        side = dialect_ct.split(name)
        if side is None:
            return canonical_name(name, TRANSFORMERS_SAVED)
        weight, role, suffix = side
        base = canonical_name(weight, TRANSFORMERS_SAVED)
        stem = base[: -len(".weight")] if base.endswith(".weight") else base
        return base if role == "weight" else f"{stem}.scale" if role == "scales" else f"{stem}.{suffix}"
    return None


def is_fused(canonical: str) -> bool:
    return FUSED_MARK in canonical


def canonical_shape(shape: Iterable[int], dialect: str) -> tuple[int, ...]:
    """A tensor's shape as the dialect stores it -> the release's (row-major) order."""
    dims = tuple(int(d) for d in shape)
    return dims[::-1] if dialect == GGUF else dims


def stored_shape(shape: Iterable[int], dialect: str) -> tuple[int, ...]:
    """The release's shape as the dialect lists it (GGUF: ne, fastest dimension first)."""
    return canonical_shape(shape, dialect)  # reversal is its own inverse


# --- detection --------------------------------------------------------------------------

_SAVED_HINT = ("model.hc_head.", "model.embed_tokens.")
_PREFIXED_HINT = ("model.hc_head_", "model.embed.")
_MEMORY_HINT = ("_hc.", ".self_attn.", ".mlp.", "_layernorm.")
RELEASE_ROOTS = ("layers.", "mtp.", "hc_head_", "embed.", "norm.")
_MODEL_AMBIGUOUS = "model-prefixed"
# every first segment _vote gives to a dialect other than the release
_NOT_RELEASE_ROOTS = ("blk.", "output_hc_", "token_embd.", "output_norm.", "output.weight", "decoder.", "model.",
                      "lm_head.")


def _vote(n: str) -> str | None:
    if n.startswith(("blk.", "output_hc_", "token_embd.", "output_norm.", "output.weight")):
        return GGUF
    if n.startswith("decoder."):
        return MEGATRON
    if dialect_ct.votes_for(n):
        return COMPRESSED_TENSORS
    if dialect_mlx.votes_for(n):
        return MLX_LM
    if n.startswith("model."):
        # only a layer's own module names tell: the release's vision tower has an `.mlp.` too
        if n.startswith("model.layers.") and any(h in n for h in _MEMORY_HINT):
            return TRANSFORMERS_MEMORY
        if n.startswith(_SAVED_HINT):
            return TRANSFORMERS_SAVED
        if n.startswith(_PREFIXED_HINT):
            return RELEASE_PREFIXED
        return _MODEL_AMBIGUOUS
    if n.startswith("lm_head."):
        return TRANSFORMERS_MEMORY
    if n.startswith(RELEASE_ROOTS):
        return RELEASE
    return None


def config_dialect(config: Mapping[str, Any] | None) -> str | None:
    """"transformers" for a config written by transformers 5 (its own key names),
    "release" for one in the release's keys, None when it does not say."""
    if not isinstance(config, Mapping):
        return None
    text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else config
    if any(k in text for k in ("layer_types", "compress_rates", "mlp_layer_types")):
        return "transformers"
    if "compress_ratios" in text:
        return "release"
    return None


@dataclass(frozen=True, slots=True)
class Detection:
    dialect: str
    evidence: str  # the first name (or config key) that decided it
    votes: dict[str, int] = field(default_factory=dict)
    note: str = ""


def detect_dialect(names: Iterable[str], config: Mapping[str, Any] | None = None, quant: str | None = None
                   ) -> Detection:
    """The dialect a set of tensor names is written in, helped by its config where
    the names alone cannot tell (a shard holding only `model.layers.*` is a
    transformers save or a prefixed release: the same HC spelling, not the same rest).
    quant: the kind of quantisation block the config holds (config_quant.QuantBlock.kind)."""
    names = names if isinstance(names, Collection) else list(names)
    first = next(iter(names), None)
    # one set of names' first two characters stands for eight prefix tests a name: no name starts
    # with another dialect's root when none starts with its first two (another's first name decides)
    if first is not None and not first.startswith(_NOT_RELEASE_ROOTS) and (
            set(map(itemgetter(slice(0, 2)), names)).isdisjoint(r[:2] for r in _NOT_RELEASE_ROOTS)
            or not any(map(str.startswith, names, repeat(_NOT_RELEASE_ROOTS)))):
        # the common case, a release's ~100k names, decided by C-level scans alone
        first_release = next((n for n in names if n.startswith(RELEASE_ROOTS)), None)
        if first_release is not None:
            return Detection(RELEASE, first_release)
    votes: dict[str, int] = {}
    first: dict[str, str] = {}
    for n in names:
        d = _vote(n)
        if d is not None:
            votes[d] = votes.get(d, 0) + 1
            first.setdefault(d, n)
    for d in (GGUF, MEGATRON, MLX_LM, COMPRESSED_TENSORS):
        if votes.get(d):
            return Detection(d, first[d], votes, _quant_note(d, quant))
    by_block = {_MLX_BLOCK: (MLX_LM, (TRANSFORMERS_MEMORY,)),
                _CT_BLOCK: (COMPRESSED_TENSORS, (TRANSFORMERS_SAVED, _MODEL_AMBIGUOUS))}.get(quant or "")
    if by_block is not None and any(votes.get(d) for d in by_block[1]):
        d = next(d for d in by_block[1] if votes.get(d))
        return Detection(by_block[0], first[d], votes, f"names alone read as {d}; config.json holds "
                         f"{_BLOCK_NAMES[quant or '']}")
    for d in (TRANSFORMERS_MEMORY, TRANSFORMERS_SAVED, RELEASE_PREFIXED):
        if votes.get(d):
            return Detection(d, first[d], votes)
    if votes.get(_MODEL_AMBIGUOUS):
        hint = config_dialect(config)
        d = TRANSFORMERS_SAVED if hint == "transformers" else RELEASE_PREFIXED
        note = ("names alone fit a transformers save or a prefixed release; "
                + ("the config is transformers-written" if hint == "transformers" else "taken as a prefixed release"))
        return Detection(d, first[_MODEL_AMBIGUOUS], votes, note)
    if votes.get(RELEASE):
        return Detection(RELEASE, first[RELEASE], votes)
    return Detection(UNKNOWN, "", votes, "no tensor name of any known dialect")


_BLOCK_NAMES = {_MLX_BLOCK: "mlx-lm's `quantization`", _CT_BLOCK: "compressed-tensors' `quantization_config`"}


def _quant_note(dialect: str, quant: str | None) -> str:
    """What the config's quantisation block adds to a dialect the names decided."""
    want = {MLX_LM: _MLX_BLOCK, COMPRESSED_TENSORS: _CT_BLOCK}.get(dialect)
    # mlx-lm writes no block for a model it did not quantise, and reads the release's fp8 block as its own
    if want is None or quant == want or (dialect == MLX_LM and quant in (None, _FP8_BLOCK)):
        return ""
    if quant in _BLOCK_NAMES:
        return f"config.json holds {_BLOCK_NAMES[quant]}, not {_BLOCK_NAMES[want]}"
    return f"config.json holds no {_BLOCK_NAMES[want]}"


def canonical_hc_names(names: Iterable[str], dialect: str) -> dict[str, str]:
    """stored name -> canonical HC name, for the HC tensors among `names`."""
    out: dict[str, str] = {}
    for n in names:
        hc = hc_name(n, dialect)
        if hc is not None:
            out[n] = hc_tensor_name(hc.owner, hc.site, hc.part)
    return out
