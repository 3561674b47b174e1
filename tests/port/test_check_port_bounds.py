"""`hc check-port`'s work is bounded: the Sinkhorn iterations a golden may hold are one bound for
the writer (`run-site --save`, refused before the run) and the readers, and the iteration counts
tried as mistakes are a small set near the golden's own, never every count 1..N (a 30 KB golden
of 1,000 iterations took a minute)."""

from __future__ import annotations

import json
from itertools import combinations

import numpy as np
import pytest
from conftest import SAMPLES, run_hc_process
from safetensors import safe_open
from safetensors.numpy import save_file
from site_fixtures import make_golden, port_steps, write_port

from hccli.ops import site as S
from hccli.port.mistakes import FACTOR, catalogue, iteration_counts
from hccli.runsite.golden import MAX_GOLDEN_ITERS, read_golden

INF = json.loads((SAMPLES / "tiny-v4.1.json").read_text())


def _config(tmp_path, iters: int):
    path = tmp_path / "cfg" / f"config-{iters}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({**INF, "hc_sinkhorn_iters": iters}))
    return path


@pytest.mark.parametrize("n", [1, 2, 10, 20, 21, MAX_GOLDEN_ITERS])
def test_the_iteration_counts_tried_are_few_and_near(n):
    counts = iteration_counts(n)
    assert len(counts) <= 7 and n not in counts and min(counts) >= 1 and max(counts) <= max(20, 2 * n)
    assert {n - 1, n + 1, 2 * n, 10, 20} - {0, n} <= set(counts)
    keys = [m.key for m in catalogue(S.SiteParams("v4.1", 4, n, 1e-6, 1e-20)) if m.kind == "iters"]
    assert keys == [f"iters-{k}" for k in counts]


def test_the_golden_bound_is_the_writers_and_the_readers(hc, tmp_path, monkeypatch):
    from hccli.runsite import run as site_run

    over = tmp_path / "over.safetensors"
    monkeypatch.setattr(site_run, "run_chain", lambda *a, **k: pytest.fail("the run started"))
    r = hc("run-site", str(_config(tmp_path, MAX_GOLDEN_ITERS + 1)), "--tokens", "1", "--save", str(over))
    assert r.exit_code == 2 and r.stdout == "" and not over.exists()
    assert f"{MAX_GOLDEN_ITERS + 1:,} Sinkhorn iterations; a golden holds at most {MAX_GOLDEN_ITERS}" in r.stderr
    monkeypatch.undo()
    most = make_golden(_config(tmp_path, MAX_GOLDEN_ITERS), tmp_path / "most.safetensors", "--tokens", "1",
                       "--layers", "0", "--site", "attn")
    assert read_golden(most).params.iters == MAX_GOLDEN_ITERS
    assert hc("run-site", "--compare", str(most)).exit_code == 0
    # a golden edited to say 1,000 iterations (the config bound), and a port whose comb and
    # streams_out depart: refused as it is read, by both readers (a scan of every count took a minute)
    with safe_open(str(most), framework="numpy") as f:
        tensors, meta = {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata())
    hostile = tmp_path / "1000.safetensors"
    save_file(tensors, str(hostile), metadata={**meta, "sinkhorn_iters": "1000"})
    port = write_port(most, tmp_path / "port.safetensors", S.Variant(comb_transposed=False, softmax_axis=-2))
    said = f"metadata 'sinkhorn_iters' is '1000'; expected a decimal integer 1 to {MAX_GOLDEN_ITERS}"
    r = hc("run-site", "--compare", str(hostile))
    assert r.exit_code == 2 and said in r.stderr, r.stderr
    proc, _, _ = run_hc_process("check-port", port, "--golden", hostile, timeout=20)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr


def _unexplained(golden, out):
    """A port whose last comb is off by 0.1%: no mistake explains it, so every pair is tried."""
    steps = port_steps(golden)
    key = [k for k in steps if k.endswith(".comb")][-1]
    steps[key] = steps[key] * np.float32(1.001)
    save_file(steps, str(out))
    return out


# every single mistake but the iteration counts, the fitted factor, at most 7 iteration counts,
# and the pairs of different kinds among them: a bound that does not depend on the golden
OTHERS = len([m for m in catalogue(S.SiteParams("v4.1", 4, 20, 1e-6, 1e-20)) if m.kind != "iters"]) + 1
MOST_TRIED = OTHERS + 7 + OTHERS * 7 + OTHERS * (OTHERS - 1) // 2


def test_the_hypotheses_do_not_grow_with_the_iterations(hc, tmp_path):
    for n in (20, MAX_GOLDEN_ITERS):
        golden = make_golden(_config(tmp_path, n), tmp_path / f"g{n}.safetensors", "--tokens", "2", "--layers", "0")
        r = hc("check-port", str(_unexplained(golden, tmp_path / f"p{n}.safetensors")), "--golden", str(golden),
               "--json")
        assert r.exit_code == 1 and r.json()["explained_by"] == [], r.json()["summary"]
        singles = [*catalogue(read_golden(golden).params), FACTOR]
        pairs = sum(1 for a, b in combinations(singles, 2) if a.kind != b.kind)
        assert r.json()["hypotheses_tried"] == len(singles) + pairs <= MOST_TRIED, (n, r.json()["hypotheses_tried"])


def test_check_port_of_the_largest_iteration_count_finishes(tmp_path):
    # every site of the tiny model at the bound's iterations, a departure no mistake explains (the
    # whole pair search), in a child process: a generous limit that a scan of 1..N would pass
    golden = make_golden(_config(tmp_path, MAX_GOLDEN_ITERS), tmp_path / "g.safetensors", "--tokens", "4")
    port = _unexplained(golden, tmp_path / "p.safetensors")
    proc, _, _ = run_hc_process("check-port", port, "--golden", golden, "--json", timeout=120)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and "no known mistake explains it" in doc["summary"], proc.stderr
    explained = write_port(golden, tmp_path / "ten.safetensors", S.Variant(iters=10, comb_transposed=False))
    proc, _, _ = run_hc_process("check-port", explained, "--golden", golden, "--json", timeout=120)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and [e["mistakes"] for e in doc["explained_by"]][:1] == [
        ["comb-untransposed", "iters-10"]], doc["summary"]
