"""transformers-written DeepseekV4 configs, read as the release config they came from.

transformers 5 (`DeepseekV4Config`, configuration_deepseek_v4.py) rewrites the
release hub keys when it saves a config: per-layer `compress_ratios` become
`layer_types` (sliding_attention / compressed_sparse_attention /
heavily_compressed_attention) plus a `compress_rates` dict, `num_hash_layers`
becomes `mlp_layer_types` (hash_moe / moe), `rope_scaling` + `rope_theta` +
`compress_rope_theta` become `rope_parameters` {"main", "compress"}, and
`torch_dtype` becomes `dtype`. `layer_types` is cut to `num_hidden_layers`, so
the stages' entries of `compress_ratios` are gone: every published config has
0 there (window-only stages), which is what comes back.

`release_config_from_transformers` maps such a dict back to the hub keys that
hccli/model/config/model.py `parse_config` reads, so both give the same layer plan, HC
figures and inventory. `transformers_params` is transformers' own count,
`model.num_parameters()`, computed over the inventory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hccli.model.config.keys import shown
from hccli.model.config.read import ConfigError

LAYER_TYPE_RATIO_KEYS = ("compressed_sparse_attention", "heavily_compressed_attention")
SLIDING = "sliding_attention"
MLP_TYPES = ("hash_moe", "moe")
# the keys transformers writes in place of the release's; they are consumed here
_CONSUMED = ("layer_types", "compress_rates", "mlp_layer_types", "rope_parameters", "dtype", "partial_rotary_factor")


def is_transformers_config(data: Mapping[str, Any]) -> bool:
    """True for a config in transformers' own V4 keys (no release `compress_ratios`)."""
    return isinstance(data, Mapping) and "layer_types" in data and "compress_ratios" not in data


def _fail(source: str, key: str, expected: str, got: Any = ...) -> ConfigError:
    return ConfigError.at(source, key, expected, "" if got is ... else shown(got))


def _int(source: str, data: Mapping[str, Any], key: str, default: int | None = None, minimum: int = 0) -> int:
    v = data.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise _fail(source, key, f"an integer >= {minimum}", v)
    return v


def _compress_ratios(source: str, data: Mapping[str, Any], n_layers: int) -> list[int]:
    types = data.get("layer_types")
    if not isinstance(types, list) or len(types) != n_layers:
        raise _fail(source, "layer_types", f"a list of {n_layers} layer types (num_hidden_layers)",
                    types if not isinstance(types, list) else f"{len(types)} entries")
    rates = data.get("compress_rates")
    if rates is None:
        rates = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}  # transformers' default
    if not isinstance(rates, Mapping):
        raise _fail(source, "compress_rates", "an object of layer type -> compression rate", rates)
    out = []
    for i, t in enumerate(types):
        if t == SLIDING:
            out.append(0)
            continue
        if t not in LAYER_TYPE_RATIO_KEYS:
            raise _fail(source, f"layer_types[{i}]", "one of " + ", ".join((SLIDING, *LAYER_TYPE_RATIO_KEYS)), t)
        r = rates.get(t)
        if not isinstance(r, int) or isinstance(r, bool) or r < 1:
            raise _fail(source, f"compress_rates.{t}", "a positive integer", r)
        out.append(r)
    return out


def _hash_layers(source: str, data: Mapping[str, Any], n_layers: int) -> int | None:
    types = data.get("mlp_layer_types")
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != n_layers:
        raise _fail(source, "mlp_layer_types", f"a list of {n_layers} MLP types (num_hidden_layers)",
                    types if not isinstance(types, list) else f"{len(types)} entries")
    for i, t in enumerate(types):
        if t not in MLP_TYPES:
            raise _fail(source, f"mlp_layer_types[{i}]", "one of 'hash_moe', 'moe'", t)
    n = next((i for i, t in enumerate(types) if t != "hash_moe"), n_layers)
    if "hash_moe" in types[n:]:
        # the release (and `hc`) can only say "the first N layers are hash-routed"
        raise _fail(source, f"mlp_layer_types[{types.index('hash_moe', n)}]",
                    f"hash_moe only in the leading layers (0..{n - 1})", "hash_moe")
    return n


def _rope(source: str, data: Mapping[str, Any]) -> dict[str, Any]:
    rp = data.get("rope_parameters")
    if rp is None:
        return {}
    if not isinstance(rp, Mapping):
        raise _fail(source, "rope_parameters", "an object", rp)
    out: dict[str, Any] = {}
    main, compress = rp.get("main"), rp.get("compress")
    if isinstance(main, Mapping) and "rope_theta" in main:
        out["rope_theta"] = main["rope_theta"]
    if isinstance(compress, Mapping):
        if "rope_theta" in compress:
            out["compress_rope_theta"] = compress["rope_theta"]
        kind = compress.get("rope_type", compress.get("type", "default"))
        if kind != "default":
            keep = ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow")
            out["rope_scaling"] = {"type": kind, **{k: compress[k] for k in keep if k in compress}}
    return out


def release_config_from_transformers(data: Mapping[str, Any], source: str = "config.json") -> dict[str, Any]:
    """A transformers-written DeepseekV4 config dict -> the release hub-style dict.
    Keys transformers keeps under the release's name pass through unchanged."""
    if not isinstance(data, Mapping):
        raise ConfigError(source, f"top level is a JSON {type(data).__name__}; expected an object",
                          expected="a JSON object", got=f"a JSON {type(data).__name__}")
    n_layers = _int(source, data, "num_hidden_layers", minimum=1)
    out = {k: v for k, v in data.items() if k not in _CONSUMED}
    dspark = data.get("dspark_target_layer_ids")
    n_stages = len(dspark) if isinstance(dspark, list) and dspark else _int(
        source, data, "num_nextn_predict_layers", default=1)
    out["compress_ratios"] = _compress_ratios(source, data, n_layers) + [0] * n_stages
    n_hash = _hash_layers(source, data, n_layers)
    if n_hash is not None:
        out["num_hash_layers"] = n_hash
    out.update(_rope(source, data))
    if "qk_rope_head_dim" not in out and isinstance(data.get("partial_rotary_factor"), (int, float)):
        out["qk_rope_head_dim"] = int(_int(source, data, "head_dim", minimum=1) * data["partial_rotary_factor"])
    if "dtype" in data and "torch_dtype" not in out:
        out["torch_dtype"] = data["dtype"]
    return out


# --- transformers' parameter count ------------------------------------------------------

# Held as buffers by DeepseekV4ForCausalLM, so model.num_parameters() leaves them
# out although save_pretrained writes them (modeling_deepseek_v4.py: the hash
# router's tid2eid, the top-k router's e_score_correction_bias).
BUFFER_SUFFIXES = (".ffn.gate.tid2eid", ".ffn.gate.bias")


@dataclass(frozen=True, slots=True)
class TransformersCount:
    params: int  # what model.num_parameters() gives for this config
    left_out: dict[str, int]  # reason -> logical parameters the release has and this count omits


def transformers_params(tensors: Iterable[Any]) -> TransformersCount:
    """model.num_parameters() for the model an inventory describes (TensorSpec-like
    items with name, scope, logical_params): the text path with every weight
    dequantised (fp4 bytes count two, scales nothing), minus the router buffers;
    DeepseekV4ForCausalLM builds no MTP/DSpark stages and no vision tower."""
    params = 0
    left = {"stages (not built by transformers)": 0, "vision (not built by transformers)": 0,
            "hash-routing tables tid2eid (buffers)": 0, "router correction biases (buffers)": 0}
    for t in tensors:
        n = t.logical_params
        if t.scope == "stage":
            left["stages (not built by transformers)"] += n
        elif t.scope == "vision":
            left["vision (not built by transformers)"] += n
        elif t.name.endswith(BUFFER_SUFFIXES[0]):
            left["hash-routing tables tid2eid (buffers)"] += n
        elif t.name.endswith(BUFFER_SUFFIXES[1]):
            left["router correction biases (buffers)"] += n
        else:
            params += n
    return TransformersCount(params, left)
