"""hc bench without a GPU: the clear message, the CPU mode that times torch, its JSON."""

import pytest

torch = pytest.importorskip("torch")

from hccli.kernels.bench import ALL_IMPLS, NO_GPU, bytes_per_token  # noqa: E402

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="tests the behaviour without a GPU")

ROW_KEYS = {"impl", "tokens", "ms", "ms_min", "calls", "samples", "tokens_per_s", "gbps", "pct_copy", "speedup",
            "max_diff", "differing"}
DOC_KEYS = {"mode", "device", "device_name", "driver", "versions", "date", "hc_mult", "sinkhorn_iters", "eps",
            "bytes_per_token", "copy_gbps", "reference", "statistic", "rows", "skipped"}


def test_bytes_per_token():
    # mixes read (24) + pre (4) + post (4) + comb (16) written, 4 bytes each
    assert bytes_per_token(4) == 192
    assert bytes_per_token(2) == 4 * (8 + 4 + 4)


@no_gpu
def test_without_a_gpu_the_message_is_one_clear_line(hc):
    r = hc("bench")
    assert r.exit_code == 2
    assert r.stderr.strip() == f"hc: error: {NO_GPU}"


def test_cpu_mode_times_torch_and_reports_json(hc):
    r = hc("bench", "--device", "cpu", "--tokens", "3", "--tokens", "64", "--reps", "2", "--warmup", "1",
           "--iters", "5", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert set(doc) == DOC_KEYS
    assert doc["mode"] == "cpu" and doc["device"] == "cpu" and doc["driver"] is None
    assert doc["hc_mult"] == 4 and doc["sinkhorn_iters"] == 5 and doc["bytes_per_token"] == 192
    assert doc["copy_gbps"] > 0 and doc["versions"]["torch"] == torch.__version__
    assert set(doc["skipped"]) == {"reference", "exact", "fast"}
    assert all("CUDA GPU" in why for why in doc["skipped"].values())
    rows = doc["rows"]
    assert [(r["impl"], r["tokens"]) for r in rows] == [("torch", 3), ("torch", 64)]
    for row in rows:
        assert set(row) == ROW_KEYS
        assert row["ms"] > 0 and row["samples"] == 2 and row["calls"] >= 1
        assert row["tokens_per_s"] == pytest.approx(row["tokens"] / (row["ms"] * 1e-3))
        assert row["gbps"] == pytest.approx(row["tokens"] * 192 / (row["ms"] * 1e-3) / 1e9)
        assert row["pct_copy"] == pytest.approx(100 * row["gbps"] / doc["copy_gbps"])
        # torch is the reference on the CPU: speed-up 1, no difference with itself
        assert row["speedup"] == 1.0 and row["differing"] == 0
        assert set(row["max_diff"]) == {"pre", "post", "comb"} and max(row["max_diff"].values()) == 0.0


def test_cpu_mode_table(hc):
    r = hc("bench", "--device", "cpu", "--tokens", "8", "--reps", "1", "--warmup", "0", "--iters", "2")
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    assert "copy bandwidth" in out and "torch" in out and "tokens/s" in out
    assert "exact: not timed (needs a CUDA GPU)" in out


@pytest.mark.parametrize("args,needle", [
    (["--impl", "fastest"], "unknown to hc bench"),
    (["--device", "meta"], "not supported"),
    (["--eps", "-1"], "eps must be"),
])
def test_bad_options_are_one_line_errors(hc, args, needle):
    r = hc("bench", "--device", "cpu", *args) if "--device" not in args else hc("bench", *args)
    assert r.exit_code == 2
    assert needle in r.stderr and r.stderr.count("\n") == 1


def test_all_impls_are_named():
    assert ALL_IMPLS == ("reference", "torch", "exact", "fast")
