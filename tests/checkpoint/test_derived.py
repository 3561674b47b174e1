"""Checkpoints from other tools, made by their real producers, through `hc inspect`,
`--verify` and `run-kernel --checkpoint`: a tiny DeepseekV4ForCausalLM saved by
transformers' save_pretrained, and GGUFs written by gguf's GGUFWriter in llama.cpp's
deepseek4 naming (F16 and Q8_0 hc_*_fn among F32)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import SAMPLES, run_hc
from gguf_fixtures import CFG, F16_SITE, Q8_SITE, hc_values, stored_values, write_gguf
from transformers_fixtures import save_tiny_model

from hccli.names import dialects as D
from hccli.checkpoint.hc import read_base_scale, read_part, select_site
from hccli.checkpoint.opening import open_checkpoint
from hccli.base.vocab import HC_PARTS


@pytest.fixture(scope="module")
def tf_save(tmp_path_factory):
    """(the folder save_pretrained wrote, canonical HC name -> its float32 values in memory)."""
    model, out = save_tiny_model(tmp_path_factory.mktemp("tf") / "save")
    values = {}
    for name, p in model.state_dict().items():
        canon = _tf_memory_to_canonical(name)
        if canon is not None:
            values[canon] = p.detach().float().numpy()
    return out, values


def _tf_memory_to_canonical(name: str) -> str | None:
    hn = D.hc_name(name, D.TRANSFORMERS_MEMORY)
    return hn.canonical() if hn is not None else None


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    values = hc_values()
    return write_gguf(tmp_path_factory.mktemp("g") / "tiny-v4.gguf", values), values


def inspect_json(path, *args, code=0):
    r = run_hc("inspect", path, "--json", *args)
    assert r.exit_code == code, (r.exit_code, r.stderr, r.stdout[-2000:])
    return r.json()


def _sites(doc):
    return {(e["name"], e["site"]) for e in doc["hc"]}


EXPECTED_SITES = {(f"layers.{i}", s) for i in range(CFG.n_layers) for s in ("attn", "ffn")} | {("head", "head")}


# --- transformers save_pretrained ----------------------------------------------------------

def test_transformers_save_inspects_with_every_site_and_exact_values(tf_save):
    path, values = tf_save
    doc = inspect_json(path)
    assert doc["dialect"]["name"] == "transformers-saved"
    assert _sites(doc) == EXPECTED_SITES  # the head mix included (model.hc_head.hc_*)
    for e in doc["hc"]:
        owner = "" if e["name"] == "head" else e["name"] + "."
        assert np.array_equal(np.float32(e["base"]), values[f"{owner}hc_{e['site']}_base"])
        assert np.array_equal(np.float32(e["scale"]), values[f"{owner}hc_{e['site']}_scale"])
    ckpt = open_checkpoint(path)
    for s in ckpt.hc_sites:
        assert np.array_equal(read_part(ckpt, s, "fn"), values[s.tensor_name("fn")])


def test_transformers_save_verifies_clean(tf_save):
    doc = inspect_json(path := tf_save[0], "--verify")
    # what transformers leaves out by design is said, as information (exit 0)
    assert [(f["code"], f["severity"]) for f in doc["findings"]] == [("dropped_by_producer", "info")]
    assert doc["findings"][0]["message"].startswith("transformers leaves out the DSpark/MTP stages") and doc["verified"]
    assert doc["config"] == str(path / "config.json")  # its transformers-written config was read


def test_transformers_save_reconciliation_finds_what_differs(tf_save, tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    bad = tmp_path / "bad"
    shutil.copytree(tf_save[0], bad)
    t = load_file(bad / "model.safetensors")
    t["model.layers.0.attn.wq_a.weight"] = t["model.layers.0.attn.wq_a.weight"].to(torch.float32)
    t["model.layers.1.attn.norm.weight"] = t["model.layers.1.attn.norm.weight"][:-1].clone()
    del t["model.layers.2.ffn.experts.3.w2.weight"]
    t["model.layers.0.attn.wkv.weight_extra"] = torch.zeros(2)
    save_file(t, bad / "model.safetensors", metadata={"format": "pt"})
    got = {(f["code"], f["message"].split("'")[1]) for f in inspect_json(bad, "--verify", code=0)["findings"]}
    # the V4 family's inventory outside HC is best effort: warnings, named in the save's own spelling
    assert ("wrong_dtype", "model.layers.0.attn.wq_a.weight") in got
    assert ("wrong_shape", "model.layers.1.attn.norm.weight") in got
    assert ("missing_tensor", "layers.2.ffn.experts.3.w2.weight") in got
    assert ("unexpected_tensor", "model.layers.0.attn.wkv.weight_extra") in got


def test_transformers_save_runs_the_kernel_as_the_release_layout(tf_save, tmp_path):
    path, values = tf_save
    release = _release_copy(values, tmp_path / "release", config=path / "config.json")
    _same_kernel_output(path, release, layer=3, site="ffn")


# --- GGUF --------------------------------------------------------------------------------

def test_gguf_inspects_with_every_site_exact_base_scale_and_settings(gguf_file):
    path, values = gguf_file
    doc = inspect_json(path)
    assert doc["dialect"]["name"] == "gguf" and doc["gguf"]["architecture"] == "deepseek4"
    assert doc["gguf"]["settings"]["block_count"] == CFG.n_layers
    assert doc["dtypes"]["Q8_0"]["tensors"] == 1 and doc["dtypes"]["F16"]["tensors"] == 2  # fn + token_embd
    assert doc["layer_numbering"] == {**doc["layer_numbering"], "n_layers": CFG.n_layers, "n_stages": 0}
    assert _sites(doc) == EXPECTED_SITES
    for e in doc["hc"]:
        owner = "" if e["name"] == "head" else e["name"] + "."
        assert np.array_equal(np.float32(e["base"]), values[f"{owner}hc_{e['site']}_base"])
        assert np.array_equal(np.float32(e["scale"]), values[f"{owner}hc_{e['site']}_scale"])


def test_gguf_fn_values_within_their_storage_type(gguf_file):
    path, values = gguf_file
    ckpt = open_checkpoint(path)
    held = stored_values(values)
    for s in ckpt.hc_sites:
        for part in HC_PARTS:
            got, want = read_part(ckpt, s, part), values[s.tensor_name(part)]
            assert got.dtype == np.float32 and got.shape == want.shape
            assert np.array_equal(got, held[s.tensor_name(part)])  # what the type holds, decoded exactly
            name = s.tensor_name(part)
            if name == F16_SITE:
                assert np.all(np.abs(got - want) <= 2.0 ** -11 * np.abs(want) + 2.0 ** -24)
            elif name == Q8_SITE:
                step = np.abs(want.reshape(-1, 32)).max(axis=1, keepdims=True) / 127
                assert (np.abs(got.reshape(-1, 32) - want.reshape(-1, 32)) <= 0.6 * step).all()
            else:
                assert np.array_equal(got, want)


def test_gguf_verify_names_reduced_and_quantised_hc_tensors(gguf_file):
    doc = inspect_json(gguf_file[0], "--verify", code=1)
    by = {f["code"]: f for f in doc["findings"]}
    assert set(by) == {"hc_reduced_precision", "hc_quantised"}, doc["findings"]
    assert by["hc_quantised"]["severity"] == "error" and "Q8_0" in by["hc_quantised"]["message"]
    assert "blk.1.hc_ffn_fn.weight" in by["hc_quantised"]["message"]
    assert by["hc_reduced_precision"]["severity"] == "warning" and "2^-11" in by["hc_reduced_precision"]["message"]


def test_gguf_all_f32_verifies_clean_and_bf16_costs_2_to_the_minus_8(tmp_path):
    values = hc_values(2)
    assert inspect_json(write_gguf(tmp_path / "a.gguf", values, types={}), "--verify")["findings"] == []
    doc = inspect_json(write_gguf(tmp_path / "b.gguf", values, types={"hc_head_fn": "BF16"}), "--verify")
    (f,) = doc["findings"]
    assert f["code"] == "hc_reduced_precision" and "output_hc_fn.weight" in f["message"] and "2^-8" in f["message"]


def test_gguf_split_set_by_folder_or_first_part(tmp_path):
    values = hc_values(1)
    write_gguf(tmp_path / "m.gguf", values, split_max_tensors=10, types={})
    parts = sorted(tmp_path.glob("m-*-of-*.gguf"))
    assert len(parts) > 2
    (tmp_path / "one").mkdir()
    one = inspect_json(write_gguf(tmp_path / "one" / "m.gguf", values, types={}))
    for where in (tmp_path, parts[0]):
        doc = inspect_json(where, "--verify")
        assert doc["shards"] == len(parts) and doc["findings"] == []
        assert doc["hc"] == one["hc"] and doc["tensors"] == one["tensors"]
    parts[1].unlink()
    doc = inspect_json(parts[0], "--verify", code=1)
    first = doc["findings"][0]
    assert first["code"] == "missing_shard" and parts[1].name in first["message"]
    assert "hc_incomplete" in {f["code"] for f in doc["findings"]}  # the sites split across the lost part


def test_gguf_with_config_reconciles_what_it_holds(gguf_file):
    doc = inspect_json(gguf_file[0], "--verify", "--config", SAMPLES / "tiny-v4.hf.json", code=1)
    codes = [f["code"] for f in doc["findings"]]
    # the file holds the HC tensors and the embedding: said once, not per missing tensor
    assert codes.count("partial_inventory") == 1 and "missing_tensor" not in codes
    assert "unexpected_tensor" not in codes and "wrong_shape" not in codes


def test_gguf_runs_the_kernel_as_the_release_layout(gguf_file, tmp_path):
    path, values = gguf_file
    release = _release_copy(stored_values(values), tmp_path / "release")
    for layer, site in ((0, "attn"), (1, "ffn"), (4, "attn")):  # F16 fn, Q8_0 fn, F32 fn
        _same_kernel_output(path, release, layer=layer, site=site)


def test_gguf_through_the_hub_reads_header_and_hc_only(gguf_file, monkeypatch, tmp_path):
    pytest.importorskip("huggingface_hub")
    from hub_server import Hub

    path, _ = gguf_file
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(path, repo / path.name)
    local = inspect_json(repo, "--verify", code=1)
    with Hub({"org/g": repo}) as h:
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        monkeypatch.setenv("HC_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        remote = inspect_json("hf://org/g", "--verify", code=1)
        again = inspect_json("hf://org/g", "--verify", code=1)
    assert again["transferred_bytes"] == 0 and again["hc"] == remote["hc"]  # header and values from the cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert inspect_json("hf://org/g", "--verify", code=1)["hc"] == remote["hc"]  # the hub gone: still readable
    assert remote["hc"] == local["hc"] and remote["dialect"] == local["dialect"]
    assert {f["code"] for f in remote["findings"]} == {f["code"] for f in local["findings"]}
    token_embd = CFG.vocab_size * CFG.dim * 2
    assert 0 < remote["transferred_bytes"] < path.stat().st_size - token_embd  # never the weights


# --- helpers -------------------------------------------------------------------------------

def _release_copy(values: dict, out, config=None):
    """The same HC values in the release layout (names, F32), with the same config.json."""
    from safetensors.numpy import save_file

    out.mkdir()
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in values.items()}, out / "model.safetensors")
    if config is not None:
        shutil.copy(config, out / "config.json")
    return out


def _same_kernel_output(derived, release, layer: int, site: str):
    args = ("--layers", layer, "--site", site, "--hidden", "--tokens", 3, "--seed", 7, "--impl", "torch", "--json")
    a = run_hc("run-kernel", "--checkpoint", derived, *args)
    b = run_hc("run-kernel", "--checkpoint", release, *args)
    assert a.exit_code == 0 and b.exit_code == 0, (a.stderr, b.stderr)
    da, db = a.json(), b.json()
    for key in ("pre", "post", "comb"):
        assert da[key] == db[key], key
    assert json.dumps(da["pre"]) != json.dumps(db["pre"][::-1])  # three tokens, not one repeated


def test_select_site_works_on_every_dialect(tf_save, gguf_file):
    for path in (tf_save[0], gguf_file[0]):
        ckpt = open_checkpoint(path)
        s = select_site(ckpt, 2, "attn")
        base, scale = read_base_scale(ckpt, s)
        assert base.shape == (24,) and scale.shape == (3,)


def test_layer_selection_by_canonical_layer_number(tf_save, gguf_file):
    for path, prefix in ((gguf_file[0], "blk.2."), (tf_save[0], "model.layers.2.")):
        names = [t["name"] for t in inspect_json(path, "--layers", 2, "--name", "*hc_*")["tensor_list"]]
        assert len(names) == 6 and all(n.startswith(prefix) for n in names), names


def test_human_summary_names_the_dialect_and_gguf_settings(tf_save, gguf_file):
    out = run_hc("inspect", gguf_file[0]).stdout
    assert "dialect: gguf" in out and "GGUF architecture deepseek4:" in out and "block_count 6" in out
    assert "dialect: transformers-saved" in run_hc("inspect", tf_save[0]).stdout


def test_gguf_stacked_experts_are_reconciled_by_shape(tmp_path):
    e, i, d = CFG.n_routed_experts, CFG.moe_inter_dim, CFG.dim
    path = write_gguf(tmp_path / "m.gguf", hc_values(), types={}, extra={
        "blk.2.ffn_gate_exps.weight": np.zeros((e, i, d), np.float16),
        "blk.3.ffn_up_exps.weight": np.zeros((e, i + 1, d), np.float16)})
    doc = inspect_json(path, "--verify", "--config", SAMPLES / "tiny-v4.hf.json")
    shapes = [f for f in doc["findings"] if f["code"] == "wrong_shape"]
    assert len(shapes) == 1 and "blk.3.ffn_up_exps.weight" in shapes[0]["message"], doc["findings"]


def test_gguf_type_the_package_cannot_decode_is_a_finding_not_a_crash(tmp_path):
    g = pytest.importorskip("gguf")
    q81 = g.GGMLQuantizationType.Q8_1
    block, size = g.GGML_QUANT_SIZES[q81]
    values = hc_values()
    fn = values.pop("layers.2.hc_attn_fn")
    raw = np.zeros((fn.shape[0], fn.shape[1] // block * size), np.uint8)
    path = tmp_path / "m.gguf"
    w = g.GGUFWriter(path, "deepseek4")
    w.add_tensor("blk.2.hc_attn_fn.weight", raw, raw_dtype=q81)
    for name, x in values.items():
        w.add_tensor(D.spell_hc(D.parse_hc_name(name), D.GGUF), x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    doc = inspect_json(path, "--verify", code=1)
    by = {f["code"]: f["message"] for f in doc["findings"]}
    assert "Q8_1" in by["hc_quantised"] and "cannot dequantise Q8_1" in by["hc_unchecked"]
    assert len(doc["hc"]) == len(EXPECTED_SITES)  # base and scale still read
    r = run_hc("run-kernel", "--checkpoint", path, "--layers", 2, "--site", "attn", "--hidden")
    assert r.exit_code == 2 and "cannot dequantise Q8_1" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("dialect", ["release-prefixed", "transformers-memory", "megatron"])
def test_every_dialect_finds_every_site_with_exact_values(tmp_path, dialect):
    from safetensors.numpy import save_file

    values = hc_values(4)
    path = tmp_path / "model.safetensors"
    save_file({D.spell_hc(D.parse_hc_name(k), dialect): v for k, v in values.items()}, path)
    doc = inspect_json(path, "--verify")
    assert doc["dialect"]["name"] == dialect and doc["findings"] == []
    assert _sites(doc) == EXPECTED_SITES
    ckpt = open_checkpoint(path)
    for s in ckpt.hc_sites:
        for part in HC_PARTS:
            assert np.array_equal(read_part(ckpt, s, part), values[s.tensor_name(part)])


def test_the_opened_checkpoint_knows_its_dialect_and_sites_once(tf_save):
    import dataclasses

    ckpt = open_checkpoint(tf_save[0])
    assert ckpt.dialect.dialect == D.TRANSFORMERS_SAVED
    assert ckpt.hc_sites and all(set(s.parts) == set(HC_PARTS) for s in ckpt.hc_sites)
    with pytest.raises(dataclasses.FrozenInstanceError):  # told once, when opened; no one writes it later
        ckpt.dialect = D.Detection(D.RELEASE, "")


def test_names_that_fit_two_dialects_are_settled_by_the_config_beside_them(tmp_path):
    # model.layers.* alone fits a transformers save and a prefixed release: inspect reads the
    # config.json beside them, as diff does, and a transformers-written one says which
    import math

    from ckpt_tools import write_shard
    from transformers_fixtures import save_transformers_config

    ck = tmp_path / "ck"
    ck.mkdir()
    save_transformers_config("tiny-v4.hf.json", ck)
    parts = {"fn": (24, 256), "base": (24,), "scale": (3,)}
    write_shard(ck / "model.safetensors", [(f"model.layers.0.hc_attn_{p}", "F32", s, bytes(4 * math.prod(s)))
                                           for p, s in parts.items()])
    doc = run_hc("inspect", ck, "--json").json()
    assert doc["dialect"]["name"] == D.TRANSFORMERS_SAVED and "transformers-written" in doc["dialect"]["note"]
    assert [(e["layer"], e["site"]) for e in doc["hc"]] == [(0, "attn")]
