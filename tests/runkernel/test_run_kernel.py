"""hc run-kernel on the CPU: every input path against float64, and bad input."""

import json

import numpy as np
import pytest

pytest.importorskip("torch")

from ckpt_tools import tiny  # noqa: E402
from conftest import run_hc  # noqa: E402
from f64_ref import split_sinkhorn_f64  # noqa: E402

TOL = 2e-6


def check_against_f64(doc, mixes, hc=4, iters=20, eps=1e-6):
    scale = np.array(doc["params"]["hc_scale"], dtype=np.float32)
    base = np.array(doc["params"]["hc_base"], dtype=np.float32)
    pre, post, comb = split_sinkhorn_f64(np.asarray(mixes, np.float32), scale, base, hc, iters, eps)
    assert doc["tokens"] == pre.shape[0]
    for key, want in (("pre", pre), ("post", post), ("comb", comb)):
        got = np.array(doc[key], dtype=np.float64)
        assert got.shape == want.shape, key
        assert np.abs(got - want).max() <= TOL, (key, np.abs(got - want).max())


def test_default_sample_matches_float64():
    r = run_hc("run-kernel", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert (doc["impl"], doc["device"]) == ("torch", "cpu") and "no CUDA device" in doc["reason"]
    from hccli.runkernel.inputs import sample_mixes

    check_against_f64(doc, sample_mixes(4).mixes)
    assert doc["tokens"] == 4 and "bundled sample" in doc["input"]
    assert max(max(row) for tok in doc["comb"] for row in tok) > 0.5  # non-trivial: mass on the diagonal


def test_human_output_says_what_ran():
    r = run_hc("run-kernel", "--limit", "1")
    assert r.exit_code == 0
    for words in ("torch on cpu (CPU)", "token 0: comb", "row sum", "col sum", "pre  [", "post [",
                  "largest |row sum - 1|", "3 more tokens"):
        assert words in r.stdout, words


@pytest.mark.parametrize("tokens, seed", [(1, 0), (7, 3), (1000, 11)])
def test_random_mixes_match_float64(tokens, seed):
    doc = run_hc("run-kernel", "--tokens", tokens, "--seed", seed, "--json").json()
    from hccli.runkernel.inputs import random_mixes

    check_against_f64(doc, random_mixes(tokens, seed, 4).mixes)


@pytest.mark.parametrize("suffix", [".npy", ".json", ".safetensors"])
def test_mixes_from_a_file(tmp_path, suffix):
    rng = np.random.default_rng(5)
    mixes = (rng.standard_normal((2, 3, 24)) * 3).astype(np.float32)  # leading dims flatten row-major
    f = tmp_path / f"m{suffix}"
    if suffix == ".npy":
        np.save(f, mixes)
    elif suffix == ".json":
        f.write_text(json.dumps(mixes.tolist()))
    else:
        from safetensors.numpy import save_file

        save_file({"mixes": mixes}, str(f))
    doc = run_hc("run-kernel", "--mixes", f, "--json").json()
    assert doc["tokens"] == 6
    check_against_f64(doc, mixes.reshape(6, 24))


def test_base_and_scale_from_a_checkpoint(tmp_path):
    ck = tiny(tmp_path / "ck")
    doc = run_hc("run-kernel", "--checkpoint", ck, "--layers", 3, "--site", "ffn", "--tokens", 9, "--json").json()
    insp = run_hc("inspect", ck, "--json").json()
    site = next(e for e in insp["hc"] if e["layer"] == 3 and e["site"] == "ffn")
    assert doc["params"]["hc_base"] == site["base"] and doc["params"]["hc_scale"] == site["scale"]
    assert "config" in doc["params"]["origin"]
    from hccli.runkernel.inputs import random_mixes

    check_against_f64(doc, random_mixes(9, 0, 4).mixes)


def test_checkpoint_without_config_uses_shapes_and_defaults(tmp_path):
    ck = tiny(tmp_path / "ck")
    (ck / "config.json").unlink()
    doc = run_hc("run-kernel", "--checkpoint", ck, "--layers", 8, "--json").json()  # a DSpark stage
    assert "shapes" in doc["params"]["origin"] and doc["params"]["sinkhorn_iters"] == 20


def test_hidden_state_runs_the_whole_pre_stage(tmp_path):
    ck = tiny(tmp_path / "ck")
    doc = run_hc("run-kernel", "--checkpoint", ck, "--layers", 2, "--hidden", "--tokens", 3, "--json").json()
    assert doc["tokens"] == 3 and "hc_attn_fn" in doc["input"] and "norm_eps 1e-20" in doc["input"]
    # recompute the mixes by hand from the checkpoint's hc_fn and the same seeded hidden state
    from safetensors import safe_open

    index = json.loads((ck / "model.safetensors.index.json").read_text())["weight_map"]
    with safe_open(str(ck / index["layers.2.hc_attn_fn"]), framework="numpy") as f:
        fn = f.get_tensor("layers.2.hc_attn_fn").astype(np.float64)
    h = np.random.default_rng(0).standard_normal((3, 4, 64), dtype=np.float32).reshape(3, -1).astype(np.float64)
    mixes = (h @ fn.T) / np.sqrt((h * h).mean(-1, keepdims=True) + 1e-20)
    check_against_f64(doc, mixes.astype(np.float32))


def test_hidden_random_without_checkpoint():
    doc = run_hc("run-kernel", "--hidden", "--tokens", 5, "--dim", 32, "--json").json()
    assert doc["tokens"] == 5 and "5 tokens x 4 streams x 32" in doc["input"]


def test_nan_tokens_are_flagged_not_fatal(tmp_path):
    m = np.zeros((3, 24), np.float32)
    m[1, 5] = np.nan
    np.save(tmp_path / "m.npy", m)
    r = run_hc("run-kernel", "--mixes", tmp_path / "m.npy")
    assert r.exit_code == 0 and "1 token with NaN/Inf in its mixes" in r.stdout
    doc = run_hc("run-kernel", "--mixes", tmp_path / "m.npy", "--json").json()
    assert doc["nonfinite_tokens"] == [1]
    assert np.isfinite(np.array(doc["comb"][0])).all()


def test_save_golden_vectors(tmp_path):
    out = tmp_path / "golden.safetensors"
    r = run_hc("run-kernel", "--tokens", 6, "--save", out, "--json")
    assert r.exit_code == 0
    from safetensors import safe_open

    with safe_open(str(out), framework="numpy") as f:
        meta = f.metadata()
        got = {k: f.get_tensor(k) for k in f.keys()}
    assert set(got) == {"mixes", "hc_scale", "hc_base", "pre", "post", "comb"}
    assert got["comb"].shape == (6, 4, 4) and meta["impl"] == "torch" and meta["sinkhorn_iters"] == "20"
    assert np.array_equal(got["comb"], np.array(r.json()["comb"], dtype=np.float32))
    again = run_hc("run-kernel", "--save", out)
    assert again.exit_code == 2 and "exists" in again.stderr


@pytest.mark.parametrize("make, args, words", [
    (lambda p: np.save(p / "m.npy", np.zeros((2, 23), np.float32)), ["--mixes", "{p}/m.npy"], "expected [..., 24]"),
    (lambda p: np.save(p / "m.npy", np.zeros((2, 24), np.int32)), ["--mixes", "{p}/m.npy"], "float dtype"),
    (None, ["--mixes", "{p}/nope.npy"], "nope.npy"),
    (None, ["--impl", "tilelang"], "CUDA GPU"),
    (None, ["--impl", "fastest"], "unknown"),
    (None, ["--layers", "3"], "needs --checkpoint"),
    (None, ["--checkpoint", "{p}/ck", "--layers", "x"], "--layers 'x': 'x' is not a layer"),  # as inspect's
    (None, ["--checkpoint", "{p}/ck", "--layers", "2-3"], "--layers '2-3': expected one layer"),
    (None, ["--site", "head", "--checkpoint", "{p}/ck", "--layers", "1"], "no Sinkhorn"),
    (None, ["--checkpoint", "{p}/ck", "--layers", "30"], "--layers 30: this model has layers"),
    (None, ["--checkpoint", "{p}/ck"], "--layers"),
    (None, ["--save", "{p}/ck/out.safetensors", "--checkpoint", "{p}/ck", "--layers", "1"], "never writes there"),
    (lambda p: np.save(p / "m.npy", np.zeros((2, 24), np.float32)), ["--tokens", "3", "--mixes", "{p}/m.npy"],
     "give one"),
    (None, ["--iters", "0"], "at least 1"),
    (None, ["--dim", "8"], "give it with --hidden"),
])
def test_bad_input_one_line_exit_2(tmp_path, make, args, words):
    tiny(tmp_path / "ck")
    if make:
        make(tmp_path)
    before = sorted(p.name for p in (tmp_path / "ck").iterdir())
    r = run_hc("run-kernel", *[a.format(p=tmp_path) for a in args])
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == before


def test_help_shows_the_option_text_whole(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # one line an option: rich would take [tokens, hc, dim] for markup
    r = run_hc("run-kernel", "--help")
    assert r.exit_code == 0
    assert "hidden state [tokens, hc, dim]" in r.stdout and "block (the published reference kernel" in r.stdout
    assert "seed" not in r.stdout.replace("--seed", "").replace("Seed of", "")
