"""GGUFs written by the gguf package's own writer (GGUFWriter) in llama.cpp's
deepseek4 naming, with the HC tensors laid out as its converter leaves them (no
transpose; F32 unless the file type pushes a 2-D tensor to F16 or a quant).
Tests that use these skip without the gguf package."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from conftest import SAMPLES

from hccli.names import dialects as D
from hccli.model.config.model import load_config
from hccli.model.inventory import build_hc_inventory

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


# --- written field by field, for what GGUFWriter will not write -----------------------------

def _s(text) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv_u32(key: str, value: int) -> bytes:
    return _s(key) + struct.pack("<II", 4, value)


def kv_str(key: str, value: str) -> bytes:
    return _s(key) + struct.pack("<I", 8) + _s(value)


def struct_gguf(path, tensors, kvs=(), align: int = 32, offsets=None):
    """A GGUF written with struct: `tensors` [(name, ne, GGML type code, data bytes)], laid out
    packed and aligned unless `offsets` (relative to the data section) says where each lies;
    `kvs` already encoded (kv_u32, kv_str; general.architecture deepseek4 comes first)."""
    kvs = [kv_str("general.architecture", "deepseek4"), *kvs]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    data, at, places = b"", 0, []
    for _, _, _, raw in tensors:
        places.append(at)
        data += raw + bytes(-len(raw) % align)
        at = len(data)
    for (name, ne, code, _), offset in zip(tensors, offsets or places):
        head += _s(name) + struct.pack(f"<I{len(ne)}QIQ", len(ne), *ne, code, offset)
    with open(path, "wb") as f:
        f.write(head + bytes(-len(head) % align) + data)
    return path
