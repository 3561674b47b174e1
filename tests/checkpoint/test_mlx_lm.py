"""Checkpoints written by mlx-lm itself (tests/mlx_fixtures.py): a tiny V4.1 release converted
plain (its fp8/fp4 weights kept packed as mxfp8/mxfp4) and through quantize_model at 4 bits,
through `inspect`, `--verify`, `diff` and `run-kernel --checkpoint`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_hc
from diff_fixtures import edit_copy, hc_values
from mlx_fixtures import release_and_conversions

from hccli.names import mlx as dialect_mlx
from hccli.names import dialects as D
from hccli.model.config.model import load_config
from hccli.model.inventory import build_inventory


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    return release_and_conversions(tmp_path_factory.mktemp("mlx"))


def _json(*args, code=0):
    r = run_hc(*map(str, args), "--json")
    assert r.exit_code == code, (r.exit_code, r.stderr, r.stdout[-2000:])
    return r.json()


def _kept_logical(rel) -> int:
    """The release's logical parameters less what mlx-lm leaves out (stages, vision, bias_vl)."""
    inv = build_inventory(load_config(rel / "config.json"))
    return sum(t.logical_params for t in inv.tensors if t.scope == "text" and not t.name.endswith(".bias_vl"))


@pytest.mark.parametrize("kind", ["plain", "q4"])
def test_inspect_names_mlx_lm_and_files_every_tensor(made, kind):
    doc = _json("inspect", made[kind])
    assert doc["dialect"]["name"] == D.MLX_LM and "mlx-lm" in doc["dialect"]["description"]
    table = doc["components"]
    assert table["mapped"] == doc["tensors"] and table["unmapped"] == []
    assert "other" not in {r["component"] for r in table["rows"]}
    # counted through the packing: the same logical parameters however mlx-lm packed them
    assert doc["logical_params"] == table["logical_params"] == _kept_logical(made["release"])
    assert len(doc["hc"]) == 16 and all(e["name"].startswith("layers.") for e in doc["hc"])


@pytest.mark.parametrize("kind", ["plain", "q4"])
def test_verify_lists_what_mlx_lm_left_out_and_nothing_else(made, kind):
    doc = _json("inspect", made[kind], "--verify")
    assert {(f["code"], f["severity"]) for f in doc["findings"]} == {("dropped_by_producer", "info")}
    text = " | ".join(f["message"] for f in doc["findings"])
    inv = build_inventory(load_config(made["release"] / "config.json"))
    stages = sum(t.scope == "stage" for t in inv.tensors)
    assert f"DSpark/MTP stages (deepseek_v41 Model.sanitize drops mtp.): {stages:,} tensors" in text
    assert "ffn.gate.bias_vl" in text and "save_config removes vision_config" in text
    assert len(doc["findings"]) == 3
    # with the source's config the vision tower is counted as well
    doc = _json("inspect", made[kind], "--verify", "--config", made["release"] / "config.json")
    vision = sum(t.scope == "vision" for t in inv.tensors)
    assert any(f"vision tower (Model.sanitize drops vision., aligner., image_): {vision} tensors" in f["message"]
               for f in doc["findings"])
    assert {f["code"] for f in doc["findings"]} == {"dropped_by_producer"}
    assert doc["dialect"]["note"] == ""  # mlx-lm's load_model reads the release's fp8 block as its own


@pytest.mark.parametrize("kind", ["plain", "q4"])
def test_diff_against_the_release_keeps_every_hc_value(made, kind):
    doc = _json("diff", made["release"], made[kind])
    assert doc["exit_code"] == 0 and doc["hc_ok"] and doc["dialect_b"] == D.MLX_LM
    rows = {r["name"]: r for r in doc["sites"]}
    assert {n for n, r in rows.items() if r["status"] == "not_in_dialect"} == \
        {n for n in hc_values(made["release"]) if n.startswith("mtp.")}
    assert all(r["status"] == "equal" for n, r in rows.items() if n.startswith("layers."))
    comps = {c["component"]: c for c in doc["components"]}
    assert "other" not in comps
    for c in ("attention", "routed_experts", "shared_expert", "embeddings_head", "hyper_connections"):
        assert comps[c]["params_a"] == comps[c]["params_b"], c  # stacked, split and packed, the same parameters


def test_run_kernel_reads_the_site_as_the_release(made):
    args = ("--layers", 3, "--site", "ffn", "--hidden", "--tokens", 3, "--seed", 7, "--impl", "torch")
    a = _json("run-kernel", "--checkpoint", made["q4"], *args)
    b = _json("run-kernel", "--checkpoint", made["release"], *args)
    assert all(a[k] == b[k] for k in ("pre", "post", "comb"))


def test_names_are_mlx_lms_own(made):
    """dialect_mlx.rename is deepseek_v41's _rename, and every stored name maps back."""
    from mlx_lm.models.deepseek_v41 import _rename

    for cfg in (made["release"] / "config.json", None):
        for t in build_inventory(load_config(cfg)).tensors:
            assert dialect_mlx.rename(t.name) == _rename(t.name), t.name
    stored = json.loads((made["q4"] / "model.safetensors.index.json").read_text())["weight_map"]
    canon = {n: D.canonical_name(n, D.MLX_LM) for n in stored}
    assert None not in canon.values()
    for n, c in canon.items():
        if n.endswith(".weight"):
            assert dialect_mlx.stored_name(c.replace("*", "0")) == n, n


def _edited(made, tmp_path, kind, edit):
    return edit_copy(made[kind], tmp_path / "bad", edit)


def test_packing_mismatches_are_named(made, tmp_path):
    q = "model.layers.2.self_attn.q_a_proj"

    def edit(t):
        d, s, b = t[f"{q}.scales"]
        t[f"{q}.scales"] = (d, (s[0], s[1] * 2), b * 2)  # twice the groups of its weight
        del t["model.layers.3.mlp.experts.switch_mlp.down_proj.weight"]
        t["model.layers.3.self_attn.extra.weight"] = ("BF16", (2,), b"\0" * 4)

    doc = _json("inspect", _edited(made, tmp_path, "plain", edit), "--verify", code=1)
    got = {f["code"]: f["message"] for f in doc["findings"] if f["code"] != "dropped_by_producer"}
    assert len(doc["findings"]) == 3 + len(got) and set(got) == {"wrong_packing", "missing_tensor", "unmapped_tensor"}
    assert got["wrong_packing"] == (f"'{q}.weight' (layers.2.attn.wq_a.weight) packs 8 bits in groups of 16 with U8 "
                                    "scales, which no mlx mode does")
    assert got["missing_tensor"].startswith("'layers.3.ffn.experts.*.w2.weight' (mlx-lm writes "
                                            "'model.layers.3.mlp.experts.switch_mlp.down_proj.weight') [8, 64, 32]")
    assert "switch_mlp.down_proj.scales' are here without it" in got["missing_tensor"]
    assert "model.layers.3.self_attn.extra.weight" in got["unmapped_tensor"]


def test_config_entry_that_disagrees_with_the_shapes(made, tmp_path):
    bad = _edited(made, tmp_path, "q4", lambda t: None)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["quantization"]["lm_head"]["bits"] = 8
    (bad / "config.json").write_text(json.dumps(cfg))
    doc = _json("inspect", bad, "--verify", code=1)
    bad_rows = [f["message"] for f in doc["findings"] if f["code"] == "wrong_packing"]
    assert len(bad_rows) == 1 and "'lm_head.weight'" in bad_rows[0] and "entry says 8 / 64 (affine)" in bad_rows[0]


@pytest.mark.parametrize("dtype, code", [("BF16", "hc_reduced_precision"), ("U8", "hc_quantised")])
def test_hc_stored_below_f32_is_flagged_as_for_gguf(made, tmp_path, dtype, code):
    name = "model.layers.1.ffn_hc.fn"

    def edit(t):
        _, s, b = t[name]
        x = np.frombuffer(b, "<f4")
        raw = (x.view("<u4") >> 16).astype("<u2").tobytes() if dtype == "BF16" else np.zeros(x.size, np.uint8).tobytes()
        t[name] = (dtype, s, raw)

    doc = _json("inspect", _edited(made, tmp_path, "plain", edit), "--verify", code=1 if code == "hc_quantised" else 0)
    got = [f for f in doc["findings"] if f["code"].startswith("hc_")]
    assert [f["code"] for f in got] == [code] and f"'{name}' (layers.1.hc_ffn_fn) is {dtype}" in got[0]["message"]


def test_names_decide_with_the_config_block():
    names = ["model.layers.0.attn_hc.fn", "model.layers.0.self_attn.q_a_proj.weight", "lm_head.weight"]
    assert D.detect_dialect(names).dialect == D.TRANSFORMERS_MEMORY  # shared module names, nothing else
    got = D.detect_dialect(names, quant="mlx")
    assert got.dialect == D.MLX_LM and "mlx-lm's `quantization`" in got.note
    assert D.detect_dialect([*names, "model.layers.0.mlp.experts.switch_mlp.up_proj.weight"]).dialect == D.MLX_LM


def test_biases_without_scales_are_named(made, tmp_path):
    doc = _json("inspect", _edited(made, tmp_path, "q4", lambda t: t.pop("model.embed_tokens.scales")), "--verify",
                code=1)
    got = [f["message"] for f in doc["findings"] if f["code"] == "wrong_packing"]
    assert got == ["'model.embed_tokens.weight' (embed.weight) has .biases and no .scales"]
