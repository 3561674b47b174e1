"""Load and validate a DeepSeek-V4-family config.json into one frozen ModelConfig.

Two styles are read (model/config/keys.py): the flat inference config, and the hub's
config.json with hub key names, language settings at the root (V4) or under
`text_config` (V4.1). The work is split by concern, in the order it runs:

    model/config/read.py    the file: regular, at most 4 MiB, JSON without hostile numbers
    model/config/family.py  a model family with hyper-connections (model_type, architectures, hc_mult)
    model/config/bounds.py  scalars: reference defaults, and bounds checked before anything is built
    model/config/layers.py  keys listing layers: compress ratios and stages, sources, Engram

Absent scalars take the reference defaults; absent lists mean the feature is
absent; unknown keys are tolerated. Every error names the file and the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable
from pathlib import Path

from hccli.model.config import bounds
from hccli.model.config.family import check_named_family, family
from hccli.model.config.keys import KeySpace
from hccli.model.config.layers import layer_lists
from hccli.model.config.quant import QuantBlock, quant_block
from hccli.model.config.read import ConfigError, as_config_error, decode_json, read_config_bytes
from hccli.base.errors import HcError
from hccli.base.vocab import DEFAULT_HC_EPS, DEFAULT_SINKHORN_ITERS, mix_width

BUNDLED_DEFAULT = "deepseek-v4.1-flash.json"
# What a checkpoint is read with when its config.json cannot be used. Nothing of such a file is
# taken (not even the keys that did check out: they were written with the one that did not).
USED_INSTEAD = ("the checkpoint's tensor shapes and metadata, else the reference defaults "
                f"({DEFAULT_SINKHORN_ITERS} Sinkhorn iterations, eps {DEFAULT_HC_EPS:g})")


@dataclass(frozen=True, slots=True)
class VisionConfig:
    """The vision tower's shape, where the config has one."""

    n_layers: int
    dim: int
    n_heads: int
    inter_dim: int
    patch_size: int
    downsample_ratio: int


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """A validated config: the shapes and lists the counts are made from."""

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
    quantisation: QuantBlock | None = None  # a producer's block (mlx-lm, compressed-tensors)

    @property
    def has_head_mix(self) -> bool:
        """V4 (Flash, Pro and their releases) learn a head mix; V4.1 has none."""
        return self.family == "v4"

    @property
    def mix_hc(self) -> int:
        return mix_width(self.hc_mult)


@dataclass(frozen=True, slots=True)
class ConfigUnusable:
    """The config.json beside a checkpoint, set aside: the file, the key as the file spells it
    ("" where the file as a whole is the problem), what was expected, what it holds, what is used
    instead, and all of it as the one line every command shows."""

    file: str
    key: str
    expected: str
    got: str
    used_instead: str
    line: str


def config_unusable(exc: HcError, file: str) -> ConfigUnusable:
    e = as_config_error(exc, file)
    line = f"config.json not used: {e.file}: {e.detail}; used instead of all its values: {USED_INSTEAD}"
    return ConfigUnusable(e.file, e.key, e.expected, e.got, USED_INSTEAD, line)


def read_checkpoint_config(read: Callable[[], bytes | None], file: str
                           ) -> tuple[ModelConfig | None, ConfigUnusable | None, dict | None]:
    """The one reading of the config.json beside a checkpoint: (its ModelConfig, or else the note
    that sets it aside, both None where there is no such file; and the decoded object where it was
    used, which tells a transformers save from a prefixed release). A checkpoint is read without a
    config it cannot use; a config the user names is load_config's, and an error."""
    try:
        raw = read()
        if raw is None:
            return None, None, None
        data = decode_json(raw, file)
        return config_from_data(data, file), None, data
    except HcError as exc:
        return None, config_unusable(exc, file), None


def bundled_config_path(name: str = BUNDLED_DEFAULT) -> Path:
    # a plain package path (not importlib.resources, which costs start-up time):
    # sample_configs/ ships as the package hccli.sample_configs
    import hccli.sample_configs

    return Path(hccli.sample_configs.__file__).parent / name


def load_config(path: str | Path | None = None) -> ModelConfig:
    """Read and validate a config file (default: the bundled V4.1-Flash config)."""
    return load_config_data(path)[0]


def load_config_data(path: str | Path | None = None) -> tuple[ModelConfig, dict]:
    """load_config's ModelConfig, and the decoded object it came from."""
    p = Path(path) if path is not None else bundled_config_path()
    if p.is_dir():
        if (p / "config.json").exists():
            p = p / "config.json"
        else:
            raise ConfigError(str(p), "is a directory without a config.json; expected a config.json file",
                              expected="a config.json file", got="a directory")
    data = decode_json(read_config_bytes(p), str(p))
    return config_from_data(data, str(p)), data


def parse_config(raw: bytes | str, source: str) -> ModelConfig:
    return config_from_data(decode_json(raw, source), source)


def config_from_data(data: Any, source: str) -> ModelConfig:
    """A decoded config.json (as config_read.decode_json gives it) -> ModelConfig."""
    if isinstance(data, dict) and "layer_types" in data:  # transformers-written: read as the release config it came from
        from hccli.model.config.hf import is_transformers_config, release_config_from_transformers

        data = release_config_from_transformers(data, source) if is_transformers_config(data) else data
    return from_mapping(data, source)


def _scalar(ks: KeySpace, key: str) -> int:
    lo, hi, bound, default = bounds.SCALARS[key]
    return ks.int(key, lo, hi, bound, default)


def _vision(ks: KeySpace) -> VisionConfig | None:
    if not ks.has("vision_n_layers"):
        return None
    return VisionConfig(*(_scalar(ks, f"vision_{k}") for k in
                          ("n_layers", "dim", "n_heads", "inter_dim", "patch_size", "downsample_ratio")))


def _fp8_block(ks: KeySpace, family_name: str) -> int:
    if "weight_block_size" not in ks.values:
        return 32 if family_name == "v4.1" else 128
    wb = ks.values["weight_block_size"]
    lo, hi, _ = bounds.BLOCK
    if (not isinstance(wb, list) or len(wb) != 2 or wb[0] != wb[1]
            or not all(isinstance(x, int) and not isinstance(x, bool) and lo <= x <= hi for x in wb)):
        raise ks.fail("weight_block_size", f"two equal integers from {lo} to {hi:,}", wb)
    return wb[0]


def _cross_checks(ks: KeySpace, s: dict[str, int], n_stages: int, stage_experts: int) -> None:
    """Relations between scalars, and the product that sizes the inventory."""
    if (s["n_heads"] * s["head_dim"]) % s["o_groups"]:
        raise ks.fail("o_groups", f"a divisor of n_heads*head_dim = {s['n_heads'] * s['head_dim']}", s["o_groups"])
    if s["n_activated_experts"] > s["n_routed_experts"]:
        raise ks.fail("n_activated_experts", f"at most n_routed_experts = {s['n_routed_experts']}",
                      s["n_activated_experts"])
    if s["n_hash_layers"] > s["n_layers"]:
        raise ks.fail("n_hash_layers", f"at most {s['n_layers']} layers", s["n_hash_layers"])
    layer_experts = s["n_layers"] * s["n_routed_experts"] + n_stages * stage_experts
    if layer_experts > bounds.MAX_LAYER_EXPERTS:
        raise ks.fail("n_routed_experts", f"layers x routed experts at most {bounds.MAX_LAYER_EXPERTS:,} "
                      "(hc's bound on the tensors a config implies)",
                      f"{s['n_layers']} layers x {s['n_routed_experts']} experts")


def from_mapping(data: dict, source: str) -> ModelConfig:
    """A parsed config.json -> ModelConfig; every check before anything is built from it."""
    ks = KeySpace(data, source)
    check_named_family(ks)
    for key in bounds.REQUIRED:
        if not ks.has(key):
            raise ks.missing(key)
    family_name = family(ks)
    s = {key: _scalar(ks, key) for key in bounds.SCALARS if key not in bounds.OPTIONAL}
    stage_experts = (_scalar(ks, "dspark_n_routed_experts") if ks.has("dspark_n_routed_experts")
                     else s["n_routed_experts"])
    lists = layer_lists(ks, s["n_layers"])
    _cross_checks(ks, s, lists.n_stages, stage_experts)
    expert_dtype = ks.choice("expert_dtype", ("fp4", "fp8"), bounds.DEFAULT_EXPERT_DTYPE)
    if expert_dtype == "fp4" and (s["dim"] % 32 or s["moe_inter_dim"] % 32):
        key = "dim" if s["dim"] % 32 else "moe_inter_dim"
        raise ks.fail(key, "a multiple of 32 for fp4 experts", s[key])
    eps = {key: ks.float(key, *limits) for key, limits in bounds.FLOATS.items()}
    return ModelConfig(
        source=source, style=ks.style, family=family_name,
        vocab_size=s["vocab_size"], dim=s["dim"], n_layers=s["n_layers"], n_heads=s["n_heads"],
        head_dim=s["head_dim"], rope_head_dim=s["rope_head_dim"], q_lora_rank=s["q_lora_rank"],
        o_lora_rank=s["o_lora_rank"], o_groups=s["o_groups"], moe_inter_dim=s["moe_inter_dim"],
        n_routed_experts=s["n_routed_experts"], n_shared_experts=s["n_shared_experts"],
        n_activated_experts=s["n_activated_experts"], n_hash_layers=s["n_hash_layers"],
        index_n_heads=s["index_n_heads"], index_head_dim=s["index_head_dim"], window_size=s["window_size"],
        compress_ratios=lists.compress_ratios, kv_source_layers=lists.kv_sources,
        index_source_layers=lists.index_sources, engram_layer_ids=lists.engram_ids,
        engram_num_embeddings=lists.engram_rows, engram_max_ngram_size=s["engram_max_ngram_size"],
        engram_n_heads=s["engram_n_heads"], engram_head_dim=s["engram_head_dim"],
        hc_mult=s["hc_mult"], hc_sinkhorn_iters=s["hc_sinkhorn_iters"],
        hc_eps=eps["hc_eps"], norm_eps=eps["norm_eps"],
        n_stages=lists.n_stages, stage_kind="dspark" if lists.dspark_targets else "mtp",
        dspark_target_layer_ids=lists.dspark_targets, dspark_markov_rank=s["dspark_markov_rank"],
        stage_routed_experts=stage_experts, fp8_block=_fp8_block(ks, family_name),
        expert_dtype=expert_dtype, vision=_vision(ks), notes=lists.notes,
        quantisation=quant_block(data, source),
    )
