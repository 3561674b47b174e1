"""Work a forked child does beside `hc inspect` (checkpoint/beside.py): the index parsed while the
headers are read (shardset._index_beside) and the tree built while the report is made. Whatever
the child manages, the checkpoint, the report and every message are those of the work done here."""

from __future__ import annotations

import json
import os
import sys

import pytest
from ckpt_tools import edit_index, tiny
from conftest import SAMPLES

from hccli.checkpoint import beside, header_share, shardset
from hccli.checkpoint.shardset import open_checkpoint
from hccli.errors import HcError
from hccli.synth import make_checkpoint


@pytest.fixture
def forking(monkeypatch):
    """Forks allowed as in a fresh `hc` process (earlier tests may leave an idle server thread)."""
    monkeypatch.setattr(beside, "_can_fork", lambda: sys.platform.startswith("linux"))


@pytest.fixture
def ck(tmp_path):
    # 46 shards, data as holes (~1 s)
    return make_checkpoint(SAMPLES / "deepseek-v4-flash.json", tmp_path / "ck", phantom=True).outdir


def _forks(monkeypatch, kind=None) -> list[bool]:
    """Whether each child asked for was forked: the index's (header_share.Helper) by default."""
    kind = kind or header_share.Helper
    seen: list[bool] = []
    real = kind._start

    def start(self, *a):
        real(self, *a)
        seen.append(self.forked)

    monkeypatch.setattr(kind, "_start", start)
    return seen


def both(monkeypatch, path):
    """(checkpoint opened with the index beside, opened here alone, whether a child ran)."""
    with monkeypatch.context() as m:
        forks = _forks(m)
        split = open_checkpoint(path)
    with monkeypatch.context() as m:
        m.setattr(shardset, "SPLIT_MIN_SHARDS", 1 << 30)
        alone = open_checkpoint(path)
    return split, alone, forks == [True]


def same(a, b):
    assert (a.index, a.shards, a.unsafe, a.missing, a.partial, a.config) == \
           (b.index, b.shards, b.unsafe, b.missing, b.partial, b.config)


def test_the_index_beside_gives_the_same_checkpoint_and_parses_the_weight_map_only_when_asked(ck, monkeypatch,
                                                                                               forking):
    split, alone, forked = both(monkeypatch, ck)
    assert forked
    assert split.index._weight_map is None  # --json never needs it: this process did not parse it
    assert split.index.files == alone.index.files and split.index.total_size == alone.index.total_size
    same(split, alone)  # (compares the weight maps: parsed here on that first use)
    assert split.index.weight_map == alone.index.weight_map and len(split.index.weight_map) > 1000


def test_a_missing_shard_and_an_unindexed_file_come_out_the_same(ck, monkeypatch, forking):
    files = sorted(p.name for p in ck.glob("*.safetensors"))
    (ck / files[3]).unlink()
    (ck / "extra.safetensors").write_bytes((2).to_bytes(8, "little") + b"{}")  # no tensors, in no index
    split, alone, forked = both(monkeypatch, ck)
    assert forked
    same(split, alone)
    assert split.missing == [files[3]]
    assert [s.indexed for s in split.shards if s.file == "extra.safetensors"] == [False]


def test_a_shard_the_index_names_in_a_subfolder_is_read_too(ck, monkeypatch, forking):
    files = sorted(p.name for p in ck.glob("*.safetensors"))
    (ck / "sub").mkdir()
    (ck / files[5]).rename(ck / "sub" / files[5])
    edit_index(ck, lambda d: d["weight_map"].update(
        {n: f"sub/{files[5]}" for n, f in d["weight_map"].items() if f == files[5]}))
    split, alone, forked = both(monkeypatch, ck)
    assert forked
    same(split, alone)
    assert any(s.file == f"sub/{files[5]}" and s.header is not None for s in split.shards)


@pytest.mark.parametrize("text, words", [
    (b"{not json", "not valid JSON"),
    (b'{"weight_map": {"a": 3}}', "expected a shard file name"),
    (b'{"weight_map": {}, "metadata": {"total_size": -1}}', "total_size"),
])
def test_a_broken_index_is_the_same_error(ck, monkeypatch, forking, text, words):
    (ck / "model.safetensors.index.json").write_bytes(text)
    errors = []
    for limit in (8, 1 << 30):
        monkeypatch.setattr(shardset, "SPLIT_MIN_SHARDS", limit)
        with pytest.raises(HcError) as e:
            open_checkpoint(ck)
        errors.append(e.value.message)
    assert errors[0] == errors[1] and words in errors[0]


def test_a_child_that_fails_is_replaced_by_the_parse_here(ck, monkeypatch, forking):
    parent, real = os.getpid(), shardset.parse_index

    def parse(*a, **k):
        if os.getpid() != parent:
            raise RuntimeError("the child fails")
        return real(*a, **k)

    monkeypatch.setattr(shardset, "parse_index", parse)
    split, alone, forked = both(monkeypatch, ck)
    assert forked
    same(split, alone)


@pytest.mark.parametrize("digest", [{"model-00001-of-00046.safetensors": ["1", 2]}, [1, 2], {"f": [1]}, "x", 0])
def test_a_digest_of_the_wrong_form_is_not_believed(ck, monkeypatch, forking, digest):
    # what the child hands back is checked: of any other form, the summary is worked out here
    real = header_share.Helper.summary

    def summary(self):
        got = real(self)
        return [*got[:3], digest] if isinstance(got, list) and len(got) == 4 else got

    monkeypatch.setattr(header_share.Helper, "summary", summary)
    ckpt = open_checkpoint(ck, index_digest=True)
    assert ckpt.index.digest == shardset.name_digest(ckpt.index.weight_map) != digest


def test_the_digest_is_made_only_when_asked_for(ck, monkeypatch, forking):
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    if not sys.flags.hash_randomization:
        pytest.skip("this test process was started with PYTHONHASHSEED=0: no secret hash key")
    assert open_checkpoint(ck).index.digest is None  # inspect without --verify: the child's time goes to headers
    assert open_checkpoint(ck, index_digest=True).index.digest is not None


def test_the_digest_counts_and_sums_each_files_names(monkeypatch):
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    if not sys.flags.hash_randomization:
        pytest.skip("this test process was started with PYTHONHASHSEED=0: no secret hash key")
    wm = {"a": "f1", "b": "f2", "c": "f1"}
    assert shardset.name_digest(wm) == {"f1": [2, hash("a") + hash("c")], "f2": [1, hash("b")]}


def test_a_child_only_from_split_min_shards_on(tmp_path, monkeypatch, forking):
    many = tiny(tmp_path / "t")  # 14 shards
    files = sorted(p.name for p in many.glob("*.safetensors"))
    assert len(files) >= shardset.SPLIT_MIN_SHARDS
    few = tmp_path / "few"  # the first shards alone, under an index of theirs
    few.mkdir()
    keep = files[: shardset.SPLIT_MIN_SHARDS - 1]
    for f in keep:
        (few / f).write_bytes((many / f).read_bytes())
    doc = json.loads((many / "model.safetensors.index.json").read_text())
    doc["weight_map"] = {n: f for n, f in doc["weight_map"].items() if f in keep}
    doc["metadata"].pop("total_size", None)
    (few / "model.safetensors.index.json").write_text(json.dumps(doc))
    for path, want in ((few, []), (many, [True])):
        with monkeypatch.context() as m:
            forks = _forks(m)
            open_checkpoint(path)
        assert forks == want, path


# ---- the tree ---------------------------------------------------------------------------------


def test_the_tree_built_beside_is_the_tree_built_here(tmp_path, monkeypatch, forking):
    from hccli import inspect_report as R

    small = tiny(tmp_path / "t")
    monkeypatch.setattr(R, "TREE_BESIDE_MIN_TENSORS", 0)
    forks = _forks(monkeypatch, beside.Beside)
    report = R.build_inspect(small, tree=True)
    assert report.tree_job is not None and report.tree_job.forked and forks[-1]
    beside_tree = report.tree()
    assert beside_tree == R.build_inspect(small).tree()  # no job: built here
    assert beside_tree and any(n.children for n in beside_tree)


def test_an_error_after_the_tree_started_stops_its_child(tmp_path, monkeypatch, forking):
    from hccli import inspect_report as R

    small = tiny(tmp_path / "t")
    monkeypatch.setattr(R, "TREE_BESIDE_MIN_TENSORS", 0)
    pids = []
    real = beside.Beside._start

    def start(self):
        real(self)
        pids.append(self._pid)

    monkeypatch.setattr(beside.Beside, "_start", start)
    with pytest.raises(HcError, match="layer 999 for the HC sites is out of range"):
        R.build_inspect(small, tree=True, hc_layers=[999])
    assert pids and pids[-1] is not None
    with pytest.raises(ChildProcessError):
        os.waitpid(pids[-1], os.WNOHANG)  # killed and reaped


def test_the_rich_output_is_the_same_with_the_tree_beside(tmp_path):
    # `hc inspect` as users run it (a fresh process of one thread: the child runs), and without it
    import subprocess

    small = tiny(tmp_path / "t")
    outs = []
    for n in (0, 1 << 30):
        code = (f"import sys; import hccli.inspect_report as R; R.TREE_BESIDE_MIN_TENSORS = {n}; "
                "sys.argv = ['hc', 'inspect', sys.argv[1]]; import hccli.cli.app as app; app.main()")
        proc = subprocess.run([sys.executable, "-c", code, str(small)], capture_output=True, text=True, timeout=120,
                              cwd=str(SAMPLES.parent))
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout)
    assert outs[0] == outs[1] and "repeated layers collapsed" in outs[0]


def test_a_result_asked_twice_is_the_same_answer(forking, monkeypatch):
    monkeypatch.setattr(beside, "MIN_BYTES", 0)
    calls = []
    b = beside.Beside(lambda: calls.append(1) or {"x": 1}, worth=True, timeout_s=30)
    assert b.forked
    first = b.result()
    assert b.result() is first and first == {"x": 1} and calls == []  # computed in the child only


def test_hc_no_fork_keeps_every_step_in_this_process(monkeypatch):
    monkeypatch.setattr(beside.threading, "active_count", lambda: 1)  # as in a fresh `hc` process
    monkeypatch.delenv("HC_NO_FORK", raising=False)
    b = beside.Beside(lambda: 3, worth=True, timeout_s=30)
    assert b.forked == sys.platform.startswith("linux") and b.result() == 3
    monkeypatch.setenv("HC_NO_FORK", "1")
    b = beside.Beside(lambda: 4, worth=True, timeout_s=30)
    assert not b.forked and b.result() == 4


# ---- headers read from both ends (header_share.py) ---------------------------------------------


def _slow_here(monkeypatch, seconds=0.02):
    """This process reads each shard slowly (the child reads through store.header, unslowed), so
    that the child gets well into the shards from the end."""
    import time

    real = shardset._read_one

    def slow(*a):
        time.sleep(seconds)
        return real(*a)

    monkeypatch.setattr(shardset, "_read_one", slow)


def _taken(monkeypatch) -> list[int]:
    """The positions of the shards whose headers this process took from the child."""
    got: list[int] = []
    real = shardset._read_headers_shared

    def wrapped(store, names, progress, helper):
        out = real(store, names, progress, helper)
        got.extend(k for k, s in enumerate(out) if s.header is not None and helper.headers.get(k) is s.header)
        return out

    monkeypatch.setattr(shardset, "_read_headers_shared", wrapped)
    return got


def _alone(monkeypatch, path):
    with monkeypatch.context() as m:
        m.setattr(shardset, "SPLIT_MIN_SHARDS", 1 << 30)
        return open_checkpoint(path)


def test_shards_the_child_read_from_the_end_are_those_read_here(ck, monkeypatch, forking):
    ticks: list[tuple[int, int]] = []
    with monkeypatch.context() as m:
        _slow_here(m)
        taken = _taken(m)
        split = open_checkpoint(ck, progress=lambda done, n: ticks.append((done, n)))
    n = len(split.shards)
    assert taken and taken == list(range(taken[0], n))  # the last shards, from the child
    same(split, _alone(monkeypatch, ck))  # every header equal, entry for entry
    assert ticks[0] == (0, n) and ticks[-1] == (n, n) and [d for d, _ in ticks] == sorted(d for d, _ in ticks)


def test_a_shard_the_child_cannot_send_is_read_here(ck, monkeypatch, forking):
    files = sorted(p.name for p in ck.glob("*.safetensors"))
    (ck / files[-2]).write_bytes(b"\xff" * 64)  # not a header: the child passes it (S), this process words it
    with monkeypatch.context() as m:
        _slow_here(m)
        taken = _taken(m)
        split = open_checkpoint(ck)
    alone = _alone(monkeypatch, ck)
    same(split, alone)
    assert len(files) - 1 in taken and len(files) - 2 not in taken, taken
    assert split.shards[-2].header is None and split.shards[-2].error == alone.shards[-2].error


@pytest.mark.parametrize("child", ["garbage frames", "gone after the index"])
def test_a_child_that_sends_nothing_usable_leaves_every_shard_to_this_process(ck, monkeypatch, forking, child):
    with monkeypatch.context() as m:
        _slow_here(m, 0.005)
        if child == "garbage frames":
            m.setattr(header_share, "encode_header", lambda k, h: b"\x01" * 40)
        else:
            m.setattr(shardset, "_child_work", lambda send, summary, store, others:
                      send(b"I", json.dumps(summary()).encode()))
        taken = _taken(m)
        split = open_checkpoint(ck)
    assert taken == []
    same(split, _alone(monkeypatch, ck))


def test_a_header_travels_whole_and_a_broken_frame_is_refused(tmp_path):
    from hccli.checkpoint.header import parse_header

    entries = {"ünïcode.weight": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},
               "empty": {"dtype": "F32", "shape": [0, 4], "data_offsets": [12, 12]},
               "layers.0.hc_attn_base": {"dtype": "F32", "shape": [24], "data_offsets": [12, 108]}}
    body = json.dumps({"__metadata__": {"format": "pt", "x": "ÿ"}, **entries}).encode()
    body += b" " * (-len(body) % 8)
    prefix = len(body).to_bytes(8, "little") + body
    header = parse_header(prefix, len(prefix) + 108, "x.safetensors")
    assert type(header) is header_share.ColumnHeader
    payload = header_share.encode_header(7, header)
    k, back = header_share.decode_header(payload)
    assert k == 7 and back == header and back.metadata == header.metadata
    assert back.columns == header.columns and back.columns.dtypes[0] is header.columns.dtypes[0]
    for broken in (payload[:-1], payload[:30], payload[:16] + b"[" + payload[17:], b"", payload + b"\0x"):
        assert header_share.decode_header(broken) is None
    odd = header_share.ColumnHeader.of_columns("y", 8, 16, 16, None, header_share.Columns(["a\0b"], ["F32"], [(0,)], [0], [0]))
    assert header_share.encode_header(0, odd) is None  # the joiner inside a name: read here instead


def test_frames_for_shards_already_read_here_are_passed_over(monkeypatch):
    from hccli.checkpoint.header import parse_header

    body = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    body += b" " * (-len(body) % 8)
    header = parse_header(len(body).to_bytes(8, "little") + body, 16 + len(body), "x.safetensors")
    monkeypatch.setattr(beside, "_can_fork", lambda: False)
    helper = header_share.Helper(lambda send: None, timeout_s=1)  # no child: frames fed by hand
    decoded = []
    real = header_share.decode_header
    monkeypatch.setattr(header_share, "decode_header", lambda p: decoded.append(p) or real(p))
    for k in (5, 4, 1):
        payload = header_share.encode_header(k, header)
        helper._buf += header_share._FRAME.pack(b"H", len(payload)) + payload
    helper.poll(done=3)  # this process has read shards 0-2: the frame for 1 is not rebuilt
    assert sorted(helper.headers) == [4, 5] and len(decoded) == 2 and helper.low == 1
