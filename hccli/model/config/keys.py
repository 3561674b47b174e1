"""Config keys: the hub's names mapped onto the inference names, and typed access
to the merged key space that names the key as the file spells it on error.

An inference-style config is flat (`dim`, `n_layers`, ...). A hub-style config
keeps its language settings at the root (V4) or under `text_config` (V4.1) with
hub names (`hidden_size`, `num_hidden_layers`, ...), and the vision settings
under `vision_config`. Both are merged into one space of inference names, each
remembering the key path it was written as.
"""

from __future__ import annotations

import json
from typing import Any

from hccli.model.config.read import ConfigError, Unusable

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

_HUB_NAME = {inf: hub for hub, inf in HUB_KEYS.items()}


def shown(value: Any) -> str:
    """A value from the file, short enough for a one-line message."""
    if isinstance(value, Unusable):
        return value.what
    text = json.dumps(value, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class KeySpace:
    """The merged keys of one config file, read with types and bounds."""

    def __init__(self, data: dict[str, Any], source: str):
        self.source = source
        self.data = data
        self.style = "hub" if ("text_config" in data or "hidden_size" in data
                               or "num_hidden_layers" in data) else "inference"
        self.values: dict[str, Any] = {}
        self.origin: dict[str, str] = {}  # inference key -> key path as written in the file
        self.text = self._section("text_config")
        self.vision = self._section("vision_config")
        self._take(data, "", HUB_KEYS if self.style == "hub" else {})
        if self.text is not None:
            self._take(self.text, "text_config.", HUB_KEYS)
        quant = data.get("quantization_config")
        if isinstance(quant, dict):
            for key in ("weight_block_size", "expert_dtype"):
                if key in quant and (key == "weight_block_size" or key not in self.values):
                    self.values[key] = quant[key]
                    self.origin[key] = f"quantization_config.{key}"
        if self.vision is not None:
            # only the renamed keys: vision_config's rope_theta etc. must not shadow the text ones
            self._take(self.vision, "vision_config.", VISION_HUB_KEYS, only_renamed=True)

    def _section(self, key: str) -> dict[str, Any] | None:
        section = self.data.get(key)
        if section is not None and not isinstance(section, dict):
            raise ConfigError.at(self.source, key, "an object", type(section).__name__)
        return section

    def _take(self, mapping: dict[str, Any], prefix: str, renames: dict[str, str], only_renamed: bool = False):
        for k, v in mapping.items():
            if only_renamed and k not in renames:
                continue
            target = renames.get(k, k)
            self.values[target] = v
            self.origin[target] = prefix + k

    # ---- naming -----------------------------------------------------------------------------

    def where(self, key: str) -> str:
        """The key as the file spells it (or would, when it is absent)."""
        if key in self.origin:
            return self.origin[key]
        if self.style == "inference":
            return key
        return ("text_config." if self.text is not None else "") + _HUB_NAME.get(key, key)

    def fail(self, key: str, expected: str, got: Any = ..., index: int | None = None) -> ConfigError:
        at = f"[{index}]" if index is not None else ""
        return ConfigError.at(self.source, f"{self.where(key)}{at}", expected, "" if got is ... else shown(got))

    def missing(self, key: str) -> ConfigError:
        where = self.where(key)
        return ConfigError(self.source, f"key '{where}' is missing; expected an integer", key=where,
                           expected="an integer", got="nothing")

    # ---- typed access -----------------------------------------------------------------------

    def has(self, key: str) -> bool:
        return self.values.get(key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        v = self.values.get(key)
        return default if v is None else v

    def int(self, key: str, lo: int, hi: int, bound: str, default: int | None = None) -> int:
        v = self.values.get(key)
        if v is None:
            if default is None:
                raise self.missing(key)
            return default
        if isinstance(v, float) and v.is_integer():
            # 4.0 is 4; 1e300 is reported against its bound, never turned into a 301-digit int
            v = int(v) if abs(v) < 2**63 else Unusable(shown(v), 1 if v > 0 else -1)
        if isinstance(v, Unusable):
            raise self.fail(key, f"an integer >= {lo}" if v.sign < 0 else f"at most {hi:,} ({bound})", v)
        if not _is_int(v):
            raise self.fail(key, "an integer", v)
        return self.check_int(key, v, lo, hi, bound)

    def check_int(self, key: str, v: int, lo: int, hi: int, bound: str, index: int | None = None) -> int:
        if v < lo:
            raise self.fail(key, f"an integer >= {lo}", v, index)
        if v > hi:
            raise self.fail(key, f"at most {hi:,} ({bound})", v, index)
        return v

    def float(self, key: str, lo: float, hi: float, default: float) -> float:
        v = self.values.get(key)
        if v is None:
            return float(default)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not lo <= v <= hi:
            raise self.fail(key, f"a number from {lo:g} to {hi:g}", v)
        return float(v)

    def choice(self, key: str, allowed: tuple[str, ...], default: str) -> str:
        v = self.get(key, default)
        if v not in allowed:
            raise self.fail(key, "one of " + ", ".join(repr(a) for a in allowed), v)
        return v

    def int_list(self, key: str, lo: int, hi: int, bound: str, max_len: int) -> tuple[int, ...]:
        """An absent list is empty: list-valued keys say which layers have a feature."""
        v = self.values.get(key)
        if v is None:
            return ()
        if not isinstance(v, list):
            raise self.fail(key, "a list of integers", v)
        if len(v) > max_len:  # before looking at the entries: a hostile list may be long
            raise self.fail(key, f"at most {max_len:,} entries", f"{len(v):,} entries")
        for i, x in enumerate(v):
            if not _is_int(x):
                raise self.fail(key, "an integer", x, i)
            self.check_int(key, x, lo, hi, bound, i)
        return tuple(v)
