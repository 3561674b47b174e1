"""Load and validate a DeepSeek-V4-family config.json into one frozen ModelConfig.

Two styles are read:
- inference style: the flat `inference/config.json` (`dim`, `n_layers`, ...);
- hub style: the model hub's config.json, language settings at the root (V4) or
  under `text_config` (V4.1), with hub key names (`hidden_size`, ...), and the
  vision settings under `vision_config`.

Keys that are absent take the reference defaults; list-valued architecture keys
(Engram layers, KV sources, ...) that are absent mean the feature is absent.
Unknown keys are tolerated. Every error names the file and the key.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hccli.errors import HcError

# hub key -> inference key, for the language settings
HUB_KEYS = {
    "hidden_size": "dim",
    "num_hidden_layers": "n_layers",
    "moe_intermediate_size": "moe_inter_dim",
    "num_attention_heads": "n_heads",
    "qk_rope_head_dim": "rope_head_dim",
    "num_experts_per_tok": "n_activated_experts",
    "sliding_window": "window_size",
    "kv_source_layer_ids": "kv_source_layers",
    "index_source_layer_ids": "index_source_layers",
    "candidate_source_layer_id": "candidate_source_layer",
    "num_nextn_predict_layers": "n_mtp_layers",
    "rms_norm_eps": "norm_eps",
    "num_hash_layers": "n_hash_layers",
    "dspark_num_experts_per_tok": "dspark_n_activated_experts",
    "engram_pad_token_id": "engram_pad_id",
}

VISION_HUB_KEYS = {
    "num_hidden_layers": "vision_n_layers",
    "hidden_size": "vision_dim",
    "num_attention_heads": "vision_n_heads",
    "intermediate_size": "vision_inter_dim",
    "patch_size": "vision_patch_size",
    "downsample_ratio": "vision_downsample_ratio",
}

# Reference defaults for scalars a config may leave out (inference/model.py).
DEFAULTS: dict[str, Any] = {
    "hc_mult": 4,
    "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-6,
    "norm_eps": 1e-6,
    "n_mtp_layers": 1,
    "n_hash_layers": 0,
    "n_shared_experts": 1,
    "o_groups": 8,
    "o_lora_rank": 1024,
    "head_dim": 512,
    "rope_head_dim": 64,
    "index_n_heads": 64,
    "index_head_dim": 128,
    "window_size": 128,
    "engram_max_ngram_size": 4,
    "engram_n_heads": 8,
    "engram_head_dim": 256,
    "dspark_markov_rank": 256,
    "expert_dtype": "fp4",
    "dtype": "fp8",
}

REQUIRED = ("vocab_size", "dim", "n_layers", "n_heads", "q_lora_rank", "moe_inter_dim", "n_routed_experts",
            "n_activated_experts")

BUNDLED_DEFAULT = "deepseek-v4.1-flash.json"


@dataclass(frozen=True)
class VisionConfig:
    n_layers: int
    dim: int
    n_heads: int
    inter_dim: int
    patch_size: int
    downsample_ratio: int


@dataclass(frozen=True)
class ModelConfig:
    source: str  # the file it came from, for messages
    style: str  # "inference" | "hub"
    family: str  # "v4.1" (no head mix, KV sources, Engram) | "v4" (head mix)
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    head_dim: int
    rope_head_dim: int
    q_lora_rank: int
    o_lora_rank: int
    o_groups: int
    moe_inter_dim: int
    n_routed_experts: int
    n_shared_experts: int
    n_activated_experts: int
    n_hash_layers: int
    index_n_heads: int
    index_head_dim: int
    window_size: int
    compress_ratios: tuple[int, ...]
    kv_source_layers: tuple[int, ...]
    index_source_layers: tuple[int, ...]
    engram_layer_ids: tuple[int, ...]
    engram_num_embeddings: tuple[int, ...]
    engram_max_ngram_size: int
    engram_n_heads: int
    engram_head_dim: int
    hc_mult: int
    hc_sinkhorn_iters: int
    hc_eps: float
    norm_eps: float
    n_stages: int  # DSpark / MTP stages after the backbone
    stage_kind: str  # "dspark" | "mtp"
    dspark_target_layer_ids: tuple[int, ...]
    dspark_markov_rank: int
    stage_routed_experts: int
    fp8_block: int  # side of the square block one F8_E8M0 scale covers
    expert_dtype: str  # "fp4" | "fp8"
    vision: VisionConfig | None
    notes: tuple[str, ...] = field(default=())

    @property
    def has_head_mix(self) -> bool:
        """V4 (Flash, Pro and their releases) learn a head mix; V4.1 has none."""
        return self.family == "v4"

    @property
    def mix_hc(self) -> int:
        return (2 + self.hc_mult) * self.hc_mult

    @property
    def stage_names(self) -> tuple[str, ...]:
        return tuple(f"mtp.{s}" for s in range(self.n_stages))


def bundled_config_path(name: str = BUNDLED_DEFAULT) -> Path:
    # a plain package path (not importlib.resources, which costs start-up time):
    # sample_configs/ ships as the package hccli.sample_configs
    import hccli.sample_configs

    return Path(hccli.sample_configs.__file__).parent / name


def load_config(path: str | Path | None = None) -> ModelConfig:
    """Read and validate a config file (default: the bundled V4.1-Flash config)."""
    p = Path(path) if path is not None else bundled_config_path()
    if p.is_dir():
        if (p / "config.json").is_file():
            p = p / "config.json"
        else:
            raise HcError(f"{p}: is a directory without a config.json; expected a config.json file")
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise HcError(f"{p}: no such file; expected a model config.json") from None
    except OSError as exc:
        raise HcError(f"{p}: cannot read: {exc.strerror or exc}") from None
    return parse_config(raw, str(p))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_config(raw: bytes | str, source: str) -> ModelConfig:
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        data = json.loads(text, parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise HcError(f"{source}: not UTF-8 text (byte {exc.start}); expected a JSON config") from None
    except (json.JSONDecodeError, ValueError) as exc:
        raise HcError(f"{source}: not valid JSON ({exc}); expected a model config.json") from None
    if not isinstance(data, dict):
        raise HcError(f"{source}: top level is a JSON {type(data).__name__}; expected an object")
    if "layer_types" in data:  # transformers-written: read as the release config it came from
        from hccli.config_hf import is_transformers_config, release_config_from_transformers

        data = release_config_from_transformers(data, source) if is_transformers_config(data) else data
    return _from_mapping(data, source)


class _Reader:
    """Typed access to the merged key space, naming the original key on error."""

    def __init__(self, values: dict[str, Any], origin: dict[str, str], source: str):
        self.values = values
        self.origin = origin  # inference key -> key path as written in the file
        self.source = source

    def where(self, key: str) -> str:
        return self.origin.get(key, key)

    def fail(self, key: str, expected: str, got: Any = ...) -> HcError:
        shown = "" if got is ... else f", got {json.dumps(got)[:60]}"
        return HcError(f"{self.source}: key '{self.where(key)}': expected {expected}{shown}")

    def has(self, key: str) -> bool:
        return self.values.get(key) is not None

    def int(self, key: str, minimum: int = 0) -> int:
        if key not in self.values or self.values[key] is None:
            if key in DEFAULTS:
                return DEFAULTS[key]
            raise HcError(f"{self.source}: key '{self.where(key)}' is missing; expected an integer")
        v = self.values[key]
        if isinstance(v, float) and v.is_integer() and not isinstance(v, bool):
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool):
            raise self.fail(key, "an integer", v)
        if v < minimum:
            raise self.fail(key, f"an integer >= {minimum}", v)
        return v

    def float(self, key: str) -> float:
        v = self.values.get(key)
        if v is None:
            return float(DEFAULTS[key])
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            raise self.fail(key, "a non-negative number", v)
        return float(v)

    def str(self, key: str, allowed: tuple[str, ...]) -> str:
        v = self.values.get(key, DEFAULTS.get(key))
        if v not in allowed:
            raise self.fail(key, "one of " + ", ".join(repr(a) for a in allowed), v)
        return v

    def int_list(self, key: str, minimum: int = 0) -> tuple[int, ...]:
        v = self.values.get(key)
        if v is None:
            return ()
        if not isinstance(v, list):
            raise self.fail(key, "a list of integers", v)
        for i, x in enumerate(v):
            if not isinstance(x, int) or isinstance(x, bool) or x < minimum:
                raise HcError(
                    f"{self.source}: key '{self.where(key)}[{i}]': expected an integer >= {minimum}, got {json.dumps(x)}"
                )
        return tuple(v)


def _from_mapping(data: dict[str, Any], source: str) -> ModelConfig:
    style = "hub" if ("text_config" in data or "hidden_size" in data or "num_hidden_layers" in data) else "inference"
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}

    def take(mapping: dict[str, Any], prefix: str, renames: dict[str, str], only_renamed: bool = False) -> None:
        for k, v in mapping.items():
            if only_renamed and k not in renames:
                continue
            target = renames.get(k, k)
            values[target] = v
            origin[target] = prefix + k

    take(data, "", HUB_KEYS if style == "hub" else {})
    text = data.get("text_config")
    if text is not None:
        if not isinstance(text, dict):
            raise HcError(f"{source}: key 'text_config': expected an object, got {type(text).__name__}")
        take(text, "text_config.", HUB_KEYS)
    quant = data.get("quantization_config")
    if isinstance(quant, dict):
        if "weight_block_size" in quant:
            values["weight_block_size"] = quant["weight_block_size"]
            origin["weight_block_size"] = "quantization_config.weight_block_size"
        if "expert_dtype" in quant and "expert_dtype" not in values:
            values["expert_dtype"] = quant["expert_dtype"]
            origin["expert_dtype"] = "quantization_config.expert_dtype"
    vision_cfg = data.get("vision_config")
    if vision_cfg is not None:
        if not isinstance(vision_cfg, dict):
            raise HcError(f"{source}: key 'vision_config': expected an object, got {type(vision_cfg).__name__}")
        # only the renamed keys: vision_config's rope_theta etc. must not shadow the text ones
        take(vision_cfg, "vision_config.", VISION_HUB_KEYS, only_renamed=True)
    r = _Reader(values, origin, source)
    for key in REQUIRED:
        if key not in values or values[key] is None:
            name = key if style == "inference" else ("text_config." if text is not None else "") + _hub_name(key)
            raise HcError(f"{source}: key '{name}' is missing; expected an integer")

    n_layers = r.int("n_layers", 1)
    model_type = str(data.get("model_type", "")) + " " + str((text or {}).get("model_type", ""))
    v41 = "deepseek_v41" in model_type or r.has("kv_source_layers") or r.has("engram_layer_ids")
    family = "v4.1" if v41 else "v4"
    notes: list[str] = []

    compress_ratios = r.int_list("compress_ratios")
    declared_stages = r.int("n_mtp_layers", 0)
    dspark_targets = r.int_list("dspark_target_layer_ids")
    if compress_ratios:
        if len(compress_ratios) < n_layers:
            raise r.fail("compress_ratios", f"{n_layers} layers + stages entries, got {len(compress_ratios)} entries")
        n_stages = len(compress_ratios) - n_layers
        if n_stages != declared_stages:
            # The 0731/0813 hub configs declare 1 next-token layer although their
            # checkpoints carry one DSpark stage per dspark target layer.
            if dspark_targets and n_stages == len(dspark_targets):
                notes.append(
                    f"'{r.where('n_mtp_layers')}' says {declared_stages} but compress_ratios and "
                    f"dspark_target_layer_ids imply {n_stages} DSpark stages; using {n_stages}"
                )
            else:
                raise r.fail(
                    "compress_ratios",
                    f"{n_layers} layers + {declared_stages} stages = {n_layers + declared_stages} entries "
                    f"('{r.where('n_mtp_layers')}' = {declared_stages}), got {len(compress_ratios)}",
                )
    else:
        n_stages = declared_stages
        compress_ratios = (0,) * (n_layers + n_stages)
        notes.append("no compress_ratios in the config: every layer taken as window-only")
    if dspark_targets and len(dspark_targets) != n_stages:
        raise r.fail("dspark_target_layer_ids", f"one id per DSpark stage ({n_stages}), got {len(dspark_targets)}")

    def layer_ids(key: str) -> tuple[int, ...]:
        ids = r.int_list(key)
        for i, x in enumerate(ids):
            if x >= n_layers:
                raise HcError(
                    f"{source}: key '{r.where(key)}[{i}]': layer {x} out of range; expected 0..{n_layers - 1}"
                )
        if len(set(ids)) != len(ids):
            raise r.fail(key, "distinct layer ids", list(ids))
        return tuple(sorted(ids))

    kv_sources = layer_ids("kv_source_layers")
    index_sources = layer_ids("index_source_layers")
    engram_ids = layer_ids("engram_layer_ids")
    layer_ids("dspark_target_layer_ids")
    for i, layer in enumerate(kv_sources):
        if compress_ratios[layer] == 0:
            raise HcError(
                f"{source}: key '{r.where('kv_source_layers')}[{i}]': layer {layer} has compress ratio 0; "
                "expected a compressed layer"
            )
    if kv_sources:
        first_compressed = next((i for i in range(n_layers) if compress_ratios[i] > 0), None)
        if first_compressed is not None and first_compressed < kv_sources[0]:
            raise r.fail(
                "kv_source_layers",
                f"a source at or before the first compressed layer {first_compressed}",
                list(kv_sources),
            )
    engram_rows = r.int_list("engram_num_embeddings", 1)
    if engram_ids and len(engram_rows) != len(engram_ids):
        raise r.fail("engram_num_embeddings", f"one row count per Engram layer ({len(engram_ids)})",
                     list(engram_rows))

    block = 32 if family == "v4.1" else 128
    if "weight_block_size" in values:
        wb = values["weight_block_size"]
        if (not isinstance(wb, list) or len(wb) != 2 or not all(isinstance(x, int) and x > 0 for x in wb)
                or wb[0] != wb[1]):
            raise r.fail("weight_block_size", "two equal positive integers", wb)
        block = wb[0]

    vision = None
    if r.has("vision_n_layers"):
        vision = VisionConfig(
            n_layers=r.int("vision_n_layers", 1),
            dim=r.int("vision_dim", 1),
            n_heads=r.int("vision_n_heads", 1),
            inter_dim=r.int("vision_inter_dim", 1),
            patch_size=r.int("vision_patch_size", 1),
            downsample_ratio=r.int("vision_downsample_ratio", 1),
        )

    n_heads = r.int("n_heads", 1)
    o_groups = r.int("o_groups", 1)
    head_dim = r.int("head_dim", 1)
    if (n_heads * head_dim) % o_groups:
        raise r.fail("o_groups", f"a divisor of n_heads*head_dim = {n_heads * head_dim}", o_groups)
    expert_dtype = r.str("expert_dtype", ("fp4", "fp8"))
    dim = r.int("dim", 1)
    moe_inter = r.int("moe_inter_dim", 1)
    if expert_dtype == "fp4" and (dim % 32 or moe_inter % 32):
        raise r.fail("dim" if dim % 32 else "moe_inter_dim", "a multiple of 32 for fp4 experts",
                     dim if dim % 32 else moe_inter)
    n_routed = r.int("n_routed_experts", 1)
    n_act = r.int("n_activated_experts", 1)
    if n_act > n_routed:
        raise r.fail("n_activated_experts", f"at most n_routed_experts = {n_routed}", n_act)
    n_hash = r.int("n_hash_layers", 0)
    if n_hash > n_layers:
        raise r.fail("n_hash_layers", f"at most {n_layers} layers", n_hash)

    return ModelConfig(
        source=source,
        style=style,
        family=family,
        vocab_size=r.int("vocab_size", 1),
        dim=dim,
        n_layers=n_layers,
        n_heads=n_heads,
        head_dim=head_dim,
        rope_head_dim=r.int("rope_head_dim", 0),
        q_lora_rank=r.int("q_lora_rank", 1),
        o_lora_rank=r.int("o_lora_rank", 1),
        o_groups=o_groups,
        moe_inter_dim=moe_inter,
        n_routed_experts=n_routed,
        n_shared_experts=r.int("n_shared_experts", 0),
        n_activated_experts=n_act,
        n_hash_layers=n_hash,
        index_n_heads=r.int("index_n_heads", 1),
        index_head_dim=r.int("index_head_dim", 1),
        window_size=r.int("window_size", 0),
        compress_ratios=compress_ratios,
        kv_source_layers=kv_sources,
        index_source_layers=index_sources,
        engram_layer_ids=engram_ids,
        engram_num_embeddings=engram_rows,
        engram_max_ngram_size=r.int("engram_max_ngram_size", 2),
        engram_n_heads=r.int("engram_n_heads", 1),
        engram_head_dim=r.int("engram_head_dim", 1),
        hc_mult=r.int("hc_mult", 1),
        hc_sinkhorn_iters=r.int("hc_sinkhorn_iters", 1),
        hc_eps=r.float("hc_eps"),
        norm_eps=r.float("norm_eps"),
        n_stages=n_stages,
        stage_kind="dspark" if dspark_targets else "mtp",
        dspark_target_layer_ids=dspark_targets,
        dspark_markov_rank=r.int("dspark_markov_rank", 1),
        stage_routed_experts=r.int("dspark_n_routed_experts", 1) if r.has("dspark_n_routed_experts") else n_routed,
        fp8_block=block,
        expert_dtype=expert_dtype,
        vision=vision,
        notes=tuple(notes),
    )


def _hub_name(key: str) -> str:
    for hub, inf in HUB_KEYS.items():
        if inf == key:
            return hub
    return key
