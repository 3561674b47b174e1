"""Every script under benchmarks/ runs here in its quick mode, so that none can rot unseen.

Each runs as a fresh interpreter (sys.executable) with pytest made unimportable: a benchmark must
run where only the project is installed. The assertions are on what it printed or wrote: the rows
it should have, ratios that agree with its own medians, positive times. Its figures themselves
mean nothing in a quick mode and are not judged. GPU-only scripts are checked here as far as a
machine without CUDA allows (imports, arguments, the one-line refusal, a summary of committed
results); their quick runs are marked gpu and skipped without a CUDA device.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"
# the newest device results of each kind: what site_summary.py is given
SITE_PRE = RESULTS / "2026-12-02-h200-r20-site-pre.json"
SITE_WRITE = RESULTS / "2026-12-02-h200-r17-site-write.json"

# Runs a script as `python SCRIPT ARGS` would (its folder first on sys.path), but with pytest unimportable.
_RUNNER = """\
import os, runpy, sys
sys.modules["pytest"] = None
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
"""

# every file under benchmarks/ and the test here that runs it
TESTED = {
    "bench_inspect.py": "test_bench_inspect_quick",
    "bench_remote.py": "test_bench_remote_quick",
    "bench_values.py": "test_bench_values_quick",
    "compare_docs.py": "test_compare_docs_quick",
    "kernel_seed_check.py": "test_kernel_seed_check_without_cuda",
    "phantom.py": "test_bench_inspect_quick",  # the helper bench_inspect and profile_inspect import
    "plot_phantom.py": "test_plot_phantom_quick",
    "profile_inspect.py": "test_profile_inspect_quick",
    "site_device.sh": "test_site_device_sh_prints_the_summary",
    "site_explore.py": "test_site_explore_without_cuda",
    "site_ncu.py": "test_site_ncu_without_cuda",
    "site_summary.py": "test_site_summary_of_committed_results",
    "site_warm.py": "test_site_warm_quick_builds_one_of_each_kind",
    "startup.py": "test_startup_quick",
    "verify_walk.py": "test_verify_walk_quick",
    "NOTES.md": "test_notes_name_only_scripts_that_exist",
}
# scripts NOTES.md names that were taken out again, and the commit that still has each
GONE = {"site_cluster.py": "fb1ca6d"}


def run(name: str, *args: str, timeout: float = 120, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-c", _RUNNER, str(BENCH / name), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (the kernel extra)")


def cuda_available() -> bool:
    torch = pytest.importorskip("torch")
    return torch.cuda.is_available()


def git_history() -> bool:
    """Whether this is a git checkout with its whole history (CI's may be shallow)."""
    if shutil.which("git") is None:
        return False
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True)
    return shallow.returncode == 0 and shallow.stdout.strip() == "false"


def test_every_benchmark_has_its_test():
    assert sorted(p.name for p in BENCH.iterdir() if p.is_file()) == sorted(TESTED)
    assert set(TESTED.values()) <= set(globals())


def test_results_hold_figures_as_text_only():
    files = sorted(p for p in RESULTS.rglob("*") if p.is_file())
    assert files
    assert {p.suffix for p in files} <= {".json", ".txt"}, [p.name for p in files if p.suffix not in (".json", ".txt")]
    for p in files:
        if p.suffix == ".json":
            json.loads(p.read_text())


def test_notes_name_only_scripts_that_exist():
    notes = (BENCH / "NOTES.md").read_text()
    named = set(re.findall(r"benchmarks/([\w.]+\.(?:py|sh))", notes))
    assert named and named <= set(TESTED) | set(GONE), named - set(TESTED) - set(GONE)
    for name, commit in GONE.items():
        assert f"is in commit {commit}" in notes and name not in TESTED
        if git_history():
            has = subprocess.run(["git", "cat-file", "-e", f"{commit}:benchmarks/{name}"], cwd=ROOT,
                                 capture_output=True)
            assert has.returncode == 0, has.stderr
    for result in set(re.findall(r"results/([\w.-]+\.(?:json|txt))", notes)):
        assert (RESULTS / result).is_file(), result


# --- the CPU benchmarks ---


def test_startup_quick(tmp_path):
    out = tmp_path / "startup.json"
    printed = ok(run("startup.py", "--quick", "--json", str(out)))
    doc = json.loads(out.read_text())
    assert doc["quick"] is True
    rows = {r["command"]: r for r in doc["rows"]}
    assert list(rows) == ["import typer, rich.console", "rich tables alone (floor)", "count-params (default)",
                          "count-params --json", "count-params selection"]
    base = rows["import typer, rich.console"]
    for name, r in rows.items():
        assert r["runs"] == 1 and r["median_s"] > 0 and r["cpu_median_s"] > 0
        assert r["ratio"] == pytest.approx(r["median_s"] / base["median_s"])
        assert r["best_ratio"] == pytest.approx(r["best_s"] / base["best_s"])
        assert r["cpu_ratio"] == pytest.approx(r["cpu_median_s"] / base["cpu_median_s"])
        assert r["goal"] == (None if name in ("import typer, rich.console", "rich tables alone (floor)")
                             else 1.2)  # issue 37's
        assert name in printed
    # the floor prints count-params' own rows, taken from its --json in the same run, and computes nothing
    for label in ("0-1", "2-7", "20-39", "491,547", "39,323,760"):
        assert label in doc["floor_code"]
    assert "hccli" not in doc["floor_code"] and "rich's tables alone:" in printed


def test_bench_inspect_quick(tmp_path):
    out = tmp_path / "inspect.json"
    printed = ok(run("bench_inspect.py", "--quick", "--json", str(out)))
    doc = json.loads(out.read_text())
    assert doc["quick"] is True and doc["runs"] == 1 and doc["shards"] == 48  # the full-scale phantom
    rows = {r["command"]: r for r in doc["rows"]}
    assert list(rows) == ["floor", "peer", "--json", "--verify --json", "rich"]
    # floor and peer read every header: the same tensor count, so both scripts saw the whole phantom
    peer = rows["peer"]
    for name, r in rows.items():
        assert r["median_s"] > 0 and r["cpu_median_s"] > 0 and r["peak_rss_mb"] > 0 and len(r["runs"]) == 1
        assert r["ratio_to_peer"] == pytest.approx(r["median_s"] / peer["median_s"])
        assert r["ratio_to_floor"] == pytest.approx(r["median_s"] / rows["floor"]["median_s"])
    assert rows["--json"]["exit_code"] == 0 and rows["rich"]["exit_code"] == 0
    assert rows["--verify --json"]["exit_code"] in (0, 1)
    assert (rows["--json"]["must"], rows["--verify --json"]["must"], rows["rich"]["must"]) == (1.3, 2.2, 1.6)
    assert (rows["--json"]["goal"], rows["--verify --json"]["goal"], rows["rich"]["goal"]) == (1.0, 1.5, 1.2)
    assert "peak RSS of the hc commands" in printed and doc["old"] is None


def test_bench_inspect_quick_against_an_old_tree(tmp_path):
    # the A/B in one run: a copy of this checkout as the "old" tree, its three commands beside ours
    out = tmp_path / "inspect.json"
    printed = ok(run("bench_inspect.py", "--quick", "--old", str(ROOT), "--json", str(out)))
    doc = json.loads(out.read_text())
    rows = {r["command"]: r for r in doc["rows"]}
    assert list(rows) == ["floor", "peer", "--json", "--verify --json", "rich",
                          "old --json", "old --verify --json", "old rich"]
    for name in ("--json", "--verify --json", "rich"):
        assert rows[name]["ratio_to_old"] == pytest.approx(rows[name]["median_s"] / rows[f"old {name}"]["median_s"])
        assert rows[f"old {name}"]["exit_code"] == rows[name]["exit_code"]
        assert f"{name}: " in printed
    assert doc["old"] == str(ROOT)


def test_bench_values_quick(tmp_path):
    needs("torch")  # the peers' loops are torch's, as a user writes them
    out = tmp_path / "values.json"
    printed = ok(run("bench_values.py", "--quick", "--json", str(out)))
    doc = json.loads(out.read_text())
    assert doc["quick"] is True and doc["runs"] == 1 and doc["changed"].startswith("layers.0.attn")
    rows = {r["command"]: r for r in doc["rows"]}
    assert list(rows) == ["peer", "peer bytes", "diff", "stats peer", "stats"]
    # each command read the same bytes as its peer: the same tensors, whole (the script stops where
    # one of them missed the tensor that differs)
    assert rows["peer"]["gb_a_side"] == rows["peer bytes"]["gb_a_side"] == rows["diff"]["gb_a_side"] > 0
    assert rows["stats peer"]["gb_a_side"] == rows["stats"]["gb_a_side"] > 0
    for name, r in rows.items():
        peer = rows["stats peer" if name.startswith("stats") else "peer"]
        assert r["median_s"] > 0 and r["cpu_median_s"] > 0 and r["peak_rss_mb"] > 0 and len(r["runs"]) == 1
        assert r["gbps"] == pytest.approx(r["gb_a_side"] / r["median_s"])
        assert r["ratio_to_peer"] == pytest.approx(r["gbps"] / peer["gbps"])
        assert (r["loop_gbps"] is None) == (name in ("diff", "stats"))
    assert (rows["diff"]["must"], rows["diff"]["goal"]) == (1.0, 1.5)
    assert "peak RSS of the hc commands" in printed


def test_profile_inspect_quick(tmp_path):
    out = tmp_path / "profile.json"
    ok(run("profile_inspect.py", "--quick", "--json", str(out)))
    medians = json.loads(out.read_text())["median_s"]
    assert list(medians) == ["--json", "--verify --json", "rich"]
    source = (BENCH / "profile_inspect.py").read_text()
    steps = re.findall(r'^    \("hccli[\w.]+", "[\w.]+", "([^"]+)"\),$', source, re.M)
    assert len(steps) >= 10
    # every step the script wraps is called by at least one of its commands: none names a function
    # that inspect no longer calls
    called = set().union(*(set(m) for m in medians.values()))
    assert set(steps) <= called, set(steps) - called
    for name, m in medians.items():
        assert m["whole run (start-up included)"] > m["open (all of it)"] > m["  48 headers"] > 0
        assert ("verify (all of it)" in m) == (name == "--verify --json")
        assert ("JSON text" in m) == (name != "rich")
        assert ("rich rendering" in m) == (name == "rich")


def test_verify_walk_quick(tmp_path):
    out = tmp_path / "walk.json"
    printed = ok(run("verify_walk.py", "--quick", "--json", str(out)))
    walks = json.loads(out.read_text())["walks"]
    assert list(walks) == ["first calls", "every call", "verify room"]
    first, every, own = walks["first calls"], walks["every call"], walks["verify room"]
    # the damaged checkpoint: the config of another model and the gone shard are both found
    assert first["findings"] == every["findings"] > 100
    for w in walks.values():
        assert w["returns"] == w["stays"] - w["rooms"] >= w["relays"] >= 0
        assert sum(w["by_room"].values()) == w["stays"] == len(w["order"])
    assert every["stays"] > first["stays"] > own["stays"] > 0  # a loop's turns, then the other rooms, left out
    assert own["order"][0] == first["order"][0] == "hccli.checkpoint.verify.checks"  # verify()'s own room
    assert all(r.startswith("hccli.checkpoint.verify.") for r in own["order"])
    assert len(printed.splitlines()) == 3


def test_plot_phantom_quick(tmp_path):
    pytest.importorskip("matplotlib")
    figure = ROOT / "docs" / "hc-v41-flash.png"
    committed = figure.read_bytes() if figure.exists() else None
    out = tmp_path / "figure.png"
    printed = ok(run("plot_phantom.py", "--quick", "--out", str(out)))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "1 runs" in printed and "one run: no figure to compare with" in printed
    seconds = [float(s) for s in re.findall(r"^  hc inspect --json(?: --plot)?\s+([\d.]+) s$", printed, re.M)]
    assert len(seconds) == 2 and all(s > 0 for s in seconds)
    assert (figure.read_bytes() if figure.exists() else None) == committed  # quick never writes the figure


def test_compare_docs_quick():
    if shutil.which("git") is None or subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT,
                                                     capture_output=True).returncode != 0:
        pytest.skip("compare_docs needs a git checkout")
    printed = ok(run("compare_docs.py", "HEAD", "--against", "HEAD", "--quick"))
    assert printed.splitlines() == ["3 documents, 3 byte-identical; keys only in the new ones: none",
                                    "old values changed or gone: none"]


def test_compare_docs_tells_added_keys_from_changed_values():
    spec = importlib.util.spec_from_file_location("compare_docs", BENCH / "compare_docs.py")
    cd = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cd)
    old = {"a": 1, "rows": [{"x": 1}, {"x": 2}]}
    assert cd.keys({"a": 1, "b": 2, "rows": [{"x": 1, "y": 0}]}) - cd.keys(old) == {"/b", "/rows[]/y"}
    added = {"a": 1, "b": 2, "rows": [{"x": 1, "y": 0}, {"x": 2, "y": 0}]}
    assert cd.old_values(added, old) == old  # only keys added: every old value unchanged
    assert cd.old_values({"a": 1, "rows": [{"x": 1}, {"x": 3}]}, old) != old
    assert cd.old_values({"rows": [{"x": 1}, {"x": 2}]}, old) != old  # a key gone


def test_bench_remote_quick(tmp_path):
    out = tmp_path / "remote.json"
    printed = ok(run("bench_remote.py", "--quick", "--json", str(out)))
    doc = json.loads(out.read_text())
    assert doc["quick"] is True and doc["latency_s"] == 0.01
    cold, slow, cached = doc["rows"]
    assert [cold["run"], slow["run"], cached["run"]] == ["cold", "cold, 0.01 s latency per answer",
                                                         "second run (cache)"]
    assert cold["stored_bytes"] == slow["stored_bytes"] == cached["stored_bytes"] > 0
    for r in (cold, slow):  # each from an empty cache: the same ranges read
        assert r["seconds"] > 0 and r["cached_files"] == 0
        assert 0 < r["transferred_bytes"] < r["stored_bytes"]
        assert r["requests"] == cold["requests"] > 0 and r["range_requests"] > 0
    assert cached["requests"] == cached["transferred_bytes"] == 0 and cached["cached_files"] > 0
    assert len(printed.splitlines()) == 3


# --- the GPU benchmarks: what a machine without CUDA can check ---


def test_site_summary_of_committed_results():
    printed = ok(run("site_summary.py", str(SITE_PRE), str(SITE_WRITE)))
    docs = [json.loads(p.read_text()) for p in (SITE_PRE, SITE_WRITE)]
    lines = printed.splitlines()
    assert len(lines) == sum(1 + len(d["rows"]) + len(d.get("host", [])) for d in docs)
    assert lines[0].startswith("site-pre dim 5120 bfloat16, copy 4182 GB/s, 51280 B/token")
    # run 20's figure (NOTES.md): site_pre, delayed collapse, 8,192 tokens
    assert any(re.match(r"\s+8192 site_pre\s+delayed\s+[\d.]+us\s+66\.91M\s+82\.0% .* ident$", ln) for ln in lines)
    assert sum(ln.startswith("site-write dim 5120") for ln in lines) == 1


def test_site_summary_names_a_file_it_cannot_read(tmp_path):
    printed = ok(run("site_summary.py", str(tmp_path / "missing.json")))
    assert printed.startswith(f"{tmp_path / 'missing.json'}: ")


def test_site_device_sh_prints_the_summary(tmp_path):
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("needs bash")
    script = BENCH / "site_device.sh"
    assert subprocess.run([bash, "-n", str(script)]).returncode == 0
    text = script.read_text()
    named = re.findall(r"\b((?:benchmarks|tests)/[\w/]+\.py)\b", text)
    assert len(named) >= 5 and all((ROOT / p).is_file() for p in named), named
    # no stage: only the summary of what the stages would have left in $OUT (no nvidia-smi needed)
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(SITE_PRE, out / "pre.json")
    shutil.copy(SITE_WRITE, out / "write.json")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {**os.environ, "OUT": str(out), "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([bash, str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "site-pre dim 5120" in proc.stdout and "site-write dim 5120" in proc.stdout
    assert (out / "err.log").is_file()


def test_site_warm_quick_builds_one_of_each_kind():
    needs("tilelang")
    printed = ok(run("site_warm.py", "--quick", timeout=180))
    assert re.match(r"built 7 PrimFuncs, one of each kind \(PrimFunc\), compiled none, in [\d.]+ s$", printed.strip())


def refuses_without_cuda(name: str, what: str, *args: str) -> None:
    """Without CUDA the script imports what it runs, then says so in one line and exits 2."""
    if cuda_available():
        pytest.skip("tests the behaviour without a GPU")
    proc = run(name, *args)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr == f"{name[:-3]}: no CUDA device; {what}\n" and proc.stdout == ""


def test_kernel_seed_check_without_cuda():
    assert "--quick" in ok(run("kernel_seed_check.py", "--help"))
    refuses_without_cuda("kernel_seed_check.py", "this check runs on the GPU machine only", "--quick")


def test_site_explore_without_cuda():
    assert "--quick" in ok(run("site_explore.py", "--help"))
    refuses_without_cuda("site_explore.py", "this benchmark runs on the GPU machine only", "--quick")


def test_site_ncu_without_cuda():
    assert ok(run("site_ncu.py", "--help")).startswith("usage: site_ncu.py [-h]")
    refuses_without_cuda("site_ncu.py", "this runs on the GPU machine only")


# --- the GPU benchmarks' quick runs (the device machine) ---

@pytest.mark.gpu
def test_kernel_seed_check_quick(tmp_path):
    if not cuda_available():
        pytest.skip("needs a CUDA device")
    if not (ROOT / ".device" / "seed_kernel.py").is_file():
        pytest.skip("needs .device/seed_kernel.py, the transcribed published kernel (never in the project)")
    env_out = tmp_path
    proc = subprocess.run([sys.executable, str(BENCH / "kernel_seed_check.py"), "--quick"], cwd=ROOT,
                          env={**os.environ, "OUT": str(env_out), "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((env_out / "seed_check.json").read_text())
    assert doc["ok"] is True and doc["quick"] is True and doc["division_check"]["mismatches"] == 0
    assert len(doc["rows"]) == 5 and "BIT-IDENTICAL: all cases" in proc.stdout


@pytest.mark.gpu
def test_site_explore_quick(tmp_path):
    if not cuda_available():
        pytest.skip("needs a CUDA device")
    out = tmp_path / "explore.json"
    ok(run("site_explore.py", "--quick", "--json", str(out), timeout=600))
    doc = json.loads(out.read_text())
    assert doc["quick"] is True and doc["copy_gbps"] > 0
    proj = [r for r in doc["rows"] if "tiling" in r]
    assert [(r["tokens"], r["splits"], r["iters"]) for r in proj] == [(8192, 1, 20), (8192, 8, None), (8192, 1, 1)]
    for r in proj:
        assert "error" not in r and len(r["ms_rounds"]) == 1 and r["ms"] > 0 and r["mtok_s"] > 0
    assert all(proj[0]["identical"].values())  # the default against itself
    kernels = [r["kernel"] for r in doc["rows"] if "kernel" in r]
    assert kernels == ["finish (8 splits)", "collapse", "write"]
    assert all(r["ms"] > 0 for r in doc["rows"] if "kernel" in r)


@pytest.mark.gpu
def test_site_ncu_launches():
    if not cuda_available():
        pytest.skip("needs a CUDA device")
    assert "3 launches" in ok(run("site_ncu.py", timeout=600))
