"""hc bench without a GPU: the clear message, the CPU mode that times torch, its JSON."""

import pytest

torch = pytest.importorskip("torch")

from hccli.bench.op import NO_GPU, bytes_per_token  # noqa: E402

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="tests the behaviour without a GPU")

ROW_KEYS = {"impl", "tokens", "ms", "ms_min", "calls", "samples", "tokens_per_s", "gbps", "pct_copy", "speedup",
            "max_diff", "differing"}
# the envelope's keys (bench judges nothing: no verdict), then the body's
DOC_KEYS = {"schema_version", "command", "exit_code", "warnings", "findings",
            "mode", "device", "device_name", "driver", "versions", "date", "hc_mult", "sinkhorn_iters", "eps",
            "bytes_per_token", "copy_gbps", "reference", "statistic", "rows", "skipped", "host"}


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
    assert set(doc["skipped"]) == {"block", "exact", "fast"}
    assert doc["host"] == []  # only with --host
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
    (["--device", "meta"], "--device 'meta': expected cpu, cuda or cuda:N"),  # refused as parsed
    (["--eps", "-1"], "--eps -1.0: expected a finite number >= 0"),
    (["--hc-mult", "65"], "--hc-mult 65: expected at least 1 and at most 64"),
    (["--impl", "tilelang", "--tokens", "0"], "--tokens 0: expected at least 1"),
])
def test_bad_options_are_one_line_errors(hc, args, needle):
    r = hc("bench", "--device", "cpu", *args) if "--device" not in args else hc("bench", *args)
    assert r.exit_code == 2
    assert needle in r.stderr and r.stderr.count("\n") == 1


def test_bench_names_the_kernels_as_run_kernel_does():
    # one name per kernel everywhere: what hc bench times is what --impl of run-kernel runs
    from hccli.kernels.registry import IMPL_NAMES, IMPLS, TIMED

    assert set(TIMED) == {n for n in IMPL_NAMES if IMPLS[n].module} == {"block", "torch", "exact", "fast"}


def test_host_time_on_the_cpu(hc):
    r = hc("bench", "--device", "cpu", "--tokens", "64", "--reps", "1", "--warmup", "0", "--iters", "2", "--host",
           "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    host = {(x["impl"], x["tokens"]): x for x in doc["host"]}
    assert set(host) == {("torch", 1), ("torch", 64), ("torch", 4096)}
    assert host[("torch", 64)]["gpu_ms"] == doc["rows"][0]["ms"] and host[("torch", 1)]["gpu_ms"] is None
    assert all(x["raw_us"] is None and x["call_us"] > 0 and x["alloc_us"] > 0 for x in host.values())
    table = hc("bench", "--device", "cpu", "--tokens", "64", "--reps", "1", "--warmup", "0", "--iters", "2", "--host")
    assert table.exit_code == 0 and "host time per call" in table.stdout


@pytest.mark.parametrize("impl", ["exact", "block", "fast"])
def test_nothing_to_time_is_the_line_run_kernel_gives(hc, impl):
    r = hc("bench", "--device", "cpu", "--impl", impl)
    assert r.exit_code == 2 and r.stdout == ""
    same = hc("run-kernel", "--device", "cpu", "--impl", impl)
    assert r.stderr == same.stderr and same.exit_code == 2 and r.stderr.count("\n") == 1
    assert "runs on CUDA devices only" in r.stderr


def test_both_results_open_with_the_machine_in_their_json_and_tables():
    # one Machine for the split op's and the site's results; their JSON keeps its flat keys in their places
    from rich.console import Console

    from hccli.cli.output import json_document
    from hccli.cli.render import bench as render_bench, bench_site as render_bench_site
    from hccli.bench.op import BenchResult, Machine
    from hccli.bench.site import SiteBenchResult

    m = Machine("cuda:0", "NVIDIA [bold]H200", "[580]", {"torch": "2", "cuda": "12", "tilelang": "0.1"}, "now")
    split = BenchResult("gpu", m, 4, 20, 1e-6, 192, 4000.0, "the torch reference", "median", (), {}, ())
    site = SiteBenchResult("site-pre", m, 4, 5120, "bfloat16", 20, 1e-6, 1e-20, 51280, 4191.0, "median", (), {})
    head = ["device", "device_name", "driver", "versions", "date"]
    envelope = ["schema_version", "command", "exit_code", "warnings", "findings"]  # (bench judges nothing)
    assert list(json_document(split, "bench")) == [
        *envelope, "mode", *head, "hc_mult", "sinkhorn_iters", "eps", "bytes_per_token", "copy_gbps", "reference",
        "statistic", "rows", "skipped", "host"]
    assert list(json_document(site, "bench")) == [
        *envelope, "op", *head, "hc_mult", "dim", "stream", "sinkhorn_iters", "eps", "norm_eps", "bytes_per_token",
        "copy_gbps", "statistic", "rows", "skipped", "host"]
    assert json_document(split, "bench")["versions"] == m.versions and json_document(site, "bench")["rows"] == []
    for renderables in (render_bench.renderables(split), render_bench_site.renderables(site)):
        console = Console(record=True, width=200)
        console.print(next(iter(renderables)))
        assert console.export_text().strip() == ("NVIDIA [bold]H200 (cuda:0, driver [580]); torch 2, CUDA 12, "
                                                 "tilelang 0.1")
