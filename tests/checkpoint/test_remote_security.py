"""A hostile or broken hub: cache paths, tokens, escape codes, unbounded answers, stalls.

Every server here is the loopback stand-in (tests/hub_server.py) with a fault switched on."""

import os
import time

import pytest

pytest.importorskip("huggingface_hub")

from ckpt_tools import tiny  # noqa: E402
from conftest import run_hc  # noqa: E402
from hub_server import SHA, Hub  # noqa: E402

from hccli.checkpoint.store import MAX_SHARDS  # noqa: E402

TOKEN = "hf_test_token_never_sent_off_this_machine"


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    return {"org/tiny": tiny(tmp_path_factory.mktemp("hub") / "tiny")}


@pytest.fixture
def hub(repos, monkeypatch, tmp_path):
    with Hub(repos) as h:
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        monkeypatch.setenv("HC_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("HC_HTTP_TIMEOUT", raising=False)
        monkeypatch.delenv("HC_HTTP_DEADLINE", raising=False)
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        yield h


def one_error(r, *words):
    assert r.exit_code == 2, (r.exit_code, r.stdout[-500:], r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), r.stderr
    return lines[0]


def files_under(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("sha", ["../" + "0" * 16 + "/" + SHA, "/tmp/evil", "../../..", SHA.upper(), SHA[:39]])
def test_a_commit_that_is_not_40_hex_is_refused_and_never_a_path(hub, tmp_path, sha):
    hub.faults.sha = sha
    one_error(run_hc("inspect", "hf://org/tiny"), "expected 40 hex digits")
    assert not (tmp_path / "evil").exists()
    written = files_under(tmp_path)
    assert all(p == "cache" or p.startswith("cache/") for p in written), written
    assert not any(p.endswith(".safetensors") or "refs" in p for p in written)  # nothing cached from that answer


def test_damaged_cache_entries_are_refetched_never_believed(hub):
    first = run_hc("inspect", "hf://org/tiny", "--json").json()
    entries = [os.path.join(d, f) for d, _, fs in os.walk(os.environ["HC_CACHE_DIR"]) for f in fs]
    assert entries
    for path in entries:  # flip the last byte: data no longer matches its recorded digest
        with open(path, "r+b") as fh:
            fh.seek(-1, os.SEEK_END)
            last = fh.read(1)
            fh.seek(-1, os.SEEK_END)
            fh.write(bytes([last[0] ^ 0xFF]))
    before = hub.stats.body_bytes
    second = run_hc("inspect", "hf://org/tiny", "--json")
    assert second.exit_code == 0, second.stderr
    assert second.json()["hc"] == first["hc"]
    assert second.json()["remote"]["cached_files"] == 0
    assert hub.stats.body_bytes - before == first["transferred_bytes"]  # everything came again from the hub


def test_a_cache_entry_planted_for_another_question_is_not_used(hub):
    first = run_hc("inspect", "hf://org/tiny", "--json").json()
    root = os.environ["HC_CACHE_DIR"]
    ranges = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if os.sep + "ranges" + os.sep in
              os.path.join(d, f)]
    assert len(ranges) >= 2
    # move one answer over another: intact bytes and digest, but recorded for another range
    a, b = ranges[:2]
    os.replace(a, b)
    second = run_hc("inspect", "hf://org/tiny", "--json")
    assert second.exit_code == 0 and second.json()["hc"] == first["hc"]


def test_token_goes_only_to_the_hub_origin(hub, repos):
    with Hub(repos) as cdn:
        hub.faults.cdn = cdn.endpoint  # another port: another origin
        r = run_hc("inspect", "hf://org/tiny", "--json")
        assert r.exit_code == 0, r.stderr
        r = run_hc("inspect", "hf://org/tiny", "--verify", "--json")  # later reads go to the CDN URL directly
        assert r.exit_code == 0, r.stderr
        assert cdn.stats.auth and not any(has for _, has in cdn.stats.auth), cdn.stats.auth[:3]
    assert any(has for path, has in hub.stats.auth if path.startswith("/api/"))  # the hub itself gets it


def test_server_strings_never_put_escape_codes_on_the_terminal(hub):
    hub.faults.extra_siblings = ["\x1b[2Jevil\x1b]0;title\x07.safetensors"]
    for args in (("inspect", "hf://org/tiny"), ("inspect", "hf://org/tiny", "--verify"),
                 ("inspect", "hf://org/tiny", "--verify", "--json"), ("inspect", "hf://org/tiny", "--tensors")):
        r = run_hc(*args)
        assert r.exit_code in (0, 1), r.stderr
        assert "\x1b" not in r.stdout and "\x07" not in r.stdout and "\x1b" not in r.stderr
        assert "evil" in r.stdout + r.stderr  # named, escaped
    hub.faults.sha = "\x1b[2J" + SHA[4:]
    r = run_hc("inspect", "hf://org/tiny")
    assert r.exit_code == 2 and "\x1b" not in r.stderr + r.stdout


def test_a_range_answer_longer_than_asked_is_refused(hub):
    hub.faults.overlong = True
    r = run_hc("inspect", "hf://org/tiny", "--verify", "--json")
    assert r.exit_code == 2 and "does not match the bytes asked for" in r.stderr, r.stderr


def test_encoded_range_answers_are_refused_before_inflating(hub):
    hub.faults.gzip_ranges = True
    one_error(run_hc("inspect", "hf://org/tiny"), "gzip-encoded", "refusing to decompress")


def test_api_answers_are_capped_and_never_inflated(hub):
    from hccli.checkpoint.remote.hub import API_CAP

    hub.faults.api_endless = API_CAP + (8 << 20)
    one_error(run_hc("inspect", "hf://org/tiny"), "more than the", f"{API_CAP:,}")
    hub.faults.api_endless = 0
    hub.faults.api_gzip = True
    one_error(run_hc("inspect", "hf://org/tiny"), "gzip-encoded")


def test_a_stalled_api_times_out_naming_the_server(hub, monkeypatch):
    monkeypatch.setenv("HC_HTTP_TIMEOUT", "0.5")
    hub.faults.api_stall = 3
    t = time.monotonic()
    line = one_error(run_hc("inspect", "hf://org/tiny"), "no answer within 0.5 s", "HC_HTTP_TIMEOUT",
                     hub.endpoint.split("//")[1], "API answer")
    assert time.monotonic() - t < 2.5, line


def test_a_stalled_body_times_out(hub, monkeypatch):
    monkeypatch.setenv("HC_HTTP_TIMEOUT", "0.5")
    hub.faults.body_stall = 3
    t = time.monotonic()
    r = run_hc("inspect", "hf://org/tiny", "--verify", "--json")
    assert r.exit_code == 2 and "stalled" in r.stderr and "HC_HTTP_TIMEOUT" in r.stderr, r.stderr
    assert time.monotonic() - t < 2.5


def test_a_one_byte_drip_hits_the_per_file_deadline(hub, monkeypatch):
    monkeypatch.setenv("HC_HTTP_TIMEOUT", "2")
    monkeypatch.setenv("HC_HTTP_DEADLINE", "1")
    hub.faults.drip = 0.2  # every byte arrives well within the socket timeout
    t = time.monotonic()
    r = run_hc("inspect", "hf://org/tiny")
    assert r.exit_code == 2 and "did not complete within 1 s" in r.stderr and "HC_HTTP_DEADLINE" in r.stderr, r.stderr
    assert time.monotonic() - t < 4


def test_bad_timeout_settings_are_one_line_errors(hub, monkeypatch):
    monkeypatch.setenv("HC_HTTP_TIMEOUT", "soon")
    one_error(run_hc("inspect", "hf://org/tiny"), "HC_HTTP_TIMEOUT=soon", "expected seconds")


def test_a_listing_of_too_many_shards_is_refused_at_once(hub, repos, tmp_path):
    hub.faults.extra_siblings = [f"x-{k:05d}-of-10000.safetensors" for k in range(1, 10_001)]
    t = time.monotonic()
    one_error(run_hc("inspect", "hf://org/tiny"), f"at most {MAX_SHARDS:,}")
    assert hub.stats.range_requests <= 4  # the index and config.json (size, bytes), never a header per shard
    assert time.monotonic() - t < 10


def test_a_mistyped_local_path_says_so_before_the_hub(hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = one_error(run_hc("inspect", "tmp/tiny"), "tmp/tiny: no local file or directory of that name exists",
                     "as a hub repository", "no such repository")
    assert "hf://tmp/tiny" in line
    one_error(run_hc("inspect", "tmp/a/b"), "no local file or directory")  # not org/name: the hub is not asked
    assert not any(p.startswith("/api/models/tmp/a") for p, _ in hub.stats.auth)
