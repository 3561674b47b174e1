"""mlx-lm's spelling of a DeepSeek-V4.1 checkpoint, both ways (docs/DIALECTS.md, section mlx-lm).

Every rule below is read from mlx-lm 0.32.2, `mlx_lm/models/deepseek_v41.py`:

- `_rename`: substring replacements, applied in order, that turn a release name into the module
  path (`model.` in front, `.attn.` -> `.self_attn.`, `.hc_attn_` -> `.attn_hc.`, ...);
  `head.weight` -> `lm_head.weight`, `embed.weight` -> `model.embed_tokens.weight`.
- `Model.sanitize`: drops `_DROP_PREFIXES` (vision., aligner., image_, mtp.), `.engram.` and
  `.gate.bias_vl`; stacks a layer's routed experts `ffn.experts.X.wK` into
  `mlp.experts.switch_mlp.{gate,down,up}_proj` [E, o, i] (`_EXPERT_PROJ`); splits `wo_a`
  into its `o_groups` ([G, o/G, i]: a `SwitchLinear`); an fp8/fp4 weight and its ue8m0 `.scale`
  become `.weight` (uint32 words) and `.scales` (uint8 exponents, `_repack`).
- `mlx_lm/utils.py` `quantize_model` (`nn.quantize`): a quantised `Linear`, `Embedding` or
  `SwitchLinear` holds `.weight` (uint32 words), `.scales` and, in affine mode, `.biases`.

The model has no head mix (V4.1) and no stages, so only `layers.L.hc_{attn,ffn}_*` exist here.
"""

from __future__ import annotations

import re

# _rename's replacements, in its order
RENAMES = (
    (".attn.", ".self_attn."), (".ffn.", ".mlp."), (".attn_norm.", ".input_layernorm."),
    (".ffn_norm.", ".post_attention_layernorm."), (".hc_attn_", ".attn_hc."), (".hc_ffn_", ".ffn_hc."),
    (".attn_sink", ".sinks"), (".wq_a.", ".q_a_proj."), (".wq_b.", ".q_b_proj."), (".wkv.", ".kv_proj."),
    (".wgate.", ".gate_proj."), (".wo_a.", ".o_a_proj."), (".wo_b.", ".o_b_proj."), (".q_norm.", ".q_a_norm."),
    (".compressor.norm.", ".compressor.kv_norm."), (".indexer.wk.", ".indexer.k_proj."),
    (".gate.bias", ".gate.e_score_correction_bias"), (".shared_experts.w1.", ".shared_experts.gate_proj."),
    (".shared_experts.w2.", ".shared_experts.down_proj."), (".shared_experts.w3.", ".shared_experts.up_proj."),
)
DROP_PREFIXES = ("vision.", "aligner.", "image_", "mtp.")  # sanitize's _DROP_PREFIXES
EXPERT_PROJ = {"w1": "gate_proj", "w2": "down_proj", "w3": "up_proj"}  # sanitize's _EXPERT_PROJ
STACKED = "*"  # dialects.FUSED_MARK: one tensor for every routed expert of the layer

# a layer's module path -> its release prefix, for the modules mlx-lm can quantise
# (nn.Linear, SwitchLinear, nn.Embedding: quantize_model's `to_quantized`)
LINEAR = {
    "self_attn.q_a_proj": "attn.wq_a",
    "self_attn.q_b_proj": "attn.wq_b",
    "self_attn.kv_proj": "attn.wkv",
    "self_attn.o_a_proj": "attn.wo_a",  # split into its groups
    "self_attn.o_b_proj": "attn.wo_b",
    "self_attn.compressor.kv_proj": "attn.compressor.wkv",
    "self_attn.compressor.gate_proj": "attn.compressor.wgate",
    "self_attn.indexer.k_proj": "attn.indexer.wk",
    "self_attn.indexer.q_b_proj": "attn.indexer.wq_b",
    "self_attn.indexer.weights_proj": "attn.indexer.weights_proj",
    "mlp.shared_experts.gate_proj": "ffn.shared_experts.w1",
    "mlp.shared_experts.up_proj": "ffn.shared_experts.w3",
    "mlp.shared_experts.down_proj": "ffn.shared_experts.w2",
    **{f"mlp.experts.switch_mlp.{proj}": f"ffn.experts.{STACKED}.{w}" for w, proj in EXPERT_PROJ.items()},
}
TOP_LINEAR = {"lm_head": "head", "model.embed_tokens": "embed"}
# the other tensors of a layer (plain arrays and norms; never quantised), whole names
PLAIN = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.sinks": "attn.attn_sink",
    "self_attn.q_a_norm.weight": "attn.q_norm.weight",
    "self_attn.kv_norm.weight": "attn.kv_norm.weight",
    "self_attn.compressor.kv_norm.weight": "attn.compressor.norm.weight",
    "self_attn.indexer.k_norm.weight": "attn.indexer.k_norm.weight",
    "mlp.gate.weight": "ffn.gate.weight",
    "mlp.gate.e_score_correction_bias": "ffn.gate.bias",
}
TOP_PLAIN = {"model.norm.weight": "norm.weight"}
# what a quantised module holds besides `.weight` (nn.QuantizedLinear, QuantizedSwitchLinear;
# `global_scale` only for nvfp4 switch layers, utils._takes_global_scale)
SIDES = ("scales", "biases", "global_scale")
GROUPED = "attn.wo_a"  # stored [o_groups, o / o_groups, i]

_LAYER = re.compile(r"^model\.layers\.(0|[1-9][0-9]{0,5})\.(.+)$")
_HC = re.compile(r"^(attn|ffn)_hc\.(fn|base|scale)$")
_EXPERT = re.compile(r"layers\.(0|[1-9][0-9]{0,5})\.ffn\.experts\.(?:0|[1-9][0-9]{0,5})\.(w[123])\.(weight|scale)")


def split(name: str) -> tuple[str, str, str] | None:
    """A stored name -> (release name of the tensor it belongs to, role, stored module path);
    role is "weight", one of SIDES (the module's quantisation side tensors), or "tensor" for
    a plain array. None: mlx-lm writes no such name for this model."""
    m = _LAYER.match(name)
    if m is None:
        if name in TOP_PLAIN:
            return TOP_PLAIN[name], "tensor", name
        module, _, role = name.rpartition(".")
        base = TOP_LINEAR.get(module)
        if base is None or role not in ("weight", *SIDES):
            return None
        return f"{base}.weight", role, module
    layer, rest = m[1], m[2]
    hc = _HC.match(rest)
    if hc is not None:
        return f"layers.{layer}.hc_{hc[1]}_{hc[2]}", "tensor", name
    if rest in PLAIN:
        return f"layers.{layer}.{PLAIN[rest]}", "tensor", name
    module, _, role = rest.rpartition(".")
    base = LINEAR.get(module)
    if base is None or role not in ("weight", *SIDES):
        return None
    return f"layers.{layer}.{base}.weight", role, name[: -len(role) - 1]


def canonical(name: str) -> str | None:
    """The release name a stored name stands for: a weight's own name for `.weight`, its
    quantisation scale's (`.scale`, the release's word) for `.scales`, and `<weight>.biases` /
    `.global_scale` for what the release has no tensor of."""
    got = split(name)
    if got is None:
        return None
    base, role, _ = got
    if role in ("weight", "tensor"):
        return base
    stem = base[: -len(".weight")]
    return f"{stem}.scale" if role == "scales" else f"{stem}.{role}"


def stored_name(release: str) -> str | None:
    """What mlx-lm writes for a release tensor (its weight, or an fp8/fp4 `.scale` as `.scales`);
    None for what sanitize drops. Routed experts come back stacked: `...switch_mlp.gate_proj.weight`."""
    if release.startswith(DROP_PREFIXES) or ".engram." in release or release.endswith(".gate.bias_vl"):
        return None
    m = _EXPERT.fullmatch(release)
    if m is not None:
        suffix = "weight" if m[3] == "weight" else "scales"
        return f"model.layers.{m[1]}.mlp.experts.switch_mlp.{EXPERT_PROJ[m[2]]}.{suffix}"
    if release.endswith(".scale"):  # repacked beside its weight (_repack)
        return rename(release[: -len("scale")] + "weight")[: -len("weight")] + "scales"
    return rename(release)


def rename(key: str) -> str:
    """_rename, as mlx-lm writes it."""
    if key == "head.weight":
        return "lm_head.weight"
    if key == "embed.weight":
        return "model.embed_tokens.weight"
    key = f"model.{key}"
    for old, new in RENAMES:
        key = key.replace(old, new)
    return key


def votes_for(name: str) -> bool:
    """Whether a name is mlx-lm's and no other producer's: stacked experts or quantisation sides."""
    return ".switch_mlp." in name or name.endswith((".scales", ".biases"))
