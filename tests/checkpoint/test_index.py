"""model.safetensors.index.json read: the bounded reader's verdict, whichever decoder takes the
document (msgspec's fast accept or json): the same Index, in the weight map's order, or the same
one-line error, for every document; an ordinary index takes the fast accept."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hccli.checkpoint import index
from hccli.base.errors import HcError

msgspec = pytest.importorskip("msgspec")


def _careful(raw: bytes, monkeypatch) -> object:
    with monkeypatch.context() as m:
        m.setattr(index, "_index_decoder", lambda *files: None)
        return _outcome(raw)


def _outcome(raw: bytes, shard_files: list[str] | None = None) -> object:
    try:
        idx = index.parse_index(raw, "idx.json", shard_files)
    except HcError as exc:
        return ("error", exc.message)
    # item order too: the shard plan follows the weight map's order
    return (list(idx.weight_map.items()), idx.total_size, json.dumps(idx.metadata))


def test_an_ordinary_index_takes_the_fast_path():
    raw = json.dumps({"metadata": {"total_size": 12}, "weight_map": {"a.weight": "s1", "b": "s2"}}).encode()
    assert index._parse_index_fast(raw, "x") == ({"a.weight": "s1", "b": "s2"}, {"total_size": 12})
    idx = index.parse_index(raw, "x")
    assert idx.total_size == 12 and idx.weight_map == {"a.weight": "s1", "b": "s2"}


@pytest.mark.parametrize("raw", [
    b'{"weight_map": {"a": "1", "a": "2", "b": "3"}, "metadata": {"total_size": 0}}',  # repeated key: last wins
    b'{"weight_map": {"a": "1"}, "weight_map": {"b": "2"}}',
    b'{"weight_map": {"a": 1}}',
    b'{"weight_map": {"a": null}}',
    b'{"weight_map": []}',
    b'{"metadata": {}}',
    b'[]',
    b'{"weight_map": {}, "metadata": "x"}',
    b'{"weight_map": {}, "metadata": 0}',
    b'{"weight_map": {}, "metadata": null}',
    b'{"weight_map": {}, "metadata": {"total_size": -1}}',
    b'{"weight_map": {}, "metadata": {"total_size": true}}',
    b'{"weight_map": {}, "metadata": {"total_size": 1.5}}',
    b'{"weight_map": {}, "metadata": {"total_size": 18446744073709551616}}',
    b'{"weight_map": {}, "metadata": {"total_size": 1' + b"0" * 40 + b'}}',
    b'{"weight_map": {}, "extra": 1' + b"0" * 40 + b'}',  # an unknown key's number is still checked
    b'{"weight_map": {}, "extra": NaN}',
    # an earlier metadata that the later one replaces is still read by the careful path
    b'{"weight_map": {}, "metadata": [1' + b"0" * 40 + b'], "metadata": null}',
    b'{"weight_map": {}, "metad\\u0061ta": [1' + b"0" * 40 + b'], "metadata": null}',
    b'{"weight_map": {"\\ud800": "s"}}',  # a lone surrogate: json takes it
    b'{"weight_map": {"\xc3\xa9\\u00e9": "s"}}',
    b'{"weight_map": {"a": "\xff"}}',
    b'\xef\xbb\xbf{"weight_map": {}}',
    b'{"weight_map": {}} x',
    b'{"weight_map": {}, "metadata": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    b"",
])
def test_fast_and_careful_paths_agree(raw, monkeypatch):
    careful = _careful(raw, monkeypatch)
    assert _outcome(raw) == careful
    assert _outcome(raw, ["1", "2", "s", "s1", "s2"]) == careful  # values checked against the files beside it


def test_values_among_the_shard_files_are_the_listings_strings():
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    raw = json.dumps({"metadata": {"total_size": 8}, "weight_map": {"a": files[0], "b": files[1],
                                                                    "c": files[0]}}).encode()
    idx = index.parse_index(raw, "x", files)
    assert idx.weight_map == {"a": files[0], "b": files[1], "c": files[0]} and idx.total_size == 8
    assert all(any(v is f for f in files) for v in idx.weight_map.values())
    # a shard missing from the listing: decoded the general way, the same map
    assert index.parse_index(raw, "x", files[:1]).weight_map == idx.weight_map


_names = st.text(st.characters(codec="utf-8"), max_size=8)
_values = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                    _names, st.lists(st.integers(), max_size=3), st.dictionaries(_names, _names, max_size=3))


@settings(max_examples=200, deadline=None)
@given(wm=st.dictionaries(_names, st.one_of(_names, _values), max_size=6),
       meta=st.one_of(_values, st.dictionaries(st.sampled_from(["total_size", "format", "x"]), _values, max_size=3)),
       extra=st.dictionaries(st.sampled_from(["weight_map", "metadata", "other"]), _values, max_size=2),
       dup=st.booleans())
def test_fast_and_careful_paths_agree_on_generated_indexes(wm, meta, extra, dup):
    body = json.dumps({"weight_map": wm, "metadata": meta})
    if extra:  # after the real keys: a repeated weight_map or metadata replaces them
        body = body[:-1] + ", " + json.dumps(extra)[1:]
    if dup and wm:  # a key written twice inside the weight map
        k, v = next(iter(wm.items()))
        body = body.replace('"weight_map": {', '"weight_map": {' + json.dumps(k) + ": " + json.dumps(v) + ", ", 1)
    raw = body.encode()
    with pytest.MonkeyPatch.context() as m:
        careful = _careful(raw, m)
    assert _outcome(raw) == careful
    files = sorted({v for v in wm.values() if isinstance(v, str)})
    assert _outcome(raw, files) == careful and _outcome(raw, files[1:]) == careful
