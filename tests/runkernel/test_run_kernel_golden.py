"""Golden vectors read back: `hc run-kernel --save` then `--compare` (CPU, torch reference)."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

pytest.importorskip("torch")

from conftest import run_hc  # noqa: E402

from hccli.runkernel.golden import FORMAT, TENSORS  # noqa: E402


@pytest.fixture
def golden(tmp_path):
    path = tmp_path / "golden.safetensors"
    r = run_hc("run-kernel", "--tokens", 37, "--seed", 5, "--iters", 9, "--eps", "1e-5", "--save", path)
    assert r.exit_code == 0, r.stderr
    return path


def _rewrite(src, dst, *, tensors=None, meta=None):
    """Copy a golden file with some tensors or metadata replaced (safetensors' own writer)."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    with safe_open(str(src), framework="numpy") as f:
        got = {k: f.get_tensor(k) for k in f.keys()}
        m = dict(f.metadata())
    got.update(tensors or {})
    for k, v in (meta or {}).items():
        if v is None:
            m.pop(k, None)
        else:
            m[k] = v
    save_file(got, str(dst), metadata=m)
    return dst


def test_save_writes_the_documented_format(golden):
    from safetensors import safe_open

    with safe_open(str(golden), framework="numpy") as f:
        meta = f.metadata()
        shapes = {k: f.get_tensor(k).shape for k in f.keys()}
        dtypes = {str(f.get_tensor(k).dtype) for k in f.keys()}
    assert meta["format"] == FORMAT and meta["hc_mult"] == "4" and meta["sinkhorn_iters"] == "9"
    assert float(meta["eps"]) == 1e-5 and meta["impl"] == "torch"
    assert shapes == {"mixes": (37, 24), "hc_scale": (3,), "hc_base": (24,), "pre": (37, 4), "post": (37, 4),
                      "comb": (37, 4, 4)} and set(shapes) == set(TENSORS)
    assert dtypes == {"float32"}


def test_save_then_compare_is_clean(golden):
    r = run_hc("run-kernel", "--compare", golden, "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    doc = r.json()
    assert doc["ok"] and doc["impl"] == "torch" and doc["tokens"] == 37
    assert (doc["hc_mult"], doc["sinkhorn_iters"], doc["eps"]) == (4, 9, 1e-5)  # parameters from the file
    assert set(doc["outputs"]) == {"pre", "post", "comb"}
    for out in doc["outputs"].values():
        assert out == {"max_abs_diff": 0.0, "differing": 0, "beyond_atol": 0}
    human = run_hc("run-kernel", "--compare", golden)
    assert human.exit_code == 0 and "equal within --atol" in human.stdout and "comb" in human.stdout


def test_a_perturbed_file_exits_1_and_says_where(golden, tmp_path):
    from safetensors import safe_open

    with safe_open(str(golden), framework="numpy") as f:
        comb = f.get_tensor("comb").copy()
    kept = comb[30, 0, 0]
    comb[3, 1, 2] += 1e-3
    comb[30, 0, 0] = np.nan
    bad = _rewrite(golden, tmp_path / "bad.safetensors", tensors={"comb": comb})
    r = run_hc("run-kernel", "--compare", bad, "--json")
    assert r.exit_code == 1, r.stderr
    doc = r.json()
    assert not doc["ok"]
    assert doc["outputs"]["comb"]["differing"] == 2 and doc["outputs"]["comb"]["beyond_atol"] == 2
    assert doc["outputs"]["comb"]["max_abs_diff"] == pytest.approx(1e-3, rel=1e-3)
    assert doc["outputs"]["pre"]["differing"] == 0
    # within a tolerance the finite difference passes; the lone NaN never does
    r = run_hc("run-kernel", "--compare", bad, "--atol", "2e-3", "--json")
    assert r.exit_code == 1 and r.json()["outputs"]["comb"]["beyond_atol"] == 1
    comb[30, 0, 0] = kept
    only_finite = _rewrite(golden, tmp_path / "f.safetensors", tensors={"comb": comb})
    assert run_hc("run-kernel", "--compare", only_finite, "--atol", "2e-3").exit_code == 0
    human = run_hc("run-kernel", "--compare", bad)
    assert human.exit_code == 1 and "differs beyond --atol" in human.stdout


def test_changed_parameters_in_the_metadata_change_the_rerun(golden, tmp_path):
    other = _rewrite(golden, tmp_path / "iters.safetensors", meta={"sinkhorn_iters": "20"})
    r = run_hc("run-kernel", "--compare", other, "--json")
    assert r.exit_code == 1 and r.json()["sinkhorn_iters"] == 20


@pytest.mark.parametrize("change, words", [
    ({"meta": {"hc_mult": None}}, "metadata 'hc_mult' is missing"),
    ({"meta": {"hc_mult": "four"}}, "metadata 'hc_mult'"),
    ({"meta": {"hc_mult": "100"}}, "hc_mult 100"),
    ({"meta": {"sinkhorn_iters": "0"}}, "sinkhorn_iters"),
    ({"meta": {"eps": "-1"}}, "metadata 'eps'"),
    ({"meta": {"format": "something-else/9"}}, "metadata 'format'"),
    ({"tensors": {"comb": np.zeros((36, 4, 4), np.float32)}}, "tensor `comb` has shape [36, 4, 4]"),
    ({"tensors": {"hc_base": np.zeros((23,), np.float32)}}, "tensor `hc_base`"),
    ({"tensors": {"pre": np.zeros((37, 4), np.int32)}}, "tensor `pre` has dtype I32"),
])
def test_ill_formed_files_exit_2(golden, tmp_path, change, words):
    bad = _rewrite(golden, tmp_path / "bad.safetensors", **change)
    r = run_hc("run-kernel", "--compare", bad)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_unreadable_and_missing_files_exit_2(golden, tmp_path):
    missing = run_hc("run-kernel", "--compare", tmp_path / "nope.safetensors")
    assert missing.exit_code == 2 and "no such file" in missing.stderr
    raw = golden.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(raw[: 8 + n + 10])
    r = run_hc("run-kernel", "--compare", cut)
    assert r.exit_code == 2 and "cut.safetensors" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    no_mixes = tmp_path / "no_mixes.safetensors"
    from safetensors.numpy import save_file

    save_file({"pre": np.zeros((1, 4), np.float32)}, str(no_mixes), metadata={"hc_mult": "4"})
    r = run_hc("run-kernel", "--compare", no_mixes)
    assert r.exit_code == 2 and "no tensor `mixes`" in r.stderr or "metadata" in r.stderr


def test_compare_refuses_input_options(golden):
    r = run_hc("run-kernel", "--compare", golden, "--tokens", 4, "--iters", 3)
    assert r.exit_code == 2 and "drop --tokens, --iters" in r.stderr


def test_the_readme_documents_every_tensor_and_key():
    from conftest import ROOT

    page = (ROOT / "docs" / "commands" / "run-kernel.md").read_text()
    section = page.split("\n## Golden vectors", 1)[1].split("\n## ", 1)[0]
    for name in TENSORS + ("format", "hc_mult", "sinkhorn_iters", "eps", FORMAT):
        assert f"`{name}`" in section, name
    assert json.dumps(FORMAT)[1:-1] in section
