"""`hc run-site`: the chain over a checkpoint in each dialect or a config, golden site vectors
(--save, --compare, the format), the streams and sub-layer inputs, --precision, the bounds."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import SAMPLES
from diff_fixtures import hc_values, write_gguf
from safetensors.numpy import load_file, save_file
from site_fixtures import make_golden

from hccli.base.limits import MAX_ELEMENTS
from hccli.runsite import golden as site_golden
from hccli.base.floats import bf16_bits
from hccli.checkpoint.synth import make_checkpoint


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpts")
    for name in ("tiny-v4.1.json", "tiny-v4.hf.json"):
        make_checkpoint(SAMPLES / name, d / name.split(".json")[0], seed=0)
    return d


def _roundtrip(hc, source, tmp_path, *extra):
    golden = make_golden(source, tmp_path / "golden.safetensors", *extra)
    r = hc("check-port", str(golden), "--golden", str(golden), "--json")
    assert r.exit_code == 0 and r.json()["summary"] == "matches within float32 rounding", r.stdout + r.stderr
    r = hc("run-site", "--compare", str(golden), "--json")
    assert r.exit_code == 0 and r.json()["ok"] and all(s["differing"] == 0 for s in r.json()["steps"])
    return golden


@pytest.mark.parametrize("name,family,sites", [("tiny-v4.1", "v4.1", 8 * 2 + 1 + 2 * 2 + 1),
                                               ("tiny-v4.hf", "v4", 6 * 2 + 1 + 2 * 2 + 1)])
def test_release_checkpoints_save_and_check_port(hc, ckpts, tmp_path, name, family, sites):
    r = hc("run-site", str(ckpts / name), "--json")
    doc = r.json()
    assert r.exit_code == 0 and doc["family"] == family and len(doc["sites"]) == sites
    assert doc["streams_dtype"] == "bf16" and doc["tokens"] == 16
    golden = _roundtrip(hc, ckpts / name, tmp_path)
    meta = site_golden.read_golden(golden).meta
    assert meta["format"] == "hc-site-golden/1" and meta["family"] == family
    assert meta["sites"].split(",") == [s["key"] for s in doc["sites"]]
    names = set(load_file(str(golden)))
    first = doc["sites"][0]["key"]
    assert {f"{first}.{n}" for n in ("streams_in", "fn", "base", "scale", "f", "rsqrt", "mixes", "pre", "post",
                                    "comb", "collapsed", "streams_out")} <= names
    assert (f"{first}.pre_mix_in" in names) == (family == "v4.1")


def test_a_transformers_save_and_its_gguf(hc, ckpts, tmp_path):
    from transformers_fixtures import save_tiny_model

    pytest.importorskip("torch")
    _, out = save_tiny_model(tmp_path / "tf")
    r = hc("run-site", str(out), "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["family"] == "v4" and r.json()["dialect"] == "transformers-saved"
    _roundtrip(hc, out, tmp_path)


@pytest.mark.parametrize("name", ["tiny-v4.hf", "tiny-v4.1"])
def test_a_gguf(hc, ckpts, tmp_path, name):
    pytest.importorskip("gguf")
    values = {k: v for k, v in hc_values(ckpts / name).items() if not k.startswith("mtp.")}
    (tmp_path / "gguf").mkdir()  # a single file's folder is the checkpoint's: nothing is written there
    path = write_gguf(tmp_path / "gguf" / "m.gguf", values, {}, config=f"{name}.json")
    r = hc("run-site", str(path), "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["dialect"] == "gguf" and r.json()["family"] == ("v4" if name == "tiny-v4.hf" else "v4.1")
    golden = _roundtrip(hc, path, tmp_path)
    # the same values as the release's sites: the same golden numbers
    release = make_golden(ckpts / name, tmp_path / "release.safetensors", "--layers", "0-1")
    a, b = load_file(str(golden)), load_file(str(release))
    assert all(np.array_equal(a[k], b[k]) for k in b if k.split(".")[0] in ("0", "1"))


def test_a_config_gives_sample_values(hc):
    r = hc("run-site", str(SAMPLES / "tiny-v4.1.json"), "--tokens", "3", "--layers", "2", "--site", "ffn", "--json")
    doc = r.json()
    assert r.exit_code == 0 and doc["source_kind"] == "config" and doc["tokens"] == 3
    assert [s["key"] for s in doc["sites"]] == ["2.ffn"] and len(doc["sites"][0]["comb"]) == 4
    again = hc("run-site", str(SAMPLES / "tiny-v4.1.json"), "--tokens", "3", "--layers", "2", "--site", "ffn",
               "--json").json()
    assert again["sites"] == doc["sites"]
    r = hc("run-site", str(SAMPLES / "tiny-v4.1.json"), "--layers", "99")
    assert r.exit_code == 2 and "--layers 99: this model has layers 0-7 and mtp.0-mtp.1 (8-9)" in r.stderr


def test_streams_from_a_file(hc, ckpts, tmp_path):
    src = ckpts / "tiny-v4.1"
    x = np.random.default_rng(0).standard_normal((5, 4, 64)).astype(np.float32)
    np.save(tmp_path / "s.npy", x)
    r = hc("run-site", str(src), "--streams", str(tmp_path / "s.npy"), "--json")
    assert r.exit_code == 0 and r.json()["streams_dtype"] == "f32" and r.json()["tokens"] == 5
    bits = bf16_bits(x)
    (tmp_path / "s.safetensors").write_bytes(_st({"streams": ("BF16", list(x.shape), bits.tobytes())}))
    r = hc("run-site", str(src), "--streams", str(tmp_path / "s.safetensors"), "--json")
    assert r.exit_code == 0 and r.json()["streams_dtype"] == "bf16"
    np.save(tmp_path / "bad.npy", x[:, :3])
    r = hc("run-site", str(src), "--streams", str(tmp_path / "bad.npy"))
    assert r.exit_code == 2 and "expected [tokens, 4, 64]" in r.stderr
    save_file({"streams": x.astype(np.float16)}, str(tmp_path / "h.safetensors"))
    r = hc("run-site", str(src), "--streams", str(tmp_path / "h.safetensors"))
    assert r.exit_code == 2 and "expected the streams in BF16 or F32" in r.stderr
    r = hc("run-site", str(src), "--streams", str(tmp_path / "s.npy"), "--tokens", "3")
    assert r.exit_code == 2 and "give one" in r.stderr


def _st(tensors: dict) -> bytes:
    from hccli.checkpoint.synth import header_bytes

    head = header_bytes([(k, d, tuple(s), len(b)) for k, (d, s, b) in tensors.items()])
    return head + b"".join(b for _, _, b in tensors.values())


def test_sublayer_zero_random_and_from_a_file(hc, ckpts, tmp_path):
    src = ckpts / "tiny-v4.hf"
    golden = make_golden(src, tmp_path / "zero.safetensors", "--sublayer", "zero", "--layers", "0")
    g = site_golden.read_golden(golden)
    for gs in g.sites:  # pure stream mixing: streams_out = cast(sum_j comb[j, k] x[j])
        assert not gs.inputs.f.any()
        mixed = np.einsum("tjk,tjd->tkd", gs.steps["comb"].astype(np.float64), gs.inputs.streams)
        assert np.abs(gs.steps["streams_out"] - mixed).max() <= np.abs(mixed).max() * 2 ** -7
    rnd = make_golden(src, tmp_path / "rnd.safetensors", "--layers", "0-1")
    # a file of sub-layer outputs: the golden's own f give the same run
    again = make_golden(src, tmp_path / "again.safetensors", "--layers", "0-1", "--sublayer", str(rnd))
    a, b = load_file(str(rnd)), load_file(str(again))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    r = hc("run-site", str(src), "--sublayer", str(tmp_path / "zero.safetensors"), "--layers", "3")
    assert r.exit_code == 2 and "no tensor `1.attn.f`" in r.stderr


def test_precision_reports_drift_against_f32(hc, ckpts):
    src = ckpts / "tiny-v4.1"
    f32 = hc("run-site", str(src), "--layers", "0-1", "--json").json()
    assert all(s["drift"] is None for s in f32["sites"])
    bf = hc("run-site", str(src), "--layers", "0-1", "--precision", "bf16", "--json").json()
    assert bf["precision"] == "bf16" and all(s["drift"]["pre"] > 1e-5 for s in bf["sites"])
    tf = hc("run-site", str(src), "--layers", "0-1", "--precision", "tf32", "--json").json()
    assert all(0 < t["drift"]["comb"] < b["drift"]["comb"] for t, b in zip(tf["sites"], bf["sites"]))
    r = hc("run-site", str(src), "--precision", "bf16", "--save", "/tmp/never.safetensors")
    assert r.exit_code == 2 and "drop --precision" in r.stderr
    r = hc("run-site", str(src), "--precision", "fp8")
    assert r.exit_code == 2 and "--precision 'fp8'" in r.stderr


def test_compare_exit_codes(hc, ckpts, tmp_path):
    golden = make_golden(ckpts / "tiny-v4.1", tmp_path / "g.safetensors", "--layers", "0")
    t = load_file(str(golden))
    meta = site_golden.read_golden(golden).meta
    t["0.attn.comb"] = t["0.attn.comb"] + np.float32(1e-3)
    save_file(t, str(tmp_path / "edited.safetensors"), metadata=meta)
    r = hc("run-site", "--compare", str(tmp_path / "edited.safetensors"), "--json")
    steps = {s["step"]: s for s in r.json()["steps"]}
    assert r.exit_code == 1 and steps["comb"]["beyond_atol"] == 16 * 16 and steps["pre"]["beyond_atol"] == 0
    r = hc("run-site", "--compare", str(tmp_path / "edited.safetensors"), "--atol", "0.01")
    assert r.exit_code == 0
    save_file(t, str(tmp_path / "nometa.safetensors"))
    r = hc("run-site", "--compare", str(tmp_path / "nometa.safetensors"))
    assert r.exit_code == 2 and "metadata 'format'" in r.stderr
    del t["0.ffn.fn"]
    save_file(t, str(tmp_path / "missing.safetensors"), metadata=meta)
    r = hc("run-site", "--compare", str(tmp_path / "missing.safetensors"))
    assert r.exit_code == 2 and "no tensor `0.ffn.fn`" in r.stderr
    r = hc("run-site", "--compare", str(golden), "--layers", "0")
    assert r.exit_code == 2 and "drop --layers" in r.stderr


def test_save_is_refused_before_any_work(hc, ckpts, tmp_path):
    src = ckpts / "tiny-v4.1"
    (tmp_path / "there.safetensors").write_bytes(b"x")
    r = hc("run-site", str(src), "--save", str(tmp_path / "there.safetensors"))
    assert r.exit_code == 2 and "file exists" in r.stderr and (tmp_path / "there.safetensors").read_bytes() == b"x"
    r = hc("run-site", str(src), "--save", str(src / "golden.safetensors"))
    assert r.exit_code == 2 and "inside the checkpoint directory" in r.stderr
    assert not (src / "golden.safetensors").exists()


def test_bounds(hc, ckpts, tmp_path, monkeypatch):
    src = ckpts / "tiny-v4.1"
    most = MAX_ELEMENTS // (4 * 64)
    r = hc("run-site", str(src), "--tokens", str(most + 1))
    assert r.exit_code == 2 and f"at most {most:,} tokens" in r.stderr and "MAX_ELEMENTS" in r.stderr
    monkeypatch.setattr(site_golden, "MAX_GOLDEN_VALUES", 10_000)
    r = hc("run-site", str(src), "--save", str(tmp_path / "big.safetensors"))
    assert r.exit_code == 2 and "MAX_GOLDEN_VALUES" in r.stderr and not (tmp_path / "big.safetensors").exists()


def test_bad_sources_exit_2(hc, tmp_path):
    r = hc("run-site", str(tmp_path / "nothing"))
    assert r.exit_code == 2 and "nothing" in r.stderr
    r = hc("run-site")
    assert r.exit_code == 2 and "needs SOURCE" in r.stderr


def test_plot_and_human_output(hc, ckpts, tmp_path, mpl):
    r = hc("run-site", str(ckpts / "tiny-v4.1"), "--layers", "0-2", "--plot", str(tmp_path / "s.png"))
    assert r.exit_code == 0 and (tmp_path / "s.png").stat().st_size > 1000
    assert "0.attn" in r.stdout and "token 0's comb" in r.stdout and "wrote" in r.stderr
    assert json.loads(hc("run-site", str(ckpts / "tiny-v4.1"), "--layers", "0", "--json").stdout)["sites"]


def test_a_golden_of_the_stages_alone(hc, ckpts, tmp_path):
    golden = _roundtrip(hc, ckpts / "tiny-v4.1", tmp_path, "--layers", "8-9")
    g = site_golden.read_golden(golden)
    assert g.meta["stacks"] == "0,5" and [s.ref.key for s in g.sites] == ["8.attn", "8.ffn", "9.attn", "9.ffn",
                                                                          "9.head"]
    assert {s.ref.stack for s in g.sites} == {"stages"} and g.sites[-1].ref.label == "mtp.1"
    assert np.array_equal(g.sites[0].inputs.pre_mix, np.eye(4, dtype=np.float32)[np.zeros(16, int)])
