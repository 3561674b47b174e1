"""Remote checkpoints over HTTP range requests, against a hub stand-in on 127.0.0.1."""

import time

import numpy as np
import pytest

pytest.importorskip("huggingface_hub")

from ckpt_tools import tiny  # noqa: E402
from conftest import run_hc  # noqa: E402
from hub_server import SHA, Hub  # noqa: E402


@pytest.fixture(scope="module")
def repos(tmp_path_factory, phantoms):
    root = tmp_path_factory.mktemp("hub")
    tiny(root / "tiny")
    return {"org/tiny": root / "tiny", "org/v41": phantoms("deepseek-v4.1-flash")[0]}


@pytest.fixture
def hub(repos, monkeypatch, tmp_path):
    with Hub(repos) as h:
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        monkeypatch.setenv("HC_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_TOKEN", "hf_test_token_never_sent_off_this_machine")
        yield h


def local_and_remote(repos, name, *args):
    local = run_hc("inspect", repos[name], "--json", *args)
    remote = run_hc("inspect", f"hf://{name}", "--json", *args)
    assert local.exit_code == 0 and remote.exit_code == 0, remote.stderr
    return local.json(), remote.json()


@pytest.mark.parametrize("name", ["org/tiny", "org/v41"])
def test_totals_and_hc_values_equal_local(hub, repos, name):
    loc, rem = local_and_remote(repos, name)
    for key in ("tensors", "shards", "stored_bytes", "logical_params", "dtypes"):
        assert rem[key] == loc[key], key
    assert rem["hc"] == loc["hc"]  # every float32 base/scale value, bit for bit (JSON floats round-trip)
    assert rem["remote"]["sha"] == SHA and rem["remote"]["repo"] == name
    assert rem["transferred_bytes"] > 0


def test_phantom_transfers_under_a_ten_thousandth(hub, repos):
    doc = run_hc("inspect", "hf://org/v41", "--verify", "--json").json()
    assert doc["findings"] == []
    assert doc["transferred_bytes"] < 1e-4 * doc["stored_bytes"], doc["transferred_bytes"]
    assert hub.stats.body_bytes == doc["transferred_bytes"]  # what the server sent is what we counted


def test_second_run_is_cached_and_works_offline(hub, repos, monkeypatch):
    first = run_hc("inspect", "hf://org/tiny", "--json").json()
    sent = hub.stats.body_bytes
    second = run_hc("inspect", "hf://org/tiny", "--json").json()
    assert second["stored_bytes"] == first["stored_bytes"]
    assert hub.stats.body_bytes - sent < first["transferred_bytes"] / 2  # headers came from the cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.faults.down = True
    third = run_hc("inspect", "hf://org/tiny", "--json")
    assert third.exit_code == 0, third.stderr
    assert third.json()["hc"] == first["hc"]


def test_server_that_ignores_ranges_is_refused_without_a_full_read(hub, repos):
    hub.faults.ignore_range = True
    r = run_hc("inspect", "hf://org/v41")
    assert r.exit_code == 2
    assert "ignored the Range header" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert hub.stats.range_requests == 0
    assert hub.stats.body_bytes < 256 * 2**20  # shards are 7-100 GB: never read through


@pytest.mark.parametrize("fault, words", [("truncate", "truncated response"), ("missing", "HTTP 404"),
                                          ("error500", "HTTP 500")])
def test_shard_faults_get_clear_messages(hub, repos, fault, words):
    shard = "model-00003-of-00014.safetensors"
    getattr(hub.faults, fault).add(shard)
    r = run_hc("inspect", "hf://org/tiny", "--verify", "--json")
    assert r.exit_code == 1
    msgs = [f["message"] for f in r.json()["findings"] if f["code"] == "unreadable_shard"]
    assert len(msgs) == 1 and shard in msgs[0] and words in msgs[0]
    human = run_hc("inspect", "hf://org/tiny")
    assert shard in human.stderr and words in human.stderr


@pytest.mark.slow
def test_concurrent_reads(hub, repos, monkeypatch, tmp_path):
    def timed():
        monkeypatch.setenv("HC_CACHE_DIR", str(tmp_path / f"cache{time.monotonic_ns()}"))  # cold every time
        before = hub.stats.requests
        t = time.perf_counter()
        r = run_hc("inspect", "hf://org/v41", "--json")
        assert r.exit_code == 0
        return time.perf_counter() - t, hub.stats.requests - before, r.json()["shards"]

    base, requests, shards = timed()
    hub.faults.latency = 0.1
    slow, _, _ = timed()
    added = slow - base  # what the latency cost
    assert requests >= 2 * shards
    # one by one, the latency alone would add requests x 0.1 s (> 10 s); overlapped, well under shards x 0.1 s
    assert added < 0.5 * shards * 0.1, (base, slow, requests)


def test_run_kernel_from_a_remote_checkpoint(hub, repos):
    rem = run_hc("run-kernel", "--checkpoint", "hf://org/tiny", "--layers", "3", "--site", "ffn", "--json")
    loc = run_hc("run-kernel", "--checkpoint", repos["org/tiny"], "--layers", "3", "--site", "ffn", "--json")
    assert rem.exit_code == 0, rem.stderr
    assert rem.json()["params"]["hc_base"] == loc.json()["params"]["hc_base"]
    assert np.array_equal(np.array(rem.json()["comb"]), np.array(loc.json()["comb"]))


def test_bare_repo_name_and_revision(hub, repos, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no local path called org/tiny here
    assert run_hc("inspect", "org/tiny", "--json").json()["remote"]["sha"] == SHA
    assert run_hc("inspect", f"hf://org/tiny@{SHA}", "--json").exit_code == 0
    r = run_hc("inspect", "hf://org/tiny@nope")
    assert r.exit_code == 2 and "no revision" in r.stderr


def test_unknown_repo_and_unreachable_hub(hub, repos, monkeypatch):
    r = run_hc("inspect", "hf://org/none")
    assert r.exit_code == 2 and "no such repository" in r.stderr
    hub.faults.down = True
    r = run_hc("inspect", "hf://org/tiny")
    assert r.exit_code == 2 and "cannot reach" in r.stderr and len(r.stderr.strip().splitlines()) == 1
