"""--verify of a checkpoint in a published release's layout (a full-scale phantom of V4-Flash):
as published, nothing is found; each difference from the published form (header text, a tensor
moved, a shape, the index) is found, the findings those of the name-by-name checks, whatever the
short answers (checkpoint/verify/agree.py, placement._published_as_is) said."""

from __future__ import annotations

import json

import pytest
from ckpt_tools import copy, edit_index

from hccli.checkpoint.verify import agree, placement, checks as verify
from hccli.checkpoint.safetensors.header import read_header
from hccli.checkpoint.opening import open_checkpoint
from hccli.checkpoint.source import LocalFile
from hccli.model.inventory import build_inventory
from hccli.checkpoint.safetensors.layout import header_bytes, serializer_order


@pytest.fixture
def release(phantoms):
    return phantoms("deepseek-v4-flash")[0]


@pytest.fixture
def ck(release, tmp_path):
    return copy(release, tmp_path / "ck")


def per_name(monkeypatch, path):
    """The findings with every short answer turned off: the per-name paths alone."""
    with monkeypatch.context() as m:
        m.setattr(agree, "index_agrees", lambda *a: False)
        m.setattr(agree, "positions", lambda *a: None)
        m.setattr(placement, "_published_as_is", lambda *a: False)
        return verify.verify(open_checkpoint(path))


def fast_answers(path):
    """(index_agrees, inventory_agrees, _published_as_is)."""
    ckpt = open_checkpoint(path)
    inv = build_inventory(ckpt.config)
    return (agree.index_agrees(ckpt, ckpt.index.weight_map), agree.inventory_agrees(ckpt, inv.columns),
            placement._published_as_is(ckpt, inv, agree.positions(ckpt, inv.columns)))


def test_a_release_as_published_takes_every_short_answer_and_they_are_right(release, monkeypatch):
    assert fast_answers(release) == (True, True, True)
    assert verify.verify(open_checkpoint(release)) == [] == per_name(monkeypatch, release)


def test_two_tensors_swapped_in_the_index_are_told_apart(ck, monkeypatch):
    # every file keeps its count of names
    a = "layers.0.attn_norm.weight"
    wm = open_checkpoint(ck).index.weight_map
    b = next(n for n, f in wm.items() if f != wm[a])
    fa, fb = wm[a], wm[b]
    edit_index(ck, lambda d: d["weight_map"].update({a: fb, b: fa}))
    assert fast_answers(ck)[0] is False
    got = verify.verify(open_checkpoint(ck))
    assert got == per_name(monkeypatch, ck)
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
    (_indented, (True, True, False), {"shard_placement"}),
    (_escaped, (True, True, False), {"shard_placement"}),
    (_extra_padding, (True, True, False), {"shard_placement"}),
    (_metadata, (True, True, False), {"shard_placement"}),
    (_metadata_null, (True, True, False), {"shard_placement"}),
    (_unsorted, (True, True, False), {"shard_placement"}),  # its offsets, so its header, are no longer the same
    (_moved, (True, True, False), {"shard_placement"}),
    (_wrong_shape, (True, False, False), {"wrong_shape"}),
    (_index_extra, (False, True, True), {"index_missing_tensor"}),
    (_index_lacks, (False, True, True), {"unindexed_tensor"}),
    (_index_wrong_shard, (False, True, True), {"wrong_shard"}),
    (_duplicate, (False, False, False), {"duplicate_tensor", "shard_placement", "total_size_mismatch"}),
])
def test_each_difference_sends_verify_to_the_per_name_path(ck, monkeypatch, damage, expect, codes):
    damage(ck)
    assert fast_answers(ck) == expect
    got = verify.verify(open_checkpoint(ck))
    assert got == per_name(monkeypatch, ck)
    assert {f.code for f in got} == codes
