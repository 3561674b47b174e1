"""`diff --values all` compares bytes first (hccli/diffing/values.py): tests that fail if that fast
path breaks. The tensors are at full size (sparse shards: holes but for the bytes poked in), so
the real chunks (a source's chunk_bytes) and pieces (PIECE_BYTES) cut them: a difference in the
last byte, on either side of a chunk's or a piece's edge, a NaN's payload and -0.0, each found
with the figures that decoding every value gives."""

from __future__ import annotations

import json
import shutil
import struct

import pytest
from conftest import run_hc_process, write_sparse_shard
from diff_fixtures import release

from hccli.base.vocab import INDEX_NAME
from hccli.checkpoint.source import LocalFile
from hccli.checkpoint.values import TensorReadError
from hccli.checkpoint.view import open_view
from hccli.diffing import values as DV
from hccli.diffing.select import Selection, shared_others

CHUNK = LocalFile.chunk_bytes
BIG = 3 * DV.PIECE_BYTES // 2 + 2  # bytes of a BF16 tensor over two pieces, the last one short
WINDOW = 2 * DV.WINDOW_VALUES  # bytes of BF16 values whose figures are formed together
F32 = struct.Struct("<f")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return release(tmp_path_factory.mktemp("rel") / "tiny")


def side(tiny, dst, entries, pokes=()):
    """A copy of tiny with one more shard of (name, dtype, shape) entries, holes but for the
    (name, offset, bytes) poked in."""
    shutil.copytree(tiny, dst)
    write_sparse_shard(dst / "model-extra.safetensors", entries, pokes)
    index = dst / INDEX_NAME
    doc = json.loads(index.read_text())
    doc["weight_map"].update({n: "model-extra.safetensors" for n, _, _ in entries})
    index.write_text(json.dumps(doc))
    return dst


def rows(hc, a, b):
    r = hc("diff", a, b, "--values", "all", "--json")
    assert r.exit_code in (0, 1), r.stderr
    return r.exit_code, {v["name"]: v for v in r.json()["values"]}


# name -> offset of the byte poked in B (a BF16 value's high byte): every place a chunk, a window
# or a piece begins or ends
EDGES = {"x.first": 1, "x.chunk_end": CHUNK - 1, "x.chunk_next": CHUNK + 1, "x.window_end": WINDOW - 1,
         "x.window_next": WINDOW + 1, "x.piece_end": DV.PIECE_BYTES - 1, "x.piece_next": DV.PIECE_BYTES + 1,
         "x.last": BIG - 1}


def test_a_byte_changed_where_a_chunk_or_a_piece_begins_or_ends_is_found(hc, tiny, tmp_path):
    entries = [(n, "BF16", [BIG // 2]) for n in [*EDGES, "x.same"]]
    a = side(tiny, tmp_path / "a", entries)
    b = side(tiny, tmp_path / "b", entries, [(n, at, b"\x40") for n, at in EDGES.items()])  # 0x40xx: 2.0
    code, got = rows(hc, a, b)
    assert code == 1
    for name in EDGES:
        assert (got[name]["status"], got[name]["max_abs"], got[name]["max_rel"]) == ("differs", 2.0, 1.0), name
    assert got["x.same"]["status"] == "equal" and got["x.same"]["max_abs"] == 0.0


def test_the_figures_are_those_of_every_value_decoded(hc, tiny, tmp_path):
    """Two differences in one tensor, in other chunks: the largest is reported, and a tolerance
    that covers the smaller alone still sees the larger."""
    entries, last = [("w", "F32", [BIG // 4])], BIG // 4 * 4 - 4
    a = side(tiny, tmp_path / "a", entries, [("w", 8, F32.pack(1.0)), ("w", last, F32.pack(3.0))])
    b = side(tiny, tmp_path / "b", entries, [("w", 8, F32.pack(1.5)), ("w", last, F32.pack(-1.0))])
    _, got = rows(hc, a, b)
    assert got["w"]["status"] == "differs" and got["w"]["max_abs"] == 4.0 and got["w"]["max_rel"] == 4.0 / 3.0
    within = hc("diff", a, b, "--values", "all", "--atol", "4", "--json")
    assert {v["name"]: v["status"] for v in within.json()["values"]}["w"] == "within"
    beyond = hc("diff", a, b, "--values", "all", "--atol", "3.9", "--json")
    assert {v["name"]: v["status"] for v in beyond.json()["values"]}["w"] == "differs"


NAN1, NAN2, NEG0 = struct.pack("<I", 0x7FC00001), struct.pack("<I", 0x7FC00002), struct.pack("<I", 0x80000000)
SNAN1 = struct.pack("<I", 0x7F800001)  # NAN1's payload, signalling: the same NaN once widened to float64


def test_nan_payloads_and_the_sign_of_zero_as_the_comparison_defines_them(hc, tiny, tmp_path):
    """Other bytes that are no difference in value: "within", 0 apart, never "equal"; NaN with
    the same bits is "equal"; a NaN on one side only differs beyond any tolerance."""
    names = ("nan_payload", "neg_zero", "same_nan", "lone_nan", "quiet_bit")
    entries = [(n, "F32", [CHUNK // 2]) for n in names]
    at = CHUNK - 4  # the last value of the first chunk
    a = side(tiny, tmp_path / "a", entries, [("nan_payload", at, NAN1), ("same_nan", at, NAN1),
                                             ("quiet_bit", at, SNAN1)])
    b = side(tiny, tmp_path / "b", entries, [("nan_payload", at, NAN2), ("neg_zero", at, NEG0),
                                             ("same_nan", at, NAN1), ("lone_nan", at, NAN1), ("quiet_bit", at, NAN1)])
    _, got = rows(hc, a, b)
    assert (got["nan_payload"]["status"], got["nan_payload"]["max_abs"]) == ("within", 0.0)
    assert (got["neg_zero"]["status"], got["neg_zero"]["max_abs"]) == ("within", 0.0)
    assert (got["quiet_bit"]["status"], got["quiet_bit"]["max_abs"]) == ("within", 0.0)  # other bits: not "equal"
    assert (got["same_nan"]["status"], got["same_nan"]["max_abs"]) == ("equal", 0.0)
    assert got["lone_nan"]["status"] == "differs"
    loose = hc("diff", a, b, "--values", "all", "--atol", "1e30", "--json").json()["values"]
    assert {v["name"]: v["status"] for v in loose}["lone_nan"] == "differs"


def test_other_types_are_decoded_and_compared_as_values(hc, tiny, tmp_path):
    """A BF16 tensor against its values stored as F32: other bytes, equal values, at every chunk."""
    n = CHUNK  # values: read CHUNK // 4 at a time (B's chunk of F32), A's BF16 half as many bytes
    a = side(tiny, tmp_path / "a", [("w", "BF16", [n])], [("w", 2 * n - 2, b"\x80\x3f"), ("w", 0, b"\x00\xc0")])
    b = side(tiny, tmp_path / "b", [("w", "F32", [n])], [("w", 4 * n - 4, F32.pack(1.0)),
                                                          ("w", 0, F32.pack(-2.0))])
    _, got = rows(hc, a, b)
    assert got["w"]["status"] == "equal"
    c = side(tiny, tmp_path / "c", [("w", "F32", [n])], [("w", 4 * n - 4, F32.pack(1.25)),
                                                          ("w", 0, F32.pack(-2.0))])
    _, got = rows(hc, a, c)
    assert (got["w"]["status"], got["w"]["max_abs"]) == ("differs", 0.25)


def test_a_file_changed_under_a_thread_is_one_error(tiny, tmp_path):
    entries = [("w", "BF16", [BIG // 2])]
    a, b = side(tiny, tmp_path / "a", entries), side(tiny, tmp_path / "b", entries)
    with open_view(a) as va, open_view(b) as vb:
        pairs = shared_others(va, vb, Selection(None, None))
        with open(b / "model-extra.safetensors", "ab") as f:
            f.write(b"x")  # after its header was read: the size no longer agrees
        with pytest.raises(TensorReadError) as exc:
            DV.compare_values(va, vb, pairs, atol=0.0, rtol=0.0)
    assert exc.value.code == "file_changed" and "model-extra.safetensors" in str(exc.value)


def test_memory_stays_bounded_whatever_the_tensor_size(tiny, tmp_path):
    """A 1 GiB tensor a side, and one differing byte in its last chunk: read a chunk at a time."""
    size = 1 << 30
    entries = [("w", "I8", [size])]
    a = side(tiny, tmp_path / "a", entries)
    b = side(tiny, tmp_path / "b", entries, [("w", size - 1, b"\x07")])
    proc, _, peak = run_hc_process("diff", a, b, "--values", "all", "--json")
    assert proc.returncode == 1, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    row = {v["name"]: v for v in doc["values"]}["w"]
    assert (row["status"], row["max_abs"]) == ("differs", 7.0)
    assert doc["bytes_read_a"] >= size and doc["bytes_read_b"] >= size
    assert peak < 400, peak


def test_a_stop_while_the_threads_compare_is_the_one_line_and_128_plus_the_signal(tiny, tmp_path):
    """SIGTERM lands in the main thread, which waits on the two; the pieces begun end, no other
    begins, and the process says so at once (16 GiB of values a side would take seconds more)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT

    size = 16 << 30
    entries = [("w", "I8", [size])]
    a, b = side(tiny, tmp_path / "a", entries), side(tiny, tmp_path / "b", entries)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "hccli", "diff", str(a), str(b), "--values", "all", "--json"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)  # past the start-up, into the values
    sent = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert time.perf_counter() - sent < 2.0
    assert proc.returncode == 128 + signal.SIGTERM and err == "hc: interrupted (SIGTERM)\n" and out == ""


def test_the_figures_do_not_hang_on_the_read_or_decode_sizes(tiny, tmp_path, monkeypatch):
    """Lone NaNs, infinities and small differences, read and decoded in pieces of every size: the
    rows are those of one read and one decode a window."""
    import numpy as np
    from diff_fixtures import add_shard

    rng = np.random.default_rng(5)
    xa = {f"t.{k}": rng.standard_normal(5000).astype(dt) for k, dt in enumerate((np.float32, np.float16, np.float64))}
    xb = {k: v.copy() for k, v in xa.items()}
    for k, v in xb.items():
        v[rng.integers(0, v.size, 7)] += 0.5
        v[[11, 4000]] = np.nan
        v[2500] = np.inf
    xb["t.eq"] = xa["t.eq"] = rng.standard_normal(3000).astype(np.float32)
    a, b = shutil.copytree(tiny, tmp_path / "a"), shutil.copytree(tiny, tmp_path / "b")
    add_shard(a, "model-extra.safetensors", xa)
    add_shard(b, "model-extra.safetensors", xb)

    def rows():
        with open_view(a) as va, open_view(b) as vb:
            pairs = [(x, y) for x, y in shared_others(va, vb, Selection(None, None)) if x.name.startswith("t.")]
            return DV.compare_values(va, vb, pairs, atol=1e-3, rtol=0.0)

    monkeypatch.setattr(DV, "WINDOW_VALUES", 1024)
    whole = rows()
    assert {r.name: r.status for r in whole} == {"t.0": "differs", "t.1": "differs", "t.2": "differs", "t.eq": "equal"}
    for chunk, part in ((64, 7), (1000, 1 << 20), (4096, 3), (1 << 20, 1000)):
        monkeypatch.setattr(LocalFile, "chunk_bytes", chunk)
        monkeypatch.setattr(DV, "CHUNK_ELEMENTS", part)
        assert rows() == whole, (chunk, part)


def test_a_name_in_two_shards_is_compared_and_counted_as_its_first_occurrence(hc, tiny, tmp_path):
    """The first shard holding a name is the one read (the merged table's rule), whichever side's
    bytes differ: a change in the later copy is not seen, one in the first is."""
    def two_copies(dst, pokes_first=(), pokes_later=()):
        side(tiny, dst, [("x.dup", "BF16", [8])], pokes_first)  # model-extra: indexed, read first
        write_sparse_shard(dst / "model-late.safetensors", [("x.dup", "BF16", [16])], pokes_later)
        return dst

    a = two_copies(tmp_path / "a")
    code, got = rows(hc, a, two_copies(tmp_path / "b", pokes_later=[("x.dup", 1, b"\x40")]))
    assert (code, got["x.dup"]["status"]) == (0, "equal")
    code, got = rows(hc, a, two_copies(tmp_path / "c", pokes_first=[("x.dup", 1, b"\x40")]))
    assert (code, got["x.dup"]["status"], got["x.dup"]["max_abs"]) == (1, "differs", 2.0)
    doc = hc("diff", a, tmp_path / "c", "--values", "all", "--json").json()
    assert not doc["changed"]  # the first occurrence's shape ([8]) on both sides, not the later [16]
