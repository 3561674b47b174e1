"""GGUFs written by the gguf package's own writer (GGUFWriter) in llama.cpp's
deepseek4 naming, with the HC tensors laid out as its converter leaves them (no
transpose; F32 unless the file type pushes a 2-D tensor to F16 or a quant).
Tests that use these skip without the gguf package."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SAMPLES

from hccli import dialects as D
from hccli.config import load_config
from hccli.inventory import build_hc_inventory

CFG = load_config(SAMPLES / "tiny-v4.hf.json")
F16_SITE = "layers.0.hc_attn_fn"
Q8_SITE = "layers.1.hc_ffn_fn"


def gguf():
    return pytest.importorskip("gguf")


def hc_values(seed: int = 0) -> dict[str, np.ndarray]:
    """Random values for every HC tensor a GGUF of the tiny V4 holds (no stages), by canonical name."""
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(np.float32)
            for t in build_hc_inventory(CFG) if not t.name.startswith("mtp.")}


def write_gguf(path, values, split_max_tensors: int = 0, types=None, extra=None, metadata: bool = True):
    """A deepseek4 GGUF holding `values` (canonical names) under their GGUF names; `types`
    picks a storage type per canonical name (default: F16 and Q8_0 for one fn each, F32 else);
    `extra` adds tensors by their GGUF names."""
    g = gguf()
    types = {F16_SITE: "F16", Q8_SITE: "Q8_0"} if types is None else types
    w = g.GGUFWriter(path, "deepseek4", split_max_tensors=split_max_tensors)
    if metadata:
        w.add_uint32("deepseek4.block_count", CFG.n_layers)
        w.add_uint32("deepseek4.embedding_length", CFG.dim)
        w.add_uint32("deepseek4.hyper_connection.count", CFG.hc_mult)
        w.add_uint32("deepseek4.hyper_connection.sinkhorn_iterations", CFG.hc_sinkhorn_iters)
        w.add_float32("deepseek4.hyper_connection.epsilon", CFG.hc_eps)
        w.add_array("deepseek4.attention.compress_ratios", list(CFG.compress_ratios[:CFG.n_layers]))
    w.add_tensor("token_embd.weight", np.ones((CFG.vocab_size, CFG.dim), np.float16))
    for name, x in (extra or {}).items():
        w.add_tensor(name, x)
    for name, x in values.items():
        name_g = D.spell_hc(D.parse_hc_name(name), D.GGUF)
        kind = types.get(name, "F32")
        if kind == "F16":
            w.add_tensor(name_g, x.astype(np.float16))
        elif kind == "F32":
            w.add_tensor(name_g, x)
        else:
            q = g.GGMLQuantizationType[kind]
            w.add_tensor(name_g, g.quants.quantize(x, q), raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def stored_values(values, types=None) -> dict[str, np.ndarray]:
    """What a GGUF written by write_gguf holds, as float32: each value through its storage type."""
    g = gguf()
    types = {F16_SITE: "F16", Q8_SITE: "Q8_0"} if types is None else types
    out = {}
    for name, x in values.items():
        kind = types.get(name, "F32")
        if kind == "F32":
            out[name] = x
        elif kind == "F16":
            out[name] = x.astype(np.float16).astype(np.float32)
        else:
            q = g.GGMLQuantizationType[kind]
            out[name] = g.quants.dequantize(g.quants.quantize(x, q), q).reshape(x.shape).astype(np.float32)
    return out
