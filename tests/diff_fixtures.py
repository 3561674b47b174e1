"""Checkpoints for the `hc diff` tests, made by the real producers: `hc
make-checkpoint` (hccli.checkpoint.synth) for the release layout, transformers'
save_pretrained (tests/transformers_fixtures.py), and gguf's GGUFWriter in
llama.cpp's deepseek4 naming. Derived copies are edited shard by shard, header
rewritten by synth's own header writer, so every file stays valid safetensors.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Callable

import numpy as np
from conftest import SAMPLES

from hccli.names import dialects as D
from hccli.model.config.model import load_config
from hccli.checkpoint.synth import header_bytes, make_checkpoint
from hccli.base.vocab import INDEX_NAME

TINY = "tiny-v4.hf.json"
# tensor name -> (dtype, shape, raw bytes)
Tensors = dict[str, tuple[str, tuple[int, ...], bytes]]


def release(out: Path, config: str = TINY, seed: int = 0) -> Path:
    make_checkpoint(SAMPLES / config, out, seed=seed)
    return out


def read_shard(path: Path) -> tuple[Tensors, dict | None]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", None)
    data = raw[8 + n:]
    return {k: (v["dtype"], tuple(v["shape"]), data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items()}, meta


def write_shard(path: Path, tensors: Tensors, meta: dict | None) -> None:
    head = header_bytes([(k, d, s, len(b)) for k, (d, s, b) in tensors.items()], meta)
    path.write_bytes(head + b"".join(b for _, _, b in tensors.values()))


def edit_copy(src: Path, dst: Path, edit: Callable[[Tensors], None]) -> Path:
    """A copy of a checkpoint with `edit` applied to each shard's tensors (in place in
    the dict: change, drop or add entries); the index follows."""
    shutil.copytree(src, dst)
    weight_map = {}
    for shard in sorted(dst.glob("*.safetensors")):
        tensors, meta = read_shard(shard)
        edit(tensors)
        write_shard(shard, tensors, meta)
        weight_map.update({k: shard.name for k in tensors})
    index = dst / INDEX_NAME
    if index.exists():
        doc = json.loads(index.read_text())
        doc["weight_map"] = weight_map
        doc["metadata"]["total_size"] = sum(len(b) for s in dst.glob("*.safetensors")
                                            for _, _, b in read_shard(s)[0].values())
        index.write_text(json.dumps(doc))
    return dst


def f32(tensors: Tensors, name: str) -> np.ndarray:
    dtype, shape, raw = tensors[name]
    assert dtype == "F32", (name, dtype)
    return np.frombuffer(raw, "<f4").reshape(shape)


def all_tensors(ckpt: Path) -> Tensors:
    out: Tensors = {}
    for shard in sorted(ckpt.glob("*.safetensors")):
        out.update(read_shard(shard)[0])
    return out


def hc_values(ckpt: Path, dialect: str = D.RELEASE) -> dict[str, np.ndarray]:
    """canonical HC name -> float32 values of a safetensors checkpoint."""
    t = all_tensors(ckpt)
    return {h.canonical(): f32(t, n) for n in t if (h := D.hc_name(n, dialect)) is not None}


def add_shard(ckpt: Path, file: str, tensors: dict[str, np.ndarray]) -> Path:
    """One more shard, written by safetensors' own serializer, and named in the index."""
    from safetensors.numpy import save_file

    save_file(tensors, str(ckpt / file), metadata={"format": "pt"})
    index = ckpt / INDEX_NAME
    doc = json.loads(index.read_text())
    doc["weight_map"].update(dict.fromkeys(tensors, file))
    doc["metadata"]["total_size"] += sum(x.nbytes for x in tensors.values())
    index.write_text(json.dumps(doc))
    return ckpt / file


def write_gguf(path: Path, values: dict[str, np.ndarray], types: dict[str, str], config: str = TINY,
               split_max_tensors: int = 0, extra: dict[str, np.ndarray] | None = None) -> Path:
    """A deepseek4 GGUF holding `values` (canonical names) as llama.cpp's converter
    names them; `types` picks F16 or Q8_0 per canonical name (default F32). The
    stages are left out, as the converter drops them. `extra` adds tensors by their
    GGUF names, after the others."""
    import gguf

    cfg = load_config(SAMPLES / config)
    w = gguf.GGUFWriter(path, "deepseek4", split_max_tensors=split_max_tensors)
    w.add_uint32("deepseek4.block_count", cfg.n_layers)
    w.add_uint32("deepseek4.embedding_length", cfg.dim)
    w.add_uint32("deepseek4.hyper_connection.count", cfg.hc_mult)
    w.add_uint32("deepseek4.hyper_connection.sinkhorn_iterations", cfg.hc_sinkhorn_iters)
    w.add_float32("deepseek4.hyper_connection.epsilon", cfg.hc_eps)
    w.add_tensor("token_embd.weight", np.ones((cfg.vocab_size, cfg.dim), np.float16))
    q8 = gguf.GGMLQuantizationType.Q8_0
    for name, x in values.items():
        g = D.spell_hc(D.parse_hc_name(name), D.GGUF)
        if g is None:
            continue
        kind = types.get(name, "F32")
        if kind == "F16":
            w.add_tensor(g, x.astype(np.float16))
        elif kind == "Q8_0":
            w.add_tensor(g, gguf.quants.quantize(np.ascontiguousarray(x), q8), raw_dtype=q8)
        else:
            w.add_tensor(g, np.ascontiguousarray(x, np.float32))
    for name, x in (extra or {}).items():
        w.add_tensor(name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
