"""Canonical names only: a number in a tensor name maps to a layer when it is written as
canonical names write it (ASCII digits, no leading zero), and two names that spell one
tensor are a finding (`duplicate_spelling`): `hc diff` exits 2, `--verify` reports it.
The decoys are written by the real producers: safetensors' serializer (release layout),
transformers' save_pretrained and gguf's GGUFWriter, each holding the reference values
under the second spelling and other values under the first, so that reading the second
one for the first would call a tampered checkpoint bit-identical."""

from __future__ import annotations

import copy
import shutil

import numpy as np
import pytest
from diff_fixtures import add_shard, edit_copy, f32, hc_values, release, write_gguf

from hccli.names import dialects as D
from hccli.names.spellings import second_spellings
from hccli.base.vocab import owner_of, parse_hc_name

DECOYS = ["01", "\uff11", "001", "1\u0663"]  # leading zeros, a fullwidth 1, an Arabic-Indic digit


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return release(tmp_path_factory.mktemp("rel") / "tiny")


@pytest.mark.parametrize("num", DECOYS)
def test_only_canonical_numbers_map_to_a_layer(num):
    assert parse_hc_name(f"layers.{num}.hc_attn_fn") is None and owner_of(f"mtp.{num}.x") is None
    for dialect, name in ((D.GGUF, f"blk.{num}.hc_attn_fn.weight"), (D.GGUF, f"blk.{num}.attn_norm.weight"),
                          (D.TRANSFORMERS_SAVED, f"model.layers.{num}.hc_attn_fn"),
                          (D.TRANSFORMERS_MEMORY, f"model.layers.{num}.attn_hc.fn"),
                          (D.MEGATRON, f"decoder.layers.{num}.hc_attn_fn"),
                          (D.RELEASE_PREFIXED, f"model.layers.{num}.hc_attn_fn")):
        assert D.hc_name(name, dialect) is None, name
        canon = D.canonical_name(name, dialect)
        assert canon is None or not canon.startswith(("layers.1.", "layers.11.")), (name, canon)
    assert parse_hc_name("layers.0.hc_attn_fn").num == 0 and parse_hc_name("layers.10.hc_ffn_base").num == 10
    assert D.canonical_name("blk.0.attn_norm.weight", D.GGUF) == "layers.0.attn_norm.weight"


def test_second_spellings_name_both_names():
    names = ["layers.1.hc_attn_fn", "layers.01.hc_attn_fn", "layers.\uff11.hc_attn_fn", "layers.10.x", "layers.2.x"]
    assert second_spellings(names, D.RELEASE) == [
        ("layers.1.hc_attn_fn", "layers.01.hc_attn_fn", "layers.1.hc_attn_fn"),
        ("layers.1.hc_attn_fn", "layers.\uff11.hc_attn_fn", "layers.1.hc_attn_fn")]
    assert second_spellings(["blk.1.hc_attn_fn.weight", "blk.01.hc_attn_fn.weight"], D.GGUF) == [
        ("blk.1.hc_attn_fn.weight", "blk.01.hc_attn_fn.weight", "layers.1.hc_attn_fn")]
    # a dialect's own aliases: transformers' in-memory names with and without `model.`
    assert second_spellings(["model.layers.1.attn_hc.fn", "layers.1.attn_hc.fn"], D.TRANSFORMERS_MEMORY) == [
        ("model.layers.1.attn_hc.fn", "layers.1.attn_hc.fn", "layers.1.hc_attn_fn")]
    assert second_spellings(["layers.1.hc_attn_fn", "layers.10.hc_attn_fn", "layers.0.x"], D.RELEASE) == []


@pytest.mark.parametrize("dialect, first, second", [
    (D.GGUF, "blk.1.attn_norm.weight", "layers.1.attn_norm.weight"),  # _LAYER takes both prefixes
    (D.GGUF, "token_embd.weight", "embed.weight"),  # an unmapped name is its own key
    (D.GGUF, "output_hc_fn.weight", "hc_head_fn"),
    (D.MEGATRON, "decoder.layers.1.self_attention.wq_a.weight", "decoder.blk.1.self_attention.wq_a.weight"),
    (D.MEGATRON, "decoder.layers.1.hc_attn_fn", "layers.1.hc_attn_fn")])
def test_aliases_pass_the_quick_scans_by(dialect, first, second):
    many = [f"blk.{i}.ffn_norm.weight" for i in range(1000)]
    assert second_spellings([*many, first, second], dialect)[-1][:2] == (first, second)
    assert second_spellings([*many, first], dialect) == []
    # the quick scans hold where every other name maps one to one: the tables are injective
    for table in (D._GGUF_LAYER, D._MEGATRON_LAYER):
        assert len(set(table.values())) == len(table) and not any("hc_" in v for v in table.values())


def _tampered_release(tiny, dst, num):
    """A copy whose layers.1.hc_attn_fn is changed, the reference values stored beside it as
    layers.<num>.hc_attn_fn in a shard written by safetensors."""
    name = "layers.1.hc_attn_fn"
    ref = hc_values(tiny)[name]

    def tamper(t):
        if name in t:
            t[name] = ("F32", ref.shape, (f32(t, name) + 1).astype("<f4").tobytes())

    out = edit_copy(tiny, dst, tamper)
    add_shard(out, "model-decoy.safetensors", {f"layers.{num}.hc_attn_fn": ref})
    return out


def _refused(hc, a, b, first, second):
    r = hc("diff", a, b)
    assert r.exit_code == 2, (r.exit_code, r.stdout[-800:], r.stderr)
    assert "duplicate_spelling" in r.stderr and f"'{first}" in r.stderr and f"'{second}" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def _verified(hc, path, *pairs):
    r = hc("inspect", path, "--verify", "--json")
    assert r.exit_code == 1, r.stderr
    got = [f["message"] for f in r.json()["findings"] if f["code"] == "duplicate_spelling"]
    assert len(got) == len(pairs) and all(f"'{x}' and '{y}'" in m for (x, y), m in zip(pairs, got)), got


@pytest.mark.parametrize("num", DECOYS[:2])
def test_release_decoy_by_safetensors(hc, tiny, tmp_path, num):
    b = _tampered_release(tiny, tmp_path / "b", num)
    _refused(hc, tiny, b, "layers.1.hc_attn_fn", f"layers.{num}.hc_attn_fn")
    _refused(hc, b, tiny, "layers.1.hc_attn_fn", f"layers.{num}.hc_attn_fn")
    _verified(hc, b, ("layers.1.hc_attn_fn", f"layers.{num}.hc_attn_fn"))
    assert hc("inspect", tiny, "--verify", "--json").exit_code == 0  # the untouched release: no finding
    assert f"layers.{num}.hc_attn_fn" in hc("inspect", b, "--tree").stdout  # the tree shows it apart, as written


def test_tree_keeps_a_leading_zero_apart():
    from ckpt_tools import tree_by_name as build_tree

    nodes = build_tree([("layers.0.w", "F32", (2,)), ("layers.01.w", "F32", (2,)), ("layers.1.w", "F32", (2,))])
    labels = {n.label: n for n in nodes}
    assert labels["layers.[0-1]"].count == 2 and labels["layers.01.w"].count == 1


def test_transformers_decoy_by_save_pretrained(hc, tmp_path):
    import torch
    from transformers_fixtures import save_tiny_model

    model, a = save_tiny_model(tmp_path / "a")
    layers = model.model.layers
    layers.add_module("\uff11", copy.deepcopy(layers[1]))  # a module named with a fullwidth 1
    with torch.no_grad():
        layers[1].attn_hc.fn.add_(1.0)
    model.save_pretrained(tmp_path / "b")
    shutil.copy(a / "config.json", tmp_path / "b" / "config.json")
    _refused(hc, a, tmp_path / "b", "model.layers.1.", "model.layers.\uff11.")
    r = hc("inspect", tmp_path / "b", "--verify", "--json")
    assert r.exit_code == 1
    got = [f["message"] for f in r.json()["findings"] if f["code"] == "duplicate_spelling"]
    assert any("'model.layers.1.hc_attn_fn' and 'model.layers.\uff11.hc_attn_fn'" in m for m in got), got
    # what save_pretrained writes on its own spells each tensor once
    assert hc("diff", a, a).exit_code == 0
    assert not [f for f in hc("inspect", a, "--verify", "--json").json()["findings"]
                if f["code"] == "duplicate_spelling"]


def test_gguf_decoy_by_gguf_writer(hc, tiny, tmp_path):
    pytest.importorskip("gguf")
    values = hc_values(tiny)
    ref = values["layers.1.hc_attn_fn"]
    tampered = {**values, "layers.1.hc_attn_fn": ref + 1}
    clean = write_gguf(tmp_path / "clean.gguf", values, {})
    b = write_gguf(tmp_path / "b.gguf", tampered, {}, extra={"blk.01.hc_attn_fn.weight": ref})
    assert hc("diff", tiny, clean).exit_code == 0
    _refused(hc, tiny, b, "blk.1.hc_attn_fn.weight", "blk.01.hc_attn_fn.weight")
    _verified(hc, b, ("blk.1.hc_attn_fn.weight", "blk.01.hc_attn_fn.weight"))


def test_shard_numbers_are_ascii(hc, tiny, tmp_path):
    """Without an index, `-of-N` names say which shards belong; a fullwidth number is no shard 1."""
    ck = tmp_path / "ck"
    shutil.copytree(tiny, ck)
    (ck / "model.safetensors.index.json").unlink()
    (ck / "model-00001-of-00010.safetensors").rename(ck / "model-\uff10\uff10\uff10\uff10\uff11-of-00010.safetensors")
    r = hc("inspect", ck, "--verify", "--json")
    assert r.exit_code == 1
    missing = [f["message"] for f in r.json()["findings"] if f["code"] == "missing_shard"]
    assert len(missing) == 1 and "model-00001-of-00010.safetensors" in missing[0], missing
