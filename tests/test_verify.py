"""hc inspect --verify: every finding code on a damaged copy of a tiny checkpoint."""

import json
import math
import struct

import pytest

from ckpt_tools import copy, edit_index, read_entries, rewrite, shard_of, tiny, write_shard
from conftest import run_hc
from hccli.checkpoint.verify import CODES
from hccli.synth import INDEX_NAME

SEEN: set[str] = set()


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("v") / "tiny")


@pytest.fixture
def ck(base, tmp_path):
    return copy(base, tmp_path / "ck")


def findings(path, expect_exit=1):
    r = run_hc("inspect", path, "--verify", "--json")
    assert r.exit_code == expect_exit, (r.exit_code, r.stderr, r.stdout[-1500:])
    got = r.json()["findings"]
    SEEN.update(f["code"] for f in got)
    for f in got:
        assert f["severity"] in ("error", "warning", "info") and "\n" not in f["message"]
    return {f["code"]: f for f in got}


def test_clean(ck):
    assert findings(ck, 0) == {}


def test_unreadable_shard(ck):
    p = shard_of(ck, "layers.3.hc_attn_base")
    p.write_bytes(b"\xff" * 64)
    f = findings(ck)
    assert f["unreadable_shard"]["severity"] == "error" and p.name in f["unreadable_shard"]["message"]


def test_missing_shard(ck):
    p = shard_of(ck, "layers.3.hc_attn_base")
    p.unlink()
    assert p.name in findings(ck)["missing_shard"]["message"]


def test_partial_file(ck):
    (ck / "model-00001-of-00014.safetensors.partial").write_bytes(b"\0" * 8)
    assert "model-00001-of-00014.safetensors.partial" in findings(ck)["partial_file"]["message"]


@pytest.mark.parametrize("evil", ["../evil.safetensors", "/etc/passwd", "a/../../x.safetensors"])
def test_unsafe_shard_path(ck, evil):
    edit_index(ck, lambda d: d["weight_map"].__setitem__("layers.0.attn_norm.weight", evil))
    f = findings(ck)
    assert evil in f["unsafe_shard_path"]["message"]


def test_index_missing_tensor(ck):
    edit_index(ck, lambda d: d["weight_map"].__setitem__("layers.0.ghost", d["weight_map"]["embed.weight"]))
    assert "layers.0.ghost" in findings(ck)["index_missing_tensor"]["message"]


def test_unindexed_tensor(ck):
    edit_index(ck, lambda d: d["weight_map"].pop("layers.2.ffn_norm.weight"))
    assert "layers.2.ffn_norm.weight" in findings(ck)["unindexed_tensor"]["message"]


def test_wrong_shard(ck):
    def move(d):
        d["weight_map"]["layers.2.ffn_norm.weight"] = d["weight_map"]["embed.weight"]
    edit_index(ck, move)
    assert "layers.2.ffn_norm.weight" in findings(ck)["wrong_shard"]["message"]


def test_duplicate_tensor_and_unindexed_shard(ck):
    extra = ck / "model-extra.safetensors"
    write_shard(extra, [e for e in read_entries(shard_of(ck, "embed.weight")) if e[0] == "embed.weight"])
    f = findings(ck)
    assert "embed.weight" in f["duplicate_tensor"]["message"]
    assert f["unindexed_shard"]["severity"] == "warning" and "model-extra" in f["unindexed_shard"]["message"]


def test_total_size_mismatch(ck):
    edit_index(ck, lambda d: d["metadata"].__setitem__("total_size", d["metadata"]["total_size"] + 1))
    assert findings(ck)["total_size_mismatch"]["severity"] == "error"


def test_no_index_is_a_warning(ck):
    (ck / INDEX_NAME).unlink()
    f = findings(ck, 0)
    assert f["no_index"]["severity"] == "warning"


def test_hc_incomplete_and_missing_tensor(ck):
    rewrite(shard_of(ck, "layers.3.hc_ffn_fn"), drop={"layers.3.hc_ffn_fn"})
    f = findings(ck)
    assert "layers.3.hc_ffn_fn" in f["hc_incomplete"]["message"]
    assert "layers.3.hc_ffn_fn" in f["missing_tensor"]["message"]


def test_hc_shape(ck):
    rewrite(shard_of(ck, "layers.4.hc_attn_scale"),
            replace={"layers.4.hc_attn_scale": ("F32", (4,), struct.pack("<4f", 1, 1, 1, 1))})
    f = findings(ck)
    assert "layers.4" in f["hc_shape"]["message"]
    assert "layers.4.hc_attn_scale" in f["wrong_shape"]["message"]


def test_hc_shapes_disagree_with_hc_mult(ck):
    cfg = json.loads((ck / "config.json").read_text())
    cfg["hc_mult"] = 2
    (ck / "config.json").write_text(json.dumps(cfg))
    assert "hc_mult" in findings(ck)["hc_shape"]["message"]


def test_hc_dtype(ck):
    rewrite(shard_of(ck, "layers.4.hc_attn_base"),
            replace={"layers.4.hc_attn_base": ("BF16", (24,), b"\x80\x3f" * 24)})
    f = findings(ck)
    assert "hc_dtype" in f and "wrong_dtype" in f


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_hc_nonfinite(ck, value):
    p = shard_of(ck, "layers.5.hc_ffn_base")
    rewrite(p, replace={"layers.5.hc_ffn_base": ("F32", (24,), struct.pack("<24f", *([0.0] * 23 + [value])))})
    f = findings(ck)
    assert "layers.5.hc_ffn_base" in f["hc_nonfinite"]["message"] and "1 NaN/Inf" in f["hc_nonfinite"]["message"]


def test_config_unreadable(ck):
    (ck / "config.json").write_text("{broken")
    f = findings(ck, 0)
    assert f["config_unreadable"]["severity"] == "warning"


def test_unexpected_wrong_shape_wrong_dtype(ck):
    p = shard_of(ck, "layers.1.attn_norm.weight")
    rewrite(p, replace={
        "layers.1.attn_norm.weight": ("BF16", (65,), b"\x00\x00" * 65),
        "layers.1.attn.attn_sink": ("BF16", (4,), b"\x00\x00" * 4),
    }, add=[("layers.1.surprise", "F32", (1,), b"\x00" * 4)])
    f = findings(ck)
    assert "layers.1.attn_norm.weight" in f["wrong_shape"]["message"]
    assert "layers.1.attn.attn_sink" in f["wrong_dtype"]["message"]
    assert "layers.1.surprise" in f["unexpected_tensor"]["message"]


def test_explicit_config_option(ck, tmp_path):
    (ck / "config.json").unlink()
    assert run_hc("inspect", ck, "--verify", "--json").json()["config"] is None
    from conftest import SAMPLES

    r = run_hc("inspect", ck, "--verify", "--config", SAMPLES / "tiny-v4.hf.json", "--json")
    assert r.exit_code == 1 and "missing_tensor" in {f["code"] for f in r.json()["findings"]}


def test_human_verify_output(ck):
    edit_index(ck, lambda d: d["metadata"].__setitem__("total_size", 1))
    r = run_hc("inspect", ck, "--verify")
    assert r.exit_code == 1 and "total_size_mismatch" in r.stdout and "1 errors" in r.stdout


def test_shard_placement_of_a_release(tmp_path):
    from conftest import SAMPLES

    from hccli.synth import make_checkpoint

    ck = make_checkpoint(SAMPLES / "deepseek-v4-flash.json", tmp_path / "flash", phantom=True).outdir
    last = "model-00046-of-00046.safetensors"
    (ck / last).rename(ck / "mtp.safetensors")
    edit_index(ck, lambda d: d["weight_map"].update({n: "mtp.safetensors" for n, f in d["weight_map"].items()
                                                      if f == last}))
    assert findings(ck, 0)["shard_placement"]["severity"] == "info"  # more in test_placement.py


def test_every_code_is_exercised():
    # runs last in this module: every finding code above was produced by a test
    assert SEEN >= set(CODES), set(CODES) - SEEN
