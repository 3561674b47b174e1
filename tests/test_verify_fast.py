"""--verify's short answers (checkpoint/agree.py, placement._published_as_is) and its NaN/Inf scan
beside the rest (checkpoint/beside.py): whatever they answer, the findings are those of the
per-name paths, which the fast answers only let verify skip when there is nothing to find."""

from __future__ import annotations

import json
import math
import os
import struct
import sys
import threading
import time

import pytest
from ckpt_tools import edit_index, read_entries, rewrite, shard_of, tiny
from conftest import SAMPLES, run_hc_process, write_sparse_shard

from hccli.checkpoint import agree, beside, placement, shardset, verify
from hccli.checkpoint.header import read_header
from hccli.checkpoint.shardset import open_checkpoint
from hccli.checkpoint.source import LocalFile
from hccli.inventory import build_inventory
from hccli.st_layout import header_bytes, serializer_order
from hccli.synth import make_checkpoint


def _phantom(root):
    # a phantom of a published release (~1 s): 46 shards in the published layout, data as holes
    # (made afresh for each test: a copy would write the holes out)
    return make_checkpoint(SAMPLES / "deepseek-v4-flash.json", root / "ck", phantom=True).outdir


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return _phantom(tmp_path_factory.mktemp("r"))


@pytest.fixture
def ck(tmp_path):
    return _phantom(tmp_path)


def slow(monkeypatch, path):
    """The findings with every short answer turned off: the per-name paths alone."""
    with monkeypatch.context() as m:
        m.setattr(agree, "digest_agrees", lambda *a: False)
        m.setattr(agree, "index_agrees", lambda *a: False)
        m.setattr(agree, "positions", lambda *a: None)
        m.setattr(placement, "_published_as_is", lambda *a: False)
        return verify.verify(open_checkpoint(path))


def fast_answers(path):
    """(the index digest's answer, index_agrees, inventory_agrees, _published_as_is)."""
    ckpt = open_checkpoint(path, index_digest=True)
    assert (ckpt.index.digest is not None) == shardset.hash_key_secret()  # made by the index's child
    inv = build_inventory(ckpt.config)
    return (agree.digest_agrees(ckpt, ckpt.index), agree.index_agrees(ckpt, ckpt.index.weight_map),
            agree.inventory_agrees(ckpt, inv.columns), placement._published_as_is(ckpt, inv))


@pytest.fixture
def forking(monkeypatch):
    """Forks allowed as in a fresh `hc` process (earlier tests may leave an idle server thread)."""
    monkeypatch.setattr(beside, "MIN_BYTES", 0)
    monkeypatch.setattr(beside, "_can_fork", lambda: sys.platform.startswith("linux"))


@pytest.fixture
def digest(monkeypatch, forking):
    """Whether the index's child makes its digest here: forks allowed, PYTHONHASHSEED unset as in a
    fresh `hc` process; False only for a test process started with PYTHONHASHSEED=0 (no secret key:
    then the weight_map answers, and the tests expect that instead)."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    return shardset.hash_key_secret()


def test_a_release_as_published_takes_every_short_answer_and_they_are_right(release, monkeypatch, digest):
    assert fast_answers(release) == (digest, True, True, True)
    ckpt = open_checkpoint(release, index_digest=True)
    assert verify.verify(ckpt) == [] == slow(monkeypatch, release)
    assert ckpt.index.parsed is not digest  # where the digest answered, the weight_map was never parsed here


def test_without_a_secret_hash_key_there_is_no_digest_and_the_weight_map_answers(release, monkeypatch, forking):
    monkeypatch.setenv("PYTHONHASHSEED", "5")  # a key anyone can know: a digest could be forged
    ckpt = open_checkpoint(release, index_digest=True)
    assert ckpt.index.digest is None and not agree.digest_agrees(ckpt, ckpt.index)
    assert verify.verify(ckpt) == [] and ckpt.index.parsed


def test_the_digest_tells_names_apart_not_only_counts(ck, monkeypatch, digest):
    if not digest:
        pytest.skip("this test process was started with PYTHONHASHSEED=0: no digest to test")
    # two tensors' shards swapped in the index: every file keeps its count of names
    a = "layers.0.attn_norm.weight"
    ckpt = open_checkpoint(ck, index_digest=True)
    wm = ckpt.index.weight_map
    b = next(n for n, f in wm.items() if f != wm[a])
    fa, fb = wm[a], wm[b]
    edit_index(ck, lambda d: d["weight_map"].update({a: fb, b: fa}))
    assert fast_answers(ck)[:2] == (False, False)
    got = verify.verify(open_checkpoint(ck, index_digest=True))
    assert got == slow(monkeypatch, ck)
    assert [f.code for f in got] == ["wrong_shard", "wrong_shard"]


def _rewrite_header(path, make):
    """The shard's entries and data as they are, under the header text make(doc) returns."""
    with path.open("rb") as f:
        n = int.from_bytes(f.read(8), "little")
        doc = json.loads(f.read(n))
        size = path.stat().st_size
    text = make(doc).encode()
    text += b" " * (-len(text) % 8)
    data = size - 8 - n
    with path.open("r+b") as f:
        f.seek(8 + n)
        rest = f.read(min(data, 1 << 20)) if data else b""
    with path.open("wb") as f:  # a phantom: the data are holes but for the first MB kept
        f.write(len(text).to_bytes(8, "little") + text + rest)
        f.truncate(8 + len(text) + data)


SHARD = "model-00002-of-00046.safetensors"


def _indented(ck):
    _rewrite_header(ck / SHARD, lambda doc: json.dumps(doc, indent=1))


def _escaped(ck):
    # the same length of text but one name written with an escape: not the compact form
    _rewrite_header(ck / SHARD, lambda doc: json.dumps(doc, separators=(",", ":")).replace("layers", "l\\u0061yers", 1))


def _extra_padding(ck):
    _rewrite_header(ck / SHARD, lambda doc: json.dumps(doc, separators=(",", ":")) + " " * 8)


def _metadata(ck):
    _rewrite_header(ck / SHARD, lambda doc: json.dumps({"__metadata__": {"format": "pt"}, **doc}, separators=(",", ":")))


def _metadata_null(ck):
    # no metadata to read, but its key in the text: not the published header
    _rewrite_header(ck / SHARD, lambda doc: json.dumps({"__metadata__": None, **doc}, separators=(",", ":")))


def _unsorted(ck):
    # the same entries and length, laid in reverse name order: not the serializer's order
    def make(doc):
        items = sorted(doc.items(), key=lambda kv: kv[0], reverse=True)
        out, at = {}, 0
        for k, v in items:
            span = v["data_offsets"][1] - v["data_offsets"][0]
            out[k] = {**v, "data_offsets": [at, at + span]}
            at += span
        return json.dumps(out, separators=(",", ":"))
    _rewrite_header(ck / SHARD, make)


def _entries(path):
    """(name, dtype, shape, span, small F32 values or None) of a shard, its data left unread."""
    with LocalFile(path) as src:
        h = read_header(src)
        return [(t.name, t.dtype, t.shape, t.nbytes,
                 src.read(t.abs_begin, t.nbytes) if t.dtype == "F32" and t.nbytes < 1 << 20 else None)
                for t in h.tensors]


def _relayout(path, entries):
    """The shard rewritten as the serializer lays out `entries`: the small F32 values (HC base and
    scale) written, the rest left as holes, as in a phantom."""
    entries = serializer_order(entries, name=lambda e: e[0], dtype=lambda e: e[1])
    head = header_bytes([e[:4] for e in entries])
    with path.open("wb") as f:
        f.write(head)
        at = len(head)
        for *_, span, values in entries:
            if values is not None:
                f.seek(at)
                f.write(values)
            at += span
        f.truncate(at)


def _norm_weight(entries):
    return next(e for e in entries if e[1] == "BF16" and len(e[2]) == 1)


OTHER = "model-00003-of-00046.safetensors"


def _moved(ck):
    # one norm weight moved from one shard to the next, the index following it
    a, b = _entries(ck / SHARD), _entries(ck / OTHER)
    moved = _norm_weight(a)
    _relayout(ck / SHARD, [e for e in a if e is not moved])
    _relayout(ck / OTHER, b + [moved])
    edit_index(ck, lambda d: d["weight_map"].update({moved[0]: OTHER}))


def _wrong_shape(ck):
    # a matrix stored transposed: the same bytes and digits, another shape
    a = _entries(ck / SHARD)
    m = next(e for e in a if len(e[2]) == 2 and e[2][0] != e[2][1])
    _relayout(ck / SHARD, [(m[0], m[1], m[2][::-1], *m[3:]) if e is m else e for e in a])


def _index_extra(ck):
    edit_index(ck, lambda d: d["weight_map"].update({"layers.0.not_there.weight": SHARD}))


def _index_lacks(ck):
    edit_index(ck, lambda d: d["weight_map"].pop("layers.0.attn_norm.weight"))


def _index_wrong_shard(ck):
    edit_index(ck, lambda d: d["weight_map"].update({"layers.0.attn_norm.weight": "model-00009-of-00046.safetensors"}))


def _duplicate(ck):
    _relayout(ck / OTHER, _entries(ck / OTHER) + [_norm_weight(_entries(ck / SHARD))])


@pytest.mark.parametrize("damage, expect, codes", [
    (_indented, (True, True, True, False), {"shard_placement"}),
    (_escaped, (True, True, True, False), {"shard_placement"}),
    (_extra_padding, (True, True, True, False), {"shard_placement"}),
    (_metadata, (True, True, True, False), {"shard_placement"}),
    (_metadata_null, (True, True, True, False), {"shard_placement"}),
    (_unsorted, (True, True, True, False), {"shard_placement"}),  # its offsets, so its header, are no longer the same
    (_moved, (True, True, True, False), {"shard_placement"}),
    (_wrong_shape, (True, True, False, False), {"wrong_shape"}),
    (_index_extra, (False, False, True, True), {"index_missing_tensor"}),
    (_index_lacks, (False, False, True, True), {"unindexed_tensor"}),
    (_index_wrong_shard, (False, False, True, True), {"wrong_shard"}),
    (_duplicate, (False, False, False, False), {"duplicate_tensor", "shard_placement", "total_size_mismatch"}),
])
def test_each_difference_sends_verify_to_the_per_name_path(ck, monkeypatch, digest, damage, expect, codes):
    damage(ck)
    assert fast_answers(ck) == (expect[0] and digest, *expect[1:])
    got = verify.verify(open_checkpoint(ck, index_digest=True))
    assert got == slow(monkeypatch, ck)
    assert {f.code for f in got} == codes


# ---- the NaN/Inf scan beside the rest ---------------------------------------------------------


@pytest.fixture
def nan_fn(tmp_path):
    ck = tiny(tmp_path / "t")
    name = "layers.1.hc_ffn_fn"
    (_, dtype, shape, data) = next(e for e in read_entries(shard_of(ck, name)) if e[0] == name)
    bad = data[:40] + struct.pack("<f", math.inf) + data[44:]
    rewrite(shard_of(ck, name), replace={name: (dtype, shape, bad)})
    return ck


def test_the_forked_scan_finds_what_the_scan_in_process_finds(nan_fn, monkeypatch, forking):
    ckpt = open_checkpoint(nan_fn)
    check = verify._HcCheck(ckpt, True)
    assert check.scan.forked
    forked = check.findings()
    monkeypatch.setattr(beside, "MIN_BYTES", 1 << 62)
    check = verify._HcCheck(open_checkpoint(nan_fn), True)
    assert not check.scan.forked
    assert forked == check.findings()
    assert [f.code for f in forked] == ["hc_nonfinite"] and "layers.1.hc_ffn_fn' holds 1 NaN/Inf" in forked[0].message


def test_a_child_that_fails_is_replaced_by_the_work_in_process(forking):
    parent = os.getpid()

    def work():
        if os.getpid() != parent:
            raise RuntimeError("only in the child")
        return [1, 2]

    b = beside.Beside(work, nbytes=1, timeout_s=30)
    assert b.forked and b.result() == [1, 2]


def test_a_child_past_its_time_is_killed_and_the_work_done_here(forking):
    parent = os.getpid()

    def work():
        if os.getpid() != parent:
            time.sleep(60)
        return "here"

    b = beside.Beside(work, nbytes=1, timeout_s=0.5)
    pid = b._pid
    t = time.monotonic()
    assert b.result() == "here" and time.monotonic() - t < 10
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped: no zombie left


def test_a_result_that_is_no_json_is_not_believed(forking):
    parent = os.getpid()
    b = beside.Beside(lambda: {1, 2} if os.getpid() != parent else "here", nbytes=1, timeout_s=30)  # a set: no JSON
    assert b.forked and b.result() == "here"


def test_no_fork_beside_another_thread(monkeypatch):
    monkeypatch.setattr(beside, "MIN_BYTES", 0)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        b = beside.Beside(lambda: 7, nbytes=1, timeout_s=30)
        assert not b.forked and b.result() == 7
    finally:
        stop.set()
        t.join()


def test_a_large_fn_past_min_bytes_is_scanned_by_the_command(tmp_path):
    # 40 MB of fn (past MIN_BYTES: a child scans it where it can) with one NaN near its end, through
    # `hc` as users run it: found either way
    n, cols = 24, 440_000
    f = write_sparse_shard(tmp_path / "m.safetensors",
                           [("layers.0.hc_attn_fn", "F32", (n, cols)), ("layers.0.hc_attn_base", "F32", (n,)),
                            ("layers.0.hc_attn_scale", "F32", (3,))],
                           [("layers.0.hc_attn_fn", n * cols * 4 - 8, struct.pack("<f", math.nan))])
    assert n * cols * 4 > beside.MIN_BYTES
    proc, _, _ = run_hc_process("inspect", f, "--verify", "--json")
    assert proc.returncode == 1, proc.stderr
    found = [x for x in json.loads(proc.stdout)["findings"] if x["code"] == "hc_nonfinite"]
    assert len(found) == 1 and "1 NaN/Inf" in found[0]["message"]


def test_the_header_writer_of_the_tests_is_the_compact_form():
    # _as_published reads the text's length as the compact header's: header_bytes writes that form
    head = header_bytes([("a", "F32", (2,), 8), ("b", "BF16", (3,), 6)])
    assert b" " not in head[8:].rstrip(b" ")


def test_inspect_starts_the_value_scan_before_the_rest_of_its_work(release, monkeypatch, digest):
    # the scan (a child's ~150 ms for V4.1-Flash) overlaps the totals, the HC values and verify
    from hccli import inspect_report

    events = []
    real_start, real_totals = verify.start_hc_check, inspect_report.totals_from_columns
    monkeypatch.setattr(verify, "start_hc_check", lambda *a: events.append("scan") or real_start(*a))
    monkeypatch.setattr(inspect_report, "totals_from_columns", lambda *a: events.append("totals") or real_totals(*a))
    report = inspect_report.build_inspect(release, run_verify=True)
    assert events == ["scan", "totals"] and report.findings == []
    assert report.ckpt.index.parsed is not digest  # inspect --verify asked the index's child for the digest
    events.clear()
    inspect_report.build_inspect(release)
    assert events == ["totals"]  # no verify, no scan


def test_a_user_error_after_the_scan_started_stops_its_child(release, forking):
    from hccli.errors import HcError
    from hccli.inspect_report import build_inspect

    with pytest.raises(HcError, match="layer 999 for the HC sites is out of range"):
        build_inspect(release, run_verify=True, hc_layers=[999])
    with pytest.raises(ChildProcessError):  # every child this process forked is reaped
        os.waitpid(-1, os.WNOHANG)
