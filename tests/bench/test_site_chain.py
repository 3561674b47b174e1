"""hc bench --op site-chain and --peers without a GPU: the refusals, hostile peer folders, the render, and
the saved peers' kernels built for sm_90 (where the peer files are at hand)."""

import os
from pathlib import Path

import pytest

from hccli.base.errors import HcError

ROOT = Path(__file__).resolve().parents[2]
# the saved engines' files: .device/peers of the checkout (ignored by git, so absent in CI); HC_PEERS names another
PEERS = Path(os.environ.get("HC_PEERS", ROOT / ".device" / "peers"))


def test_site_chain_on_the_cpu_is_refused_in_one_line(hc):
    r = hc("bench", "--op", "site-chain", "--device", "cpu")
    assert r.exit_code == 2
    assert r.stderr.strip() == "hc: error: hc bench --op site-chain times GPU kernels, and device cpu was asked for"


@pytest.mark.parametrize("args,needle", [
    (["--op", "site-chain", "--impl", "fastest"], "implementation 'fastest' is unknown to hc bench --op site-chain"),
    (["--op", "site-chain", "--host"], "--host times one eager call of site-pre / site-write"),
    (["--peers", "."], "--peers loads the serving engines' site kernels, for --op site-pre"),
    (["--op", "site-chain", "--peers", "no-such-dir"], "--peers 'no-such-dir': expected a directory"),
])
def test_chain_and_peers_options_are_one_line_errors(hc, args, needle):
    r = hc("bench", *args)
    assert r.exit_code == 2
    assert needle in r.stderr and r.stderr.count("\n") == 1


def test_a_peers_link_is_refused(tmp_path, hc):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    r = hc("bench", "--op", "site-pre", "--peers", str(tmp_path / "link"))
    assert r.exit_code == 2 and "a link" in r.stderr and r.stderr.count("\n") == 1


def test_hostile_peer_folders_are_skipped_with_one_line_each(tmp_path):
    from hccli.bench import peers as P

    assert P.load(None, (P.VLLM, P.SGLANG))[1] == {
        e: "no --peers DIR given (the engines' kernel files are loaded from there)" for e in (P.VLLM, P.SGLANG)}
    got, skipped = P.load(tmp_path, (P.VLLM, P.SGLANG))  # an empty folder
    assert got == {} and skipped[P.VLLM] == f"no kernel files under {tmp_path / 'vllm'}"
    v = tmp_path / "vllm"
    v.mkdir()
    (tmp_path / "elsewhere.py").write_text("x = 1\n")
    (v / "tilelang.py").write_text("x = 1\n")
    (v / "tilelang_kernels.py").symlink_to(tmp_path / "elsewhere.py")  # a link is not read
    got, skipped = P.load(tmp_path, (P.VLLM,))
    assert got == {} and "tilelang_kernels.py: not there, or not a plain file" in skipped[P.VLLM]
    (v / "tilelang_kernels.py").unlink()
    with open(v / "tilelang_kernels.py", "wb") as f:  # sparse: larger than any kernel file
        f.truncate(P.MAX_PEER_FILE + 1)
    got, skipped = P.load(tmp_path, (P.VLLM,))
    assert got == {} and f"more than a kernel file's {P.MAX_PEER_FILE:,}" in skipped[P.VLLM]
    for why in skipped.values():
        assert "\n" not in why


def test_peer_code_that_fails_is_skipped_and_leaves_no_module(tmp_path):
    pytest.importorskip("tilelang")
    import sys

    from hccli.bench import peers as P

    v = tmp_path / "vllm"
    v.mkdir()
    (v / "tilelang_kernels.py").write_text("raise RuntimeError('their import failed\\nsecond line')\n")
    (v / "tilelang.py").write_text("x = 1\n")
    got, skipped = P.load(tmp_path, (P.VLLM,))
    assert got == {} and skipped[P.VLLM] == "vllm's files do not load (RuntimeError: their import failed)"
    assert "vllm.model_executor.kernels.mhc.tilelang_kernels" not in sys.modules


def test_chain_render_shows_rows_ratios_and_what_was_skipped():
    from rich.console import Console

    from hccli.bench.op import Machine
    from hccli.bench.site_chain import ChainBenchResult, ChainBenchRow
    from hccli.cli.render import bench_chain

    rows = (ChainBenchRow("site_write+site_pre", "own", 8192, 0.5, 0.49, 10, 15, 16.4e6, 1700.0, 41.0, 1.0,
                          {"streams": 0.0078, "post": 2e-7}),
            ChainBenchRow("vllm", "own", 8192, 1.0, 0.99, 10, 15, 8.2e6, 850.0, 20.5, 0.5,
                          {"streams": 0.0078, "post": float("nan")}))
    result = ChainBenchResult("site-chain", Machine("cuda:0", "NVIDIA H200", "580", {"torch": "2"}, "now"), 4, 5120,
                              "bfloat16", 20, 1e-6, 1e-20, 102568, 4191.0, "median", rows,
                              {"sglang": "no kernel files under x"})
    console = Console(record=True, width=250)
    for r in bench_chain.renderables(result):
        console.print(r)
    text = console.export_text()
    assert "16.4 M" in text and "0.50" in text and "post NaN" in text and "streams 0.0078" in text
    assert "sglang: not timed (no kernel files under x)" in text


@pytest.mark.skipif(not (PEERS / "vllm").is_dir(), reason=f"no saved peer files at {PEERS} (they are not in git: "
                    "CI has none; the device run and a checkout with .device/peers do)")
def test_the_saved_vllm_kernels_build_for_sm90():
    pytest.importorskip("tilelang")
    from hccli.bench import peers as P

    got, skipped = P.load(PEERS, (P.VLLM,))
    assert P.VLLM in got, skipped
    peer = got[P.VLLM]
    assert peer.pre and peer.post and peer.fused
    built = P.build_sm90(peer, 5120, 1e-20, 1e-6, 20)
    names = {name for name, _ in built}
    assert {"mhc_pre_big_fuse_tilelang", "mhc_post_tilelang", "mhc_fused_tilelang", "hc_prenorm_gemm_tilelang",
            "hc_prenorm_gemm_block_m_tilelang"} <= names
    assert all(sm == 90 for _, sm in built), built


def test_unknown_engine_names_are_checked_before_anything_runs():
    from hccli.bench.requests import SiteBenchRequest
    from hccli.bench.site_chain import run_chain_bench

    with pytest.raises(HcError, match="expected some of site_write\\+site_pre, tilekernels"):
        run_chain_bench(SiteBenchRequest("site-chain", impls=("nope",)))


def test_site_summary_prints_a_chain_document(tmp_path):
    import json
    import subprocess
    import sys

    from hccli.bench.op import Machine
    from hccli.bench.site_chain import ChainBenchResult, ChainBenchRow
    from hccli.cli.output import json_document

    row = ChainBenchRow("vllm", "own", 8192, 1.0, 0.99, 10, 15, 8.2e6, 850.0, 20.5, 0.5, {"streams": 0.0078})
    doc = json_document(ChainBenchResult("site-chain", Machine("cuda:0", "H200", "580", {}, "now"), 4, 5120,
                                         "bfloat16", 20, 1e-6, 1e-20, 102568, 4191.0, "median", (row,), {}), "bench")
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(doc))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "site_summary.py"), str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("site-chain dim 5120 bfloat16, copy 4191 GB/s, 102568 B/token")
    assert lines[1].split() == ["8192", "vllm", "own", "1000.0us", "8.20M", "20.5%", "streams=0.0078", "x", "ours",
                                "0.50"]
