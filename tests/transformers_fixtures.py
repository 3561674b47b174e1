"""Artifacts made by transformers itself (the real producer), for the dialect tests.

transformers is a test dependency only; tests that use these helpers skip
without it. Everything is written under the caller's tmp_path.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from conftest import SAMPLES


def transformers_v4():
    """(DeepseekV4Config, DeepseekV4ForCausalLM), or skip the test."""
    tf = pytest.importorskip("transformers")
    if not hasattr(tf, "DeepseekV4Config"):
        pytest.skip("this transformers has no DeepseekV4 model")
    return tf.DeepseekV4Config, tf.DeepseekV4ForCausalLM


def hub_config(name: str) -> dict:
    return json.loads((SAMPLES / name).read_text())


def transformers_config(release_hub: dict):
    """The transformers config class built from a release hub config. Its
    quantization_config is dropped: a tiny CPU model holds no FP8 weights, and
    with it from_pretrained would ask for `accelerate`."""
    cfg_cls, _ = transformers_v4()
    d = {k: v for k, v in release_hub.items() if k != "quantization_config"}
    return cfg_cls(**d)


def save_transformers_config(release_hub_name: str, out: Path) -> Path:
    """config.json as transformers writes it for a release hub config (keeps the
    quantization_config, as a real conversion does)."""
    cfg_cls, _ = transformers_v4()
    cfg_cls(**hub_config(release_hub_name)).save_pretrained(out)
    return out / "config.json"


def save_tiny_model(out: Path, release_hub_name: str = "tiny-v4.hf.json", dtype: str = "bfloat16", seed: int = 0,
                    prepare=None):
    """A tiny DeepseekV4ForCausalLM with random values, saved by save_pretrained.
    Returns the in-memory model (for its state_dict) and the output folder. prepare(model),
    called before the save, may return a function called with the folder after it (a
    quantiser's compress step, then its config update)."""
    import torch

    _, model_cls = transformers_v4()
    torch.manual_seed(seed)
    model = model_cls._from_config(transformers_config(hub_config(release_hub_name)), dtype=getattr(torch, dtype))
    # the initialiser leaves base at 0 and scale at 1; random values make a
    # mix-up of sites or parts visible
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("_hc.base", "_hc.scale", "hc_head.hc_base", "hc_head.hc_scale")):
                p.copy_(torch.randn_like(p))
    finish = prepare(model) if prepare is not None else None
    model.save_pretrained(out)
    if finish is not None:
        finish(out)
    return model, out


def safetensors_header(path: Path) -> dict:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header
