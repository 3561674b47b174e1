"""Local stores under careless or hostile input: FIFOs and devices where files belong,
padded and deeply nested index files, symlinks out of the directory, and a directory
of shards without an index. Every CLI run here is bounded in time: a FIFO that blocks
would fail the test instead of hanging it."""

import json
import os
import socket
import threading

import pytest

from ckpt_tools import copy, shard_of, tiny, write_shard
from conftest import run_hc
from hccli.checkpoint.opening import open_checkpoint
from hccli.checkpoint.store import INDEX_CAP, LocalStore, MAX_SHARDS, open_store
from hccli.checkpoint.synth import INDEX_NAME

fifo_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("s") / "tiny")


@pytest.fixture
def ck(base, tmp_path):
    return copy(base, tmp_path / "ck")


def bounded(*args, seconds=60):
    """run_hc in a thread: a read that blocks fails the test instead of hanging the suite."""
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", run_hc(*args)), daemon=True)
    t.start()
    t.join(seconds)
    assert "r" in box, f"hc {' '.join(map(str, args))} still running after {seconds} s (blocked on a FIFO?)"
    return box["r"]


def one_error(r, *words):
    assert r.exit_code == 2, (r.exit_code, r.stdout[-800:], r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), r.stderr
    return lines[0]


def codes(r):
    return {f["code"]: f["message"] for f in r.json()["findings"]}


@fifo_only
def test_a_fifo_shard_is_named_not_skipped(ck):
    shard = shard_of(ck, "layers.3.hc_attn_base")
    shard.unlink()
    os.mkfifo(shard)
    os.mkfifo(ck / "extra.safetensors")  # one the index does not name
    r = bounded("inspect", ck, "--verify", "--json")
    assert r.exit_code == 1, r.stderr
    msgs = [f["message"] for f in r.json()["findings"] if f["code"] == "unreadable_shard"]
    assert any(shard.name in m and "FIFO" in m for m in msgs), msgs
    assert any("extra.safetensors" in m and "FIFO" in m for m in msgs), msgs


@fifo_only
def test_a_fifo_index_or_single_file_is_refused_by_name(ck, tmp_path):
    (ck / INDEX_NAME).unlink()
    os.mkfifo(ck / INDEX_NAME)
    one_error(bounded("inspect", ck), INDEX_NAME, "FIFO", "not a regular file")
    one_error(bounded("inspect", ck / INDEX_NAME), "FIFO")
    os.mkfifo(tmp_path / "one.safetensors")
    one_error(bounded("inspect", tmp_path / "one.safetensors"), "one.safetensors", "FIFO")


@fifo_only
def test_a_fifo_config_beside_the_shards_is_named(ck):
    (ck / "config.json").unlink()
    os.mkfifo(ck / "config.json")
    r = bounded("inspect", ck, "--verify", "--json")
    assert "config.json" in codes(r).get("config_unreadable", ""), r.stdout[-500:]


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_a_device_as_a_shard_is_refused(ck):
    shard = shard_of(ck, "layers.3.hc_attn_base")
    shard.unlink()
    shard.symlink_to("/dev/zero")
    r = bounded("inspect", ck, "--verify", "--json")
    assert "character device" in codes(r)["unreadable_shard"]


def test_an_index_padded_past_the_cap_is_refused_unread(ck):
    with open(ck / INDEX_NAME, "r+b") as fh:
        fh.truncate(INDEX_CAP + 1)  # sparse: costs no disk, and must cost no memory either
    one_error(run_hc("inspect", ck), INDEX_NAME, f"at most {INDEX_CAP:,} bytes")


@pytest.mark.parametrize("text, words", [
    ("[" * 100_000 + "]" * 100_000, ["nested deeper than 127 levels"]),
    ('{"weight_map": {}, "metadata": {"total_size": 1' + "0" * 5000 + "}}", ["5,001 digits"]),
    ('{"weight_map": {}, "metadata": {"total_size": 1' + "0" * 25 + "}}", ["total_size", "below 2**64"]),
])
def test_hostile_index_json_is_a_one_line_error(ck, text, words):
    (ck / INDEX_NAME).write_text(text)
    one_error(run_hc("inspect", ck), INDEX_NAME, *words)
    one_error(run_hc("inspect", ck / INDEX_NAME), *words)


def test_a_shard_linked_out_of_the_directory_never_shows_its_bytes(ck, tmp_path):
    secret = tmp_path / "id_ed25519"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAA\n")
    shard = shard_of(ck, "layers.3.hc_attn_base")
    shard.unlink()
    shard.symlink_to(secret)
    for args in (("inspect", ck), ("inspect", ck, "--verify"), ("inspect", ck, "--verify", "--json"),
                 ("inspect", shard)):
        r = run_hc(*args)
        out = r.stdout + r.stderr
        assert "text file" in out and "BEGIN" not in out and "b3Bl" not in out, out[-600:]


def test_shards_without_an_index_imply_their_count(ck):
    gone = shard_of(ck, "layers.3.hc_attn_base").name
    (ck / INDEX_NAME).unlink()
    (ck / "config.json").unlink()
    clean = run_hc("inspect", ck, "--verify", "--json")
    assert clean.exit_code == 0 and set(codes(clean)) == {"no_index"}, clean.stdout[-500:]
    (ck / gone).unlink()
    (ck / "model-00002-of-00014.safetensors.partial").write_bytes(b"\0" * 64)
    r = run_hc("inspect", ck, "--verify", "--json")
    assert r.exit_code == 1
    found = codes(r)
    assert gone in found["missing_shard"] and "-of-N names imply" in found["missing_shard"]
    assert "model-00002-of-00014.safetensors.partial" in found["partial_file"]


def test_occurrences_list_every_shard_of_a_name_in_order(tmp_path):
    # verify's duplicate, unindexed and wrong-shard findings read them; the merged table keeps the first
    f32 = b"\0" * 4
    write_shard(tmp_path / "a.safetensors", [("x", "F32", (1,), f32), ("only_a", "F32", (1,), f32)])
    write_shard(tmp_path / "b.safetensors", [("only_b", "F32", (1,), f32), ("y", "F32", (1,), f32)])
    write_shard(tmp_path / "c.safetensors", [("y", "F32", (1,), f32), ("x", "F32", (1,), f32)])
    ck = open_checkpoint(tmp_path)
    occ = {name: [s.file for s in shards] for name, shards in ck.occurrences().items()}
    assert occ == {"x": ["a.safetensors", "c.safetensors"], "only_a": ["a.safetensors"],
                   "only_b": ["b.safetensors"], "y": ["b.safetensors", "c.safetensors"]}
    assert {n: s.file for n, (s, _) in ck.tensors().items()} == {
        "x": "a.safetensors", "only_a": "a.safetensors", "only_b": "b.safetensors", "y": "b.safetensors"}


def test_an_unreadable_shard_makes_verify_exit_nonzero_without_an_index(ck):
    shard = shard_of(ck, "layers.3.hc_attn_base")
    (ck / INDEX_NAME).unlink()
    shard.write_bytes(b"\0" * 3)
    r = run_hc("inspect", ck, "--verify", "--json")
    assert r.exit_code == 1 and shard.name in codes(r)["unreadable_shard"]


def test_shard_names_implying_too_many_shards_are_refused(ck):
    shard = shard_of(ck, "layers.3.hc_attn_base")
    (ck / INDEX_NAME).unlink()
    shard.rename(ck / "model-00001-of-99999.safetensors")
    one_error(run_hc("inspect", ck), "-of-99999", f"at most {MAX_SHARDS:,}")


def test_a_mistyped_local_path_is_named_as_local_first(tmp_path, monkeypatch):
    with socket.socket() as s:  # a loopback port that nothing listens on: the hub cannot be reached
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    line = one_error(run_hc("inspect", "tmp/tiny"), "tmp/tiny: no local file or directory of that name exists",
                     "hf://tmp/tiny")
    assert "cannot reach" in line
    one_error(run_hc("inspect", "./tmp/tiny"), "no local file or directory", "expected a checkpoint directory")


def test_the_local_store_protocol(ck):
    store, kind, entry, label = open_store(str(ck))
    assert label == str(ck)
    assert isinstance(store, LocalStore) and kind == "directory" and entry == INDEX_NAME
    assert INDEX_NAME in store.files() and store.exists("config.json") and not store.exists("nope")
    assert store.read_small("nope.json", 10, "x") is None
    raw = store.read_small(INDEX_NAME, INDEX_CAP, "an index")
    assert json.loads(raw)["weight_map"]
    shard = shard_of(ck, "layers.3.hc_attn_base").name
    with store.source(shard) as src:
        assert src.read(0, 8) == (ck / shard).read_bytes()[:8]
    assert store.header(shard).file_size == (ck / shard).stat().st_size


@pytest.mark.parametrize("config", ["beside", "tiny-v4.1.hf.json", "deepseek-v4-pro.json", "deepseek-v4.1-flash.hf.json"])
def test_a_config_named_as_the_checkpoint_is_called_a_config(ck, tmp_path, config):
    from conftest import SAMPLES

    path = ck / "config.json" if config == "beside" else SAMPLES / config
    for args in (("inspect", path), ("inspect", path, "--verify"), ("diff", path, ck),
                 ("run-kernel", "--checkpoint", path, "--layers", "1")):
        line = one_error(run_hc(*args), f"{path}: is a model config, not a checkpoint",
                         f"hc count-params {path}", "--config")
        assert "weight_map" not in line, args
    # JSON that is neither keeps the index's own words
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"metadata": {}, "weights": {}}))
    one_error(run_hc("inspect", odd), "key 'weight_map': expected an object")


def test_the_not_found_line_names_every_kind_hc_reads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_error(run_hc("inspect", "./nothing"), "expected a checkpoint directory, an index .json, a .safetensors file, "
              "a .gguf file (or the first of a split set), or a hub repository hf://org/name")
