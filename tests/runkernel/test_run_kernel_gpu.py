"""hc run-kernel on a GPU: auto picks the exact kernel and it agrees with float64."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from conftest import run_hc  # noqa: E402
from f64_ref import split_sinkhorn_f64  # noqa: E402


@pytest.mark.parametrize("args", [[], ["--tokens", "4096", "--seed", "7"]])
def test_auto_runs_the_exact_kernel_on_the_gpu(args):
    r = run_hc("run-kernel", *args, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert doc["impl"] == "exact" and doc["device"].startswith("cuda")
    if args:
        from hccli.runkernel.inputs import random_mixes

        mixes = random_mixes(4096, 7, 4).mixes
    else:
        from hccli.runkernel.inputs import sample_mixes

        mixes = sample_mixes(4).mixes
    scale = np.array(doc["params"]["hc_scale"], np.float32)
    base = np.array(doc["params"]["hc_base"], np.float32)
    want = split_sinkhorn_f64(mixes, scale, base, 4)
    for key, w in zip(("pre", "post", "comb"), want):
        assert np.abs(np.array(doc[key]) - w).max() <= 2e-6, key


def test_block_equals_torch_reference_through_the_cli():
    a = run_hc("run-kernel", "--tokens", "1000", "--impl", "block", "--json").json()
    assert a["impl"] == "block"
    b = run_hc("run-kernel", "--tokens", "1000", "--impl", "torch", "--json").json()
    assert b["device"].startswith("cuda")
    for key in ("pre", "post", "comb"):
        assert np.abs(np.array(a[key]) - np.array(b[key])).max() <= 1e-6, key


def test_exact_is_bit_identical_to_the_block_kernel_through_the_cli():
    a = run_hc("run-kernel", "--tokens", "5000", "--seed", "3", "--impl", "exact", "--json").json()
    b = run_hc("run-kernel", "--tokens", "5000", "--seed", "3", "--impl", "tilelang", "--json").json()  # old spelling
    assert b["impl"] == "block"
    for key in ("pre", "post", "comb"):
        assert np.array_equal(np.array(a[key], np.float32), np.array(b[key], np.float32)), key


def test_golden_vectors_of_one_kernel_compare_clean_on_another(tmp_path):
    golden = tmp_path / "g.safetensors"
    assert run_hc("run-kernel", "--tokens", "3000", "--impl", "exact", "--save", golden).exit_code == 0
    r = run_hc("run-kernel", "--compare", golden, "--impl", "block", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    doc = r.json()
    assert doc["impl"] == "block" and all(o["differing"] == 0 for o in doc["outputs"].values())
    r = run_hc("run-kernel", "--compare", golden, "--impl", "fast", "--atol", "1e-6", "--json")
    assert r.exit_code == 0 and max(o["max_abs_diff"] for o in r.json()["outputs"].values()) <= 1e-6
