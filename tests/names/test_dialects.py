"""Dialects: every producer's spelling of the tensors, mapped onto the release names.

The transformers artifacts are made by transformers (save_pretrained of a tiny
DeepseekV4ForCausalLM); the other spellings are the literal strings of their
producers' sources (docs/DIALECTS.md names each)."""

from __future__ import annotations

import numpy as np
import pytest
from ckpt_tools import write_shard
from conftest import SAMPLES
from safetensors import safe_open
from transformers_fixtures import safetensors_header, save_tiny_model

from hccli.names import dialects as D
from hccli.model.components import component_of
from hccli.model.config.model import load_config
from hccli.model.inventory import build_hc_inventory, build_inventory
from hccli.base.vocab import HcName, parse_hc_name


@pytest.fixture(scope="module")
def tiny_save(tmp_path_factory):
    model, out = save_tiny_model(tmp_path_factory.mktemp("tf") / "tiny")
    return model, out, safetensors_header(out / "model.safetensors")


@pytest.fixture(scope="module")
def tiny_inventory():
    return {t.name for t in build_inventory(load_config(SAMPLES / "tiny-v4.hf.json")).tensors}


def test_transformers_save_is_detected_and_maps_onto_the_release_inventory(tiny_save, tiny_inventory):
    _, _, header = tiny_save
    det = D.detect_dialect(header)
    assert det.dialect == D.TRANSFORMERS_SAVED
    canon = {D.canonical_name(n, det.dialect) for n in header}
    # exactly the release's tensors, less what a save cannot hold: stages and FP8/FP4 scales
    assert canon == {n for n in tiny_inventory if not n.startswith("mtp.") and not n.endswith(".scale")}


def test_transformers_save_quirks_are_what_save_pretrained_writes(tiny_save):
    _, _, header = tiny_save
    # the reverse mapping's anchored patterns miss the `model.` prefix ...
    assert {"model.hc_head.hc_fn", "model.embed_tokens.weight", "head.weight"} <= set(header)
    # ... and `.norm.` -> `.kv_norm.` reversed lands on the main attention's kv norm
    assert "model.layers.0.attn.norm.weight" in header and "model.layers.0.attn.kv_norm.weight" not in header
    assert D.canonical_name("model.layers.0.attn.norm.weight", D.TRANSFORMERS_SAVED) == "layers.0.attn.kv_norm.weight"
    # HC tensors stay F32 in a bfloat16 save (_keep_in_fp32_modules_strict)
    hc = {n: h for n, h in header.items() if D.hc_name(n, D.TRANSFORMERS_SAVED)}
    assert hc and {h["dtype"] for h in hc.values()} == {"F32"}
    assert header["model.layers.0.attn.wq_a.weight"]["dtype"] == "BF16"


def test_every_hc_site_of_a_save_is_found_with_exact_values(tiny_save):
    model, out, header = tiny_save
    with safe_open(out / "model.safetensors", "np") as f:  # HC tensors are F32; numpy has no bfloat16
        stored = {n: f.get_tensor(n) for n in header if D.hc_name(n, D.TRANSFORMERS_SAVED)}
    memory = {D.canonical_name(n, D.TRANSFORMERS_MEMORY): p.detach().numpy()
              for n, p in model.named_parameters() if D.hc_name(n, D.TRANSFORMERS_MEMORY)}
    found = D.canonical_hc_names(header, D.TRANSFORMERS_SAVED)
    cfg = load_config(SAMPLES / "tiny-v4.hf.json")
    expected = {t.name for t in build_hc_inventory(cfg) if not t.name.startswith("mtp.")}
    assert set(found.values()) == expected
    for name, canonical in found.items():
        assert np.array_equal(stored[name], memory[canonical]), name


def test_in_memory_names_map_onto_the_release_inventory(tiny_save, tiny_inventory):
    model, _, _ = tiny_save
    names = list(model.state_dict())
    assert D.detect_dialect(names).dialect == D.TRANSFORMERS_MEMORY
    for n in names:
        c = D.canonical_name(n, D.TRANSFORMERS_MEMORY)
        assert c is not None, n
        if D.is_fused(c):  # gate_up_proj holds w1 and w3 of every expert
            layer = c.split(".ffn.")[0]
            for w in c.rsplit(".", 2)[1].split("+"):
                assert f"{layer}.ffn.experts.0.{w}.weight" in tiny_inventory, n
        else:
            assert c in tiny_inventory, (n, c)


# literal spellings from the producers' sources
SPELLINGS = [
    (D.RELEASE, "layers.3.hc_attn_fn", "layers.3.hc_attn_fn"),
    (D.RELEASE, "mtp.2.hc_head_base", "mtp.2.hc_head_base"),
    (D.RELEASE_PREFIXED, "model.layers.3.hc_ffn_scale", "layers.3.hc_ffn_scale"),
    (D.RELEASE_PREFIXED, "model.hc_head_fn", "hc_head_fn"),
    (D.TRANSFORMERS_SAVED, "model.layers.12.hc_ffn_base", "layers.12.hc_ffn_base"),
    (D.TRANSFORMERS_SAVED, "model.hc_head.hc_scale", "hc_head_scale"),
    (D.TRANSFORMERS_MEMORY, "model.layers.12.attn_hc.fn", "layers.12.hc_attn_fn"),
    (D.TRANSFORMERS_MEMORY, "model.layers.0.ffn_hc.scale", "layers.0.hc_ffn_scale"),
    (D.TRANSFORMERS_MEMORY, "model.hc_head.hc_base", "hc_head_base"),
    (D.MEGATRON, "decoder.layers.7.hc_attn_base", "layers.7.hc_attn_base"),
    (D.MEGATRON, "decoder.hc_head_params.hc_head_fn", "hc_head_fn"),
    (D.GGUF, "blk.42.hc_ffn_fn.weight", "layers.42.hc_ffn_fn"),
    (D.GGUF, "blk.0.hc_attn_scale.weight", "layers.0.hc_attn_scale"),
    (D.GGUF, "output_hc_fn.weight", "hc_head_fn"),
    (D.MLX_LM, "model.layers.3.attn_hc.fn", "layers.3.hc_attn_fn"),  # deepseek_v41 _rename: .hc_attn_ -> .attn_hc.
    (D.MLX_LM, "model.layers.0.ffn_hc.scale", "layers.0.hc_ffn_scale"),
    (D.COMPRESSED_TENSORS, "model.layers.12.hc_ffn_base", "layers.12.hc_ffn_base"),
    (D.COMPRESSED_TENSORS, "model.hc_head.hc_fn", "hc_head_fn"),
]

# the rest of a layer, from mlx-lm 0.32.2 deepseek_v41.py (_rename, sanitize) and compressed-tensors 0.20.1's
# compressors (compression_param_names) over transformers' saved names
OTHER_SPELLINGS = [
    (D.MLX_LM, "model.layers.5.mlp.experts.switch_mlp.gate_proj.weight", "layers.5.ffn.experts.*.w1.weight"),
    (D.MLX_LM, "model.layers.5.mlp.experts.switch_mlp.down_proj.scales", "layers.5.ffn.experts.*.w2.scale"),
    (D.MLX_LM, "model.layers.5.self_attn.compressor.kv_norm.weight", "layers.5.attn.compressor.norm.weight"),
    (D.MLX_LM, "model.layers.5.self_attn.indexer.k_proj.biases", "layers.5.attn.indexer.wk.biases"),
    (D.MLX_LM, "model.layers.5.mlp.gate.e_score_correction_bias", "layers.5.ffn.gate.bias"),
    (D.MLX_LM, "model.layers.5.self_attn.o_a_proj.weight", "layers.5.attn.wo_a.weight"),
    (D.MLX_LM, "model.embed_tokens.scales", "embed.scale"),
    (D.MLX_LM, "lm_head.weight", "head.weight"),
    (D.COMPRESSED_TENSORS, "model.layers.1.attn.wq_a.weight_packed", "layers.1.attn.wq_a.weight"),
    (D.COMPRESSED_TENSORS, "model.layers.1.attn.wq_a.weight_scale", "layers.1.attn.wq_a.scale"),
    (D.COMPRESSED_TENSORS, "model.layers.1.attn.wkv.weight_shape", "layers.1.attn.wkv.weight_shape"),
    (D.COMPRESSED_TENSORS, "model.layers.1.attn.norm.weight", "layers.1.attn.kv_norm.weight"),
    (D.COMPRESSED_TENSORS, "head.weight_packed", "head.weight"),
]


@pytest.mark.parametrize("dialect, name, canonical", OTHER_SPELLINGS)
def test_other_spellings_of_mlx_lm_and_compressed_tensors(dialect, name, canonical):
    assert D.canonical_name(name, dialect) == canonical
    assert component_of(canonical) != "other"


@pytest.mark.parametrize("dialect, name, canonical", SPELLINGS)
def test_hc_spellings(dialect, name, canonical):
    hc = D.hc_name(name, dialect)
    assert hc is not None and hc.canonical() == canonical
    assert D.spell_hc(hc, dialect) == name
    assert D.canonical_name(name, dialect) == canonical
    for other in D.DIALECTS:  # a spelling belongs to its dialect (the prefixed pair shares one)
        if other != dialect and {other, dialect} != {D.TRANSFORMERS_SAVED, D.RELEASE_PREFIXED}:
            assert D.hc_name(name, other) is None or D.hc_name(name, other).canonical() == canonical


@pytest.mark.parametrize("dialect", D.DIALECTS)
def test_every_hc_tensor_round_trips(dialect):
    cfg = load_config(SAMPLES / "deepseek-v4-flash-0731.hf.json")
    for t in build_hc_inventory(cfg):
        hc = parse_hc_name(t.name)
        spelled = D.spell_hc(hc, dialect)
        if hc.is_stage and dialect not in (D.RELEASE, D.RELEASE_PREFIXED):
            assert spelled is None  # no producer but the release writes the stages
            continue
        if hc.kind == "" and dialect == D.MLX_LM:
            assert spelled is None  # mlx-lm models V4.1 alone, which has no head mix
            continue
        assert D.hc_name(spelled, dialect) == hc


@pytest.mark.parametrize("name", ["layers.3.attn.wq_a.weight", "model.layers.3.hc_attn_fn.weight", "blk.3.hc_attn_fn",
                                  "blk.3.attn_kv.weight", "hc_head_fn.weight", "decoder.layers.x.hc_attn_fn",
                                  "model.layers.3.attn_hc.fn.weight", "layers.1234567.hc_attn_fn"])
def test_non_hc_names_are_not_hc(name):
    assert all(D.hc_name(name, d) is None for d in D.DIALECTS)


GGUF_NAMES = [  # llama.cpp conversion/deepseek.py DeepseekV4Model._map_tensor_name_deepseek4, gguf-py constants
    ("token_embd.weight", "embed.weight"), ("output.weight", "head.weight"), ("output_norm.weight", "norm.weight"),
    ("blk.5.attn_kv_a_norm.weight", "layers.5.attn.kv_norm.weight"),
    ("blk.5.attn_compressor_ape.weight", "layers.5.attn.compressor.ape"),
    ("blk.5.indexer_compressor_kv.weight", "layers.5.attn.indexer.compressor.wkv.weight"),
    ("blk.5.indexer.proj.weight", "layers.5.attn.indexer.weights_proj.weight"),
    ("blk.5.exp_probs_b.bias", "layers.5.ffn.gate.bias"),
    ("blk.1.ffn_gate_tid2eid.weight", "layers.1.ffn.gate.tid2eid"),
    ("blk.5.ffn_down_exps.weight", "layers.5.ffn.experts.*.w2.weight"),
]


@pytest.mark.parametrize("name, canonical", GGUF_NAMES)
def test_gguf_names(name, canonical):
    assert D.canonical_name(name, D.GGUF) == canonical


def test_every_release_tensor_of_a_v4_layer_has_a_gguf_name(tiny_inventory):
    gguf = {D.canonical_name(f"blk.{i}.{k}", D.GGUF) for i in range(6) for k in D._GGUF_LAYER}
    for n in tiny_inventory:
        if n.startswith("layers.") and not n.endswith(".scale") and ".experts." not in n.replace("shared_experts", ""):
            assert n in gguf or D.hc_name(n, D.RELEASE), n


def test_gguf_lists_dims_reversed():
    assert D.canonical_shape([4 * 4096, 24], D.GGUF) == (24, 4 * 4096)
    assert D.stored_shape((24, 16384), D.GGUF) == (16384, 24)
    assert D.canonical_shape([24, 16384], D.TRANSFORMERS_SAVED) == (24, 16384)


def test_detect_release_and_others():
    for name in ("tiny-v4.hf.json", "tiny-v4.1.hf.json"):  # the V4.1 one has a vision tower (`.mlp.`)
        release = [t.name for t in build_inventory(load_config(SAMPLES / name)).tensors]
        assert D.detect_dialect(release).dialect == D.RELEASE
        assert D.detect_dialect(["model." + n for n in release]).dialect == D.RELEASE_PREFIXED
    assert D.detect_dialect(["token_embd.weight", "blk.0.hc_attn_fn.weight"]).dialect == D.GGUF
    assert D.detect_dialect(["decoder.layers.0.hc_attn_fn"]).dialect == D.MEGATRON
    unknown = D.detect_dialect(["foo", "bar.weight"])
    assert unknown.dialect == D.UNKNOWN and unknown.note


def test_detect_needs_the_config_where_names_cannot_tell():
    shard = ["model.layers.3.hc_attn_fn", "model.layers.3.attn.wq_a.weight"]  # one shard of a larger set
    assert D.detect_dialect(shard).dialect == D.RELEASE_PREFIXED
    det = D.detect_dialect(shard, {"layer_types": ["sliding_attention"], "num_hidden_layers": 1})
    assert det.dialect == D.TRANSFORMERS_SAVED and "transformers" in det.note
    assert D.detect_dialect(shard, {"compress_ratios": [0, 0]}).dialect == D.RELEASE_PREFIXED


def test_head_hc_name_has_no_layer_number():
    assert D.hc_name("output_hc_base.weight", D.GGUF) == HcName("", None, "head", "base")


def test_llama_cpp_names_in_a_safetensors_file_print(tmp_path):
    """blk.N names in a safetensors file read as the GGUF dialect, with no GGUF metadata to show:
    every form of inspect prints it and exits 0."""
    import struct

    from conftest import run_hc

    f = tmp_path / "m.safetensors"
    write_shard(f, [("blk.1.ffn.x", "F32", (1,), struct.pack("<f", 1.0))])
    for args in ((), ("--json",), ("--verify", "--json")):
        r = run_hc("inspect", f, *args)
        assert r.exit_code == 0, (args, r.stdout[-1000:])
    doc = r.json()
    assert doc["dialect"]["name"] == "gguf" and doc["gguf"] is None and doc["tensors"] == 1
