"""The one bounded JSON reader (hccli/base/bounded.py) as every reader of JSON meets it: a config, an
index, a hub listing from the cache. The same depth bound everywhere, one line, exit 2."""

import json

import pytest
from ckpt_tools import tiny
from conftest import SAMPLES, run_hc

from hccli.base.bounded import MAX_JSON_DEPTH, nests_deeper_than
from hccli.base.vocab import INDEX_NAME


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def one_error(r, *words):
    assert r.exit_code == 2, (r.exit_code, r.stdout[-500:], r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), r.stderr


@pytest.mark.parametrize("text, deeper", [
    ("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, False),
    ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), True),
    ('{"a": "' + "[" * 500 + '"}', False),  # brackets inside a string do not nest
    ("[" + "[]," * 5000 + "[]]", False),
    ('{"a":' * 200 + "1" + "}" * 200, True),
])
def test_depth_is_counted_outside_strings(text, deeper):
    assert nests_deeper_than(text) is deeper


def test_a_config_nested_past_the_bound_is_refused_though_the_key_is_unknown(tmp_path):
    cfg = json.loads((SAMPLES / "tiny-v4.1.json").read_text())
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({**cfg, "notes": _nested(MAX_JSON_DEPTH - 1)}))
    assert run_hc("count-params", ok, "--json").exit_code == 0
    deep = tmp_path / "deep.json"
    deep.write_text(json.dumps({**cfg, "notes": _nested(MAX_JSON_DEPTH)}))
    one_error(run_hc("count-params", deep), "deep.json", f"nested deeper than {MAX_JSON_DEPTH} levels")


def test_an_index_whose_metadata_nests_past_the_bound_is_refused(tmp_path):
    ck = tiny(tmp_path / "ck")
    doc = json.loads((ck / INDEX_NAME).read_text())
    doc["metadata"]["notes"] = _nested(MAX_JSON_DEPTH)
    (ck / INDEX_NAME).write_text(json.dumps(doc))
    one_error(run_hc("inspect", ck, "--json"), INDEX_NAME, f"nested deeper than {MAX_JSON_DEPTH} levels")


def test_a_cached_hub_listing_nested_too_deeply_is_a_damaged_cache(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    from hccli.checkpoint.remote.cache import Cache

    endpoint = "http://127.0.0.1:9"  # never asked: offline, the listing comes from the cache
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cache = Cache(endpoint, "org/x")
    cache.put(cache.ref_path("main"), {"revision": "main"}, b"[" * 100_000 + b"]" * 100_000)
    one_error(run_hc("inspect", "hf://org/x"), "org/x", "the cached listing is damaged")
