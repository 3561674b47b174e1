"""`hc diff`: a release-layout tiny checkpoint against itself, a transformers save of
the same HC values, its GGUF (F16 and Q8_0 fn), an edited copy and another model."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SAMPLES
from diff_fixtures import all_tensors, edit_copy, f32, hc_values, release, write_gguf

from hccli.names import dialects as D
from hccli.diffing import diff as DF
from hccli.checkpoint import source as source_mod
from hccli.model.config.model import load_config
from hccli.diffing.effect import site_mixes
from hccli.checkpoint.view import component_of, open_view
from hccli.model.inventory import build_inventory
from hccli.checkpoint.synth import to_bf16_bytes

Q8_SITE = "layers.1.hc_ffn_fn"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return release(tmp_path_factory.mktemp("rel") / "tiny")


def _rows(doc):
    return {r["name"]: r for r in doc["sites"]}


def test_itself_is_identical_and_reads_only_hc(hc, tiny, monkeypatch):
    asked = []
    real = source_mod.LocalFile.read
    monkeypatch.setattr(source_mod.LocalFile, "read", lambda self, o, n: asked.append(n) or real(self, o, n))
    r = hc("diff", tiny, tiny, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    hc_bytes = sum(len(b) for n, (_, _, b) in all_tensors(tiny).items() if D.parse_hc_name(n))
    assert doc["bytes_read_a"] == doc["bytes_read_b"] == hc_bytes
    header_reads = 2 * 2 * len(list(tiny.glob("*.safetensors")))  # length + header, per shard and side
    assert sum(asked[header_reads:]) == 2 * hc_bytes  # after the headers: the HC tensors, nothing else
    assert {r["status"] for r in doc["sites"]} == {"equal"}
    assert all(r["max_abs"] == 0 and r["dtype_a"] == r["dtype_b"] == "F32" for r in doc["sites"])
    assert doc["only_in_a"] == doc["only_in_b"] == [] and doc["changed"] == []
    assert all(c["only_in_a"] == c["only_in_b"] == 0 for c in doc["components"])


def test_transformers_save_holding_the_same_hc_is_exit_0(hc, tiny, tmp_path):
    from transformers_fixtures import save_tiny_model

    _, tf = save_tiny_model(tmp_path / "tf")
    tf_hc = hc_values(tf, D.TRANSFORMERS_SAVED)

    def put(tensors):
        for name in list(tensors):
            if name in tf_hc:
                tensors[name] = ("F32", tf_hc[name].shape, tf_hc[name].astype("<f4").tobytes())

    rel = edit_copy(tiny, tmp_path / "rel", put)
    r = hc("diff", rel, tf, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert doc["dialect_a"] == D.RELEASE and doc["dialect_b"] == D.TRANSFORMERS_SAVED
    rows = _rows(doc)
    compared = [x for x in rows.values() if x["status"] != "not_in_dialect"]
    assert len(compared) == len(tf_hc) and all(x["status"] == "equal" for x in compared)
    # transformers holds no stages: the release's mtp.* HC is absent by dialect, not a defect
    assert {n for n, x in rows.items() if x["status"] == "not_in_dialect"} == \
        {n for n in hc_values(rel) if n.startswith("mtp.")}
    comps = {c["component"]: c for c in doc["components"]}
    assert comps["attention"]["changed"] > 0  # FP8 in the release, BF16 dequantised in the save
    assert comps["hyper_connections"]["changed"] == 0


@pytest.fixture(scope="module")
def gguf_of_tiny(tiny, tmp_path_factory):
    pytest.importorskip("gguf")
    values = hc_values(tiny)
    types = {n: "F16" for n in values if n.endswith("_fn")}
    types[Q8_SITE] = "Q8_0"
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", values, types), values


def test_gguf_with_f16_and_q8_0_fn(hc, tiny, gguf_of_tiny):
    path, values = gguf_of_tiny
    r = hc("diff", tiny, path, "--json")
    assert r.exit_code == 1, r.stderr
    doc = r.json()
    first = doc["sites"][0]
    assert first["name"] == Q8_SITE and first["dtype_b"] == "Q8_0" and first["status"] == "differs"
    for x in doc["sites"]:
        if x["name"] == Q8_SITE:
            continue
        if x["status"] == "not_in_dialect":
            assert x["name"].startswith("mtp.")
        elif x["part"] == "fn" and x["name"] != Q8_SITE:
            want = values[x["name"]]
            err = np.abs(want.astype(np.float16).astype(np.float32) - want).max()
            assert x["dtype_b"] == "F16" and x["status"] == "differs"
            assert x["max_abs"] == pytest.approx(float(err), rel=1e-12)
            assert 0 < x["rel_to_max"] <= 2.0 ** -11 < first["rel_to_max"]  # half an F16 ulp of the largest
            assert x["site"] == "head" or 0 < x["effect"]["comb"] < first["effect"]["comb"]
        else:
            assert x["status"] == "equal" and x["dtype_b"] == "F32", x  # base and scale exact
            if x["part"] == "base":
                assert x["effect"]["pre"] == 0  # base alone: nothing changed
    # F16 rounding is within 2^-11 relative (and the subnormals' 2^-25 absolute); Q8_0 is not
    r = hc("diff", tiny, path, "--rtol", str(2.0 ** -11), "--atol", str(2.0 ** -25), "--json")
    bad = [x["name"] for x in r.json()["sites"] if not x["ok"]]
    assert r.exit_code == 1 and bad == [Q8_SITE]


def test_gguf_table_names_the_q8_0_site_first(hc, tiny, gguf_of_tiny):
    r = hc("diff", tiny, gguf_of_tiny[0])
    assert r.exit_code == 1
    lines = [ln for ln in r.stdout.splitlines() if "differs" in ln]
    assert Q8_SITE in lines[0] and "Q8_0" in lines[0]
    assert "not in B, whose dialect cannot hold them" in r.stdout


def test_transposed_fn_and_missing_site_are_named(hc, tiny, tmp_path):
    def edit(t):
        if "layers.2.hc_attn_fn" in t:
            x = f32(t, "layers.2.hc_attn_fn").T
            t["layers.2.hc_attn_fn"] = ("F32", x.shape, np.ascontiguousarray(x).tobytes())
        for part in ("fn", "base", "scale"):
            t.pop(f"layers.3.hc_ffn_{part}", None)

    copy = edit_copy(tiny, tmp_path / "edited", edit)
    r = hc("diff", tiny, copy, "--json")
    assert r.exit_code == 1, r.stderr
    doc = r.json()
    rows = _rows(doc)
    t = rows["layers.2.hc_attn_fn"]
    assert t["status"] == "transposed" and t["shape_a"] == [24, 256] and t["shape_b"] == [256, 24]
    assert all(rows[f"layers.3.hc_ffn_{p}"]["status"] == "only_in_a" for p in ("fn", "base", "scale"))
    assert {x["name"] for x in doc["sites"][:4]} == {"layers.2.hc_attn_fn", *(f"layers.3.hc_ffn_{p}" for p in
                                                                                ("fn", "base", "scale"))}
    assert set(doc["only_in_a"]) == {f"layers.3.hc_ffn_{p}" for p in ("fn", "base", "scale")}
    # the untouched parts of the transposed site still compare, with no effect to compute
    assert rows["layers.2.hc_attn_base"]["status"] == "equal" and rows["layers.2.hc_attn_base"]["effect"] is None
    text = hc("diff", tiny, copy).stdout
    assert "transposed" in text and "missing in B" in text


def test_one_changed_base_shows_its_effect(tiny, tmp_path):
    name = "layers.4.hc_attn_base"

    def edit(t):
        if name in t:
            x = f32(t, name).copy()
            x[-1] += 0.5  # the last comb offset
            t[name] = ("F32", x.shape, x.tobytes())

    copy = edit_copy(tiny, tmp_path / "b", edit)
    with open_view(tiny) as a, open_view(copy) as b:
        rows = DF.build_diff(a, b).sites
    assert rows[0].name == name and rows[0].status == DF.DIFFERS and rows[0].max_abs == 0.5 and rows[0].beyond == 1
    e = rows[0].effect
    assert e.via.startswith("base alone") and e.comb > 0 and e.pre == 0 and e.post == 0
    assert all(r.status == DF.EQUAL for r in rows[1:])
    scale = next(r for r in rows if r.name == "layers.4.hc_attn_scale")
    assert scale.effect.via == "16 sample tokens (seed 0)" and scale.effect.comb > 0  # the site's output moved


def test_sample_mixes_are_the_reference_projection():
    rng = np.random.default_rng(1)
    h = DF.sample_hidden(3, 7, 4, 8)
    assert np.array_equal(h, DF.sample_hidden(3, 7, 4, 8)) and h.shape == (3, 4, 8)
    fn = rng.standard_normal((24, 32)).astype(np.float32)
    x = h.reshape(3, 32).astype(np.float64)
    want = (x @ fn.T.astype(np.float64)) / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6)
    assert np.allclose(site_mixes(h, fn, 1e-6), want, rtol=1e-5, atol=1e-5)


def test_different_models_exit_2_naming_the_difference(hc, tiny, tmp_path):
    other = release(tmp_path / "v41", "tiny-v4.1.json")
    r = hc("diff", tiny, other)
    assert r.exit_code == 2
    assert "different models: layers 6 vs 8" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("content, message", [(b"<html>not here</html>", "bad.safetensors"),
                                              (b"GGUF\x63\x00\x00\x00" + bytes(16), "version 99")])
def test_unreadable_side_is_one_line_exit_2(hc, tiny, tmp_path, content, message):
    bad = tmp_path / ("bad.gguf" if content.startswith(b"GGUF") else "bad.safetensors")
    bad.write_bytes(content)
    r = hc("diff", tiny, bad)
    assert r.exit_code == 2 and message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_values_all_streams_and_finds_a_changed_weight(hc, tiny, tmp_path, monkeypatch):
    from hccli.diffing import values as DV

    monkeypatch.setattr(DV, "CHUNK_ELEMENTS", 24)  # many chunks a tensor
    monkeypatch.setattr(DV, "WINDOW_VALUES", 96)
    monkeypatch.setattr(DV, "PIECE_BYTES", 1000)  # and many pieces
    target, widened = "layers.0.attn.wq_b.weight", "embed.weight"

    def edit(t):
        if widened in t:  # the same values stored wider: equal, in chunks of other lengths
            _, shape, raw = t[widened]
            x = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
            t[widened] = ("F32", shape, x.tobytes())
        if "layers.0.attn_norm.weight" in t:
            _, shape, raw = t["layers.0.attn_norm.weight"]
            x = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32) + 1
            t["layers.0.attn_norm.weight"] = ("BF16", shape, to_bf16_bytes(x))

    copy = edit_copy(tiny, tmp_path / "v", edit)
    r = hc("diff", tiny, copy, "--values", "all", "--json")
    assert r.exit_code == 1, r.stderr
    doc = r.json()
    vals = {v["name"]: v for v in doc["values"]}
    assert vals[widened]["status"] == "equal" and vals[target]["status"] == "equal"
    assert vals["layers.0.attn_norm.weight"]["status"] == "differs"
    assert [v["name"] for v in doc["values"] if v["status"] == "differs"] == ["layers.0.attn_norm.weight"]
    assert doc["hc_ok"] is True
    assert r.json()["changed"] == [{"name": widened, "component": "embeddings_head", "dtype_a": "BF16",
                                    "dtype_b": "F32", "shape_a": [256, 64], "shape_b": [256, 64]}]
    assert hc("diff", tiny, copy, "--json").exit_code == 0  # without --values all only the HC counts


@pytest.mark.parametrize("config", ["tiny-v4.1.json", "tiny-v4.hf.json", "deepseek-v4.1-flash.json"])
def test_component_of_matches_the_inventory(config):
    inv = build_inventory(load_config(SAMPLES / config))
    wrong = [(t.name, t.component) for t in inv.tensors if component_of(t.name) != t.component]
    assert wrong == []


def test_bad_values_option_is_exit_2(hc, tiny):
    r = hc("diff", tiny, tiny, "--values", "some")
    assert r.exit_code == 2 and "--values" in r.stderr


def test_gguf_metadata_is_validated(hc, tiny, tmp_path):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "odd.gguf"
    w = gguf.GGUFWriter(path, "deepseek4")
    for key, value in (("block_count", 6), ("embedding_length", 64), ("hyper_connection.count", 4)):
        w.add_uint32(f"deepseek4.{key}", value)
    w.add_string("deepseek4.hyper_connection.epsilon", "tiny\x1b[2J")
    w.add_tensor("blk.0.hc_attn_base.weight", np.zeros(24, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = hc("diff", tiny, path)
    assert r.exit_code == 2 and "hyper_connection.epsilon" in r.stderr and "\x1b" not in r.stderr


def test_oversized_config_is_not_read_whole(tiny, tmp_path, monkeypatch):
    from hccli.model.config import read as config_read

    monkeypatch.setattr(config_read, "MAX_CONFIG_BYTES", 100)  # the config loader's cap, shared by diff
    with open_view(tiny) as v:
        assert v.model.source == "tensor shapes" and "at most 100 bytes" in v.config_note.line
        assert (v.model.hc_mult, v.model.n_layers, v.model.dim) == (4, 6, 64)


def test_prefixed_copy_and_split_gguf_folder_compare_by_canonical_name(hc, tiny, tmp_path):
    pytest.importorskip("gguf")

    def prefix(t):
        for name in list(t):
            t["model." + name] = t.pop(name)

    prefixed = edit_copy(tiny, tmp_path / "prefixed", prefix)
    doc = hc("diff", tiny, prefixed, "--json").json()
    assert doc["dialect_b"] == D.RELEASE_PREFIXED and doc["exit_code"] == 0
    assert {x["status"] for x in doc["sites"]} == {"equal"} and doc["only_in_a"] == doc["only_in_b"] == []
    folder = tmp_path / "split"
    folder.mkdir()
    write_gguf(folder / "m.gguf", hc_values(tiny), {}, split_max_tensors=8)
    assert len(list(folder.glob("m-*-of-*.gguf"))) > 2
    r = hc("diff", tiny, folder, "--json")
    doc = r.json()
    assert r.exit_code == 0 and doc["dialect_b"] == D.GGUF  # all F32: every value kept
    assert {x["status"] for x in doc["sites"]} == {"equal", "not_in_dialect"}


def test_remote_side_reads_headers_and_hc_values_only(hc, tiny, monkeypatch, tmp_path):
    pytest.importorskip("huggingface_hub")
    from hub_server import Hub

    with Hub({"org/tiny": tiny}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("HC_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        r = hc("diff", tiny, "hf://org/tiny", "--json")
        assert r.exit_code == 0, r.stderr
        doc = r.json()
        hc_bytes = sum(len(b) for n, (_, _, b) in all_tensors(tiny).items() if D.parse_hc_name(n))
        assert doc["bytes_read_b"] == hc_bytes
        small = sum(len(p.read_bytes()) for p in (tiny / "config.json", tiny / "model.safetensors.index.json"))
        headers = sum(8 + int.from_bytes(p.read_bytes()[:8], "little") for p in tiny.glob("*.safetensors"))
        # the header fetch may overshoot by a few bytes; no weight matrix (>= 2 KB here) fits in the margin
        assert hc_bytes <= hub.stats.body_bytes - small - headers < hc_bytes + 256


def test_remote_gguf_is_read_as_the_local_one(hc, tiny, gguf_of_tiny, monkeypatch, tmp_path):
    pytest.importorskip("huggingface_hub")
    import shutil

    from hub_server import Hub

    path, _ = gguf_of_tiny
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(path, repo / path.name)
    local = hc("diff", tiny, path, "--json").json()
    with Hub({"org/g": repo}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("HC_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        r = hc("diff", tiny, "hf://org/g", "--json")
        assert r.exit_code == 1, r.stderr
        remote = r.json()
    assert remote["dialect_b"] == D.GGUF and remote["model"] == local["model"]
    # the same sites, values, types and HC bytes as the local file: one reading path
    assert remote["sites"] == local["sites"] and remote["bytes_read_b"] == local["bytes_read_b"] > 0
    assert remote["components"] == local["components"] and remote["label_b"] == "hf://org/g"


def test_fifo_config_is_refused_without_blocking(hc, tiny, tmp_path):
    # diff reads configs through the config loader: a FIFO is named, not waited on
    import os

    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    r = hc("diff", tiny, tiny, "--config-a", fifo)
    assert r.exit_code == 2 and "FIFO" in r.stderr and str(fifo) in r.stderr
