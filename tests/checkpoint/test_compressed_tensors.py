"""Checkpoints written by compressed-tensors itself (tests/ct_fixtures.py): a tiny
DeepseekV4ForCausalLM quantised W4A16 (pack-quantized) and W8A8 (int-quantized) and saved through
transformers, through `inspect`, `--verify`, `diff` and `run-kernel --checkpoint`."""

from __future__ import annotations

import json

import pytest
from conftest import run_hc
from ct_fixtures import SCHEMES, compressed_tensors, save_compressed
from diff_fixtures import edit_copy, hc_values, release

from hccli.names import dialects as D
from hccli.model.config.model import load_config
from hccli.model.config.hf import transformers_params
from hccli.model.inventory import build_inventory


@pytest.fixture(scope="module", params=SCHEMES)
def saved(request, tmp_path_factory):
    compressed_tensors()
    return save_compressed(tmp_path_factory.mktemp("ct") / request.param, request.param)[1]


def _json(*args, code=0):
    r = run_hc(*map(str, args), "--json")
    assert r.exit_code == code, (r.exit_code, r.stderr, r.stdout[-2000:])
    return r.json()


def test_inspect_names_compressed_tensors_and_files_every_tensor(saved):
    doc = _json("inspect", saved)
    assert doc["dialect"]["name"] == D.COMPRESSED_TENSORS and "compressed-tensors" in doc["dialect"]["description"]
    table = doc["components"]
    assert table["mapped"] == doc["tensors"] and table["unmapped"] == []
    assert "other" not in {r["component"] for r in table["rows"]}
    # through the packing: model.num_parameters() and the two router buffers it saves besides
    count = transformers_params(build_inventory(load_config(saved / "config.json")).tensors)
    buffers = count.left_out["hash-routing tables tid2eid (buffers)"] + count.left_out["router correction biases (buffers)"]
    assert doc["logical_params"] == table["logical_params"] == count.params + buffers
    assert {e["name"] for e in doc["hc"]} >= {"head", "layers.0"}


def test_verify_lists_the_stages_transformers_leaves_out_and_nothing_else(saved):
    doc = _json("inspect", saved, "--verify")
    assert [(f["code"], f["severity"]) for f in doc["findings"]] == [("dropped_by_producer", "info")]
    inv = build_inventory(load_config(saved / "config.json"))
    stages = sum(t.scope == "stage" for t in inv.tensors)
    assert doc["findings"][0]["message"].startswith(
        f"transformers leaves out the DSpark/MTP stages (DeepseekV4PreTrainedModel._keys_to_ignore_on_load_unexpected"
        f": mtp.): {stages:,} tensors")


def test_diff_against_the_release_keeps_every_hc_value(saved, tmp_path):
    values = hc_values(saved, D.COMPRESSED_TENSORS)

    def put(tensors):
        for name in list(tensors):
            if name in values:
                tensors[name] = ("F32", values[name].shape, values[name].astype("<f4").tobytes())

    rel = edit_copy(release(tmp_path / "tiny"), tmp_path / "rel", put)
    doc = _json("diff", rel, saved)
    assert doc["exit_code"] == 0 and doc["hc_ok"] and doc["dialect_b"] == D.COMPRESSED_TENSORS
    compared = [r for r in doc["sites"] if r["status"] != "not_in_dialect"]
    assert len(compared) == len(values) and all(r["status"] == "equal" for r in compared)
    comps = {c["component"]: c for c in doc["components"]}
    assert "other" not in comps and comps["attention"]["params_a"] == comps["attention"]["params_b"]


def test_run_kernel_reads_the_quantised_save(saved):
    got = _json("run-kernel", "--checkpoint", saved, "--layers", 2, "--site", "attn", "--impl", "torch")
    assert got["params"]["hc_mult"] == 4 and "layers.2" in got["params"]["base_scale"]


def _bad(saved, tmp_path, edit):
    return edit_copy(saved, tmp_path / "bad", edit)


def test_packing_mismatches_are_named(saved, tmp_path):
    w = "model.layers.1.attn.wq_a"
    packed = json.loads((saved / "config.json").read_text())["quantization_config"]["format"] == "pack-quantized"

    def edit(t):
        key = f"{w}.weight_packed" if packed else f"{w}.weight"
        d, s, b = t[key]
        t[key] = (d, (s[0], s[1] // 2), b[: len(b) // 2])
        t.pop("model.layers.2.attn.wkv.weight_shape", None)

    got = [f for f in _json("inspect", _bad(saved, tmp_path, edit), "--verify")["findings"]
           if f["code"] != "dropped_by_producer"]
    # the V4 family's inventory outside HC is best effort: warnings, each named in the save's spelling
    assert all(f["severity"] == "warning" for f in got)
    msgs = {f["message"].split("'")[1]: f["message"] for f in got}
    codes = {f["message"].split("'")[1]: f["code"] for f in got}
    assert codes[f"{w}.weight_packed" if packed else f"{w}.weight"] == "wrong_packing"
    if not packed:
        assert "holds 32 values a row; the config implies 64" in msgs[f"{w}.weight"]
    else:
        assert "holds 4 int32 words a row; 64 values of 4 bits (config.json's config groups) take 8" \
            in msgs[f"{w}.weight_packed"]
        assert "lacks its weight_shape" in msgs["model.layers.2.attn.wkv.weight_packed"]


def test_without_its_quantization_config_the_names_still_tell(saved, tmp_path):
    bad = _bad(saved, tmp_path, lambda t: None)
    cfg = json.loads((bad / "config.json").read_text())
    del cfg["quantization_config"]
    (bad / "config.json").write_text(json.dumps(cfg))
    doc = _json("inspect", bad, "--verify")
    assert doc["dialect"]["name"] == D.COMPRESSED_TENSORS
    assert doc["dialect"]["note"] == "config.json holds no compressed-tensors' `quantization_config`"
    assert any("no compressed-tensors quantization_config" in f["message"] for f in doc["findings"])


def test_hc_in_bf16_is_reduced_precision_not_a_dtype_error(saved, tmp_path):
    import numpy as np

    name = "model.layers.0.hc_attn_base"

    def edit(t):
        _, s, b = t[name]
        t[name] = ("BF16", s, (np.frombuffer(b, "<u4") >> 16).astype("<u2").tobytes())

    got = [f for f in _json("inspect", _bad(saved, tmp_path, edit), "--verify")["findings"]
           if f["code"].startswith("hc_")]
    assert [f["code"] for f in got] == ["hc_reduced_precision"]

