"""Which model family a config describes, and whether it has hyper-connections at all.

Hub configs say it by `model_type` / `architectures` (deepseek_v4 with
DeepseekV4ForCausalLM, deepseek_v41 with DeepseekV41ForCausalLM, deepseek_v41_text
under text_config). Inference-style configs say nothing, but every one of the
family sets `hc_mult`. A config that names another family (DeepSeek-V3, Llama,
...), or names none and has no `hc_mult`, is refused rather than counted with
made-up defaults.
"""

from __future__ import annotations

from hccli.model.config.keys import KeySpace, shown
from hccli.model.config.read import ConfigError

HC_MODEL_TYPES = ("deepseek_v4",)  # prefixes: deepseek_v4, deepseek_v41, deepseek_v41_text, ...
HC_ARCHITECTURES = ("DeepseekV4",)  # prefixes: DeepseekV4ForCausalLM, DeepseekV41ForCausalLM, ...


def _names(ks: KeySpace) -> tuple[list[str], list[str]]:
    model_types, architectures = [], []
    for section in (ks.data, ks.text or {}):
        mt = section.get("model_type")
        if isinstance(mt, str) and mt:
            model_types.append(mt)
        arch = section.get("architectures")
        if isinstance(arch, list):
            architectures.extend(a for a in arch if isinstance(a, str))
        elif isinstance(arch, str):
            architectures.append(arch)
    return model_types, architectures


def _not_hc(ks: KeySpace, model_types: list[str], architectures: list[str], why: str) -> ConfigError:
    named = []
    if model_types:
        named.append("model_type " + "/".join(shown(m) for m in model_types))
    if architectures:
        named.append("architectures " + ", ".join(shown(a) for a in architectures[:4]))
    what = " and ".join(named) if named else why
    expected = "a DeepSeek-V4-family config (model_type deepseek_v4 or deepseek_v41)"
    key = ks.where("model_type") if model_types else "architectures" if architectures else ks.where("hc_mult")
    return ConfigError(ks.source, f"{what}: not a model family with hyper-connections; expected {expected}",
                       key=key, expected=expected, got=what)


def check_named_family(ks: KeySpace) -> None:
    """Refuse a config whose model_type / architectures name a family without hyper-connections."""
    model_types, architectures = _names(ks)
    if not model_types and not architectures:
        return
    if any(m.startswith(HC_MODEL_TYPES) for m in model_types) or any(
            a.startswith(HC_ARCHITECTURES) for a in architectures):
        return
    raise _not_hc(ks, model_types, architectures, "")


def family(ks: KeySpace) -> str:
    """"v4.1" (KV sources, Engram, no head mix) or "v4" (head mix); refuses a config with no HC."""
    model_types, architectures = _names(ks)
    if not model_types and not architectures and not ks.has("hc_mult"):
        raise _not_hc(ks, model_types, architectures, f"no key '{ks.where('hc_mult')}' and no model_type")
    v41 = (any(m.startswith("deepseek_v41") for m in model_types)
           or any(a.startswith("DeepseekV41") for a in architectures)
           or ks.has("kv_source_layers") or ks.has("engram_layer_ids"))
    return "v4.1" if v41 else "v4"
