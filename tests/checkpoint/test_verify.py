"""hc inspect --verify: every finding code on a damaged copy of a tiny checkpoint."""

import functools
import json
import math
import struct

import pytest

from ckpt_tools import copy, edit_index, read_entries, rewrite, shard_of, tiny, write_shard
from conftest import run_hc, run_hc_process, write_sparse_shard
from hccli.checkpoint.verify.findings import CODES
from hccli.checkpoint.verify.checks import FN_READ_BUDGET
from hccli.base.vocab import INDEX_NAME

COVERED: dict[str, str] = {}  # finding code -> the test that must produce it (filled at import)
_seen: set[str] = set()  # codes the running test has produced so far


def covers(*codes):
    """Declare the codes a test produces; the test fails if one does not appear. At import,
    so that the completeness check below holds whichever tests run, in whatever order."""
    def mark(test):
        for code in codes:
            COVERED[code] = test.__name__

        @functools.wraps(test)
        def run(*args, **kwargs):
            _seen.clear()
            test(*args, **kwargs)
            assert set(codes) <= _seen, set(codes) - _seen
        return run
    return mark


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
    _seen.update(f["code"] for f in got)
    for f in got:
        assert f["severity"] in ("error", "warning", "info") and "\n" not in f["message"]
    return {f["code"]: f for f in got}


def test_clean(ck):
    assert findings(ck, 0) == {}


@covers("unreadable_shard")
def test_unreadable_shard(ck):
    p = shard_of(ck, "layers.3.hc_attn_base")
    p.write_bytes(b"\xff" * 64)
    f = findings(ck)
    assert f["unreadable_shard"]["severity"] == "error" and p.name in f["unreadable_shard"]["message"]


@covers("missing_shard")
def test_missing_shard(ck):
    p = shard_of(ck, "layers.3.hc_attn_base")
    p.unlink()
    assert p.name in findings(ck)["missing_shard"]["message"]


@covers("partial_file")
def test_partial_file(ck):
    (ck / "model-00001-of-00014.safetensors.partial").write_bytes(b"\0" * 8)
    assert "model-00001-of-00014.safetensors.partial" in findings(ck)["partial_file"]["message"]


@covers("unsafe_shard_path")
@pytest.mark.parametrize("evil", ["../evil.safetensors", "/etc/passwd", "a/../../x.safetensors"])
def test_unsafe_shard_path(ck, evil):
    edit_index(ck, lambda d: d["weight_map"].__setitem__("layers.0.attn_norm.weight", evil))
    f = findings(ck)
    assert evil in f["unsafe_shard_path"]["message"]


@covers("index_missing_tensor")
def test_index_missing_tensor(ck):
    edit_index(ck, lambda d: d["weight_map"].__setitem__("layers.0.ghost", d["weight_map"]["embed.weight"]))
    assert "layers.0.ghost" in findings(ck)["index_missing_tensor"]["message"]


@covers("unindexed_tensor")
def test_unindexed_tensor(ck):
    edit_index(ck, lambda d: d["weight_map"].pop("layers.2.ffn_norm.weight"))
    assert "layers.2.ffn_norm.weight" in findings(ck)["unindexed_tensor"]["message"]


@covers("wrong_shard")
def test_wrong_shard(ck):
    def move(d):
        d["weight_map"]["layers.2.ffn_norm.weight"] = d["weight_map"]["embed.weight"]
    edit_index(ck, move)
    assert "layers.2.ffn_norm.weight" in findings(ck)["wrong_shard"]["message"]


@covers("duplicate_tensor", "unindexed_shard")
def test_duplicate_tensor_and_unindexed_shard(ck):
    extra = ck / "model-extra.safetensors"
    write_shard(extra, [e for e in read_entries(shard_of(ck, "embed.weight")) if e[0] == "embed.weight"])
    f = findings(ck)
    assert "embed.weight" in f["duplicate_tensor"]["message"]
    assert f["unindexed_shard"]["severity"] == "warning" and "model-extra" in f["unindexed_shard"]["message"]


@covers("duplicate_spelling")
def test_second_spelling_of_a_tensor(ck):
    import numpy as np
    from diff_fixtures import add_shard

    name = "layers.2.hc_ffn_base"
    _, _, shape, raw = next(e for e in read_entries(shard_of(ck, name)) if e[0] == name)
    add_shard(ck, "model-decoy.safetensors", {"layers.02.hc_ffn_base": np.frombuffer(raw, "<f4").reshape(shape)})
    f = findings(ck)["duplicate_spelling"]
    assert f["severity"] == "error" and f"'{name}' and 'layers.02.hc_ffn_base' both spell '{name}'" in f["message"]


@covers("total_size_mismatch")
def test_total_size_mismatch(ck):
    edit_index(ck, lambda d: d["metadata"].__setitem__("total_size", d["metadata"]["total_size"] + 1))
    assert findings(ck)["total_size_mismatch"]["severity"] == "error"


@covers("no_index")
def test_no_index_is_a_warning(ck):
    (ck / INDEX_NAME).unlink()
    f = findings(ck, 0)
    assert f["no_index"]["severity"] == "warning"


@covers("hc_incomplete", "missing_tensor")
def test_hc_incomplete_and_missing_tensor(ck):
    rewrite(shard_of(ck, "layers.3.hc_ffn_fn"), drop={"layers.3.hc_ffn_fn"})
    f = findings(ck)
    assert "layers.3.hc_ffn_fn" in f["hc_incomplete"]["message"]
    assert "layers.3.hc_ffn_fn" in f["missing_tensor"]["message"]


@covers("hc_shape")
def test_hc_shape(ck):
    rewrite(shard_of(ck, "layers.4.hc_attn_scale"),
            replace={"layers.4.hc_attn_scale": ("F32", (4,), struct.pack("<4f", 1, 1, 1, 1))})
    f = findings(ck)
    assert "layers.4" in f["hc_shape"]["message"]
    assert "layers.4.hc_attn_scale" in f["wrong_shape"]["message"]


def test_hc_shapes_disagree_with_hc_mult(ck, tmp_path):
    # a config named by --config is held to as given (one beside it that says another hc_mult is
    # set aside: test_damage.py)
    cfg = json.loads((ck / "config.json").read_text())
    cfg["hc_mult"] = 2
    (tmp_path / "other.json").write_text(json.dumps(cfg))
    r = run_hc("inspect", ck, "--verify", "--json", "--config", tmp_path / "other.json")
    assert r.exit_code == 1
    f = {f["code"]: f for f in r.json()["findings"]}
    assert "hc_mult" in f["hc_shape"]["message"] and f["hc_shape"]["cause"] == "config_mismatch"


@covers("hc_dtype", "wrong_dtype")
def test_hc_dtype(ck):
    rewrite(shard_of(ck, "layers.4.hc_attn_base"),
            replace={"layers.4.hc_attn_base": ("BF16", (24,), b"\x80\x3f" * 24)})
    f = findings(ck)
    assert "hc_dtype" in f and "wrong_dtype" in f


@covers("hc_nonfinite")
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_hc_nonfinite(ck, value):
    p = shard_of(ck, "layers.5.hc_ffn_base")
    rewrite(p, replace={"layers.5.hc_ffn_base": ("F32", (24,), struct.pack("<24f", *([0.0] * 23 + [value])))})
    f = findings(ck)
    assert "layers.5.hc_ffn_base" in f["hc_nonfinite"]["message"] and "1 NaN/Inf" in f["hc_nonfinite"]["message"]


@covers("config_unreadable")
def test_config_unreadable(ck):
    (ck / "config.json").write_text("{broken")
    f = findings(ck, 0)
    assert f["config_unreadable"]["severity"] == "warning"


@covers("unexpected_tensor", "wrong_shape", "wrong_dtype")
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


@covers("config_mismatch")
def test_config_of_another_model(ck):
    # the V4.1 tiny (8 layers, 2 stages) against the V4 tiny's config (6 layers, 1 stage, a head mix)
    from conftest import SAMPLES

    r = run_hc("inspect", ck, "--verify", "--config", SAMPLES / "tiny-v4.hf.json", "--json")
    assert r.exit_code == 1
    got = r.json()["findings"]
    _seen.update(f["code"] for f in got)
    root = got[0]
    assert root["code"] == "config_mismatch" and root["severity"] == "error" and root["id"] == "config_mismatch"
    assert "the config has 6 layers, the checkpoint 8" in root["message"]
    assert "the config is V4 (a head mix), the checkpoint V4.1 (no head mix)" in root["message"]


def test_explicit_config_option(ck, tmp_path):
    (ck / "config.json").unlink()
    assert run_hc("inspect", ck, "--verify", "--json").json()["config"] is None
    from conftest import SAMPLES

    r = run_hc("inspect", ck, "--verify", "--config", SAMPLES / "tiny-v4.hf.json", "--json")
    assert r.exit_code == 1 and "missing_tensor" in {f["code"] for f in r.json()["findings"]}


def test_human_verify_output(ck):
    edit_index(ck, lambda d: d["metadata"].__setitem__("total_size", 1))
    r = run_hc("inspect", ck, "--verify")
    assert r.exit_code == 1 and "total_size_mismatch" in r.stdout and "verify: 1 error, 0 warnings" in r.stdout


@covers("shard_placement")
def test_shard_placement_of_a_release(tmp_path, phantoms):
    from ckpt_tools import copy

    ck = copy(phantoms("deepseek-v4-flash")[0], tmp_path / "flash")
    last = "model-00046-of-00046.safetensors"
    (ck / last).rename(ck / "mtp.safetensors")
    edit_index(ck, lambda d: d["weight_map"].update({n: "mtp.safetensors" for n, f in d["weight_map"].items()
                                                      if f == last}))
    assert findings(ck, 0)["shard_placement"]["severity"] == "info"  # more in test_placement.py


@covers("hc_quantised", "hc_reduced_precision")
def test_gguf_hc_stored_below_f32(tmp_path):
    from gguf_fixtures import hc_values, write_gguf

    got = findings(write_gguf(tmp_path / "m.gguf", hc_values(), types={"layers.2.hc_attn_fn": "Q4_0",
                                                                       "layers.3.hc_ffn_fn": "BF16"}))
    assert "Q4_0" in got["hc_quantised"]["message"] and "blk.2.hc_attn_fn.weight" in got["hc_quantised"]["message"]
    assert got["hc_reduced_precision"]["severity"] == "warning" and "BF16" in got["hc_reduced_precision"]["message"]


@covers("hc_missing_site")
def test_gguf_missing_site_by_block_count(tmp_path):
    from gguf_fixtures import hc_values, write_gguf

    values = {k: v for k, v in hc_values().items() if not k.startswith("layers.4.hc_ffn_")}
    got = findings(write_gguf(tmp_path / "m.gguf", values, types={}))
    assert set(got) == {"hc_missing_site"} and "blk.4.hc_ffn_fn.weight" in got["hc_missing_site"]["message"]


@covers("partial_inventory", "unmapped_tensor")
def test_gguf_partial_inventory_and_unmapped_names(tmp_path):
    import numpy as np
    from conftest import SAMPLES
    from gguf_fixtures import hc_values, write_gguf

    path = write_gguf(tmp_path / "m.gguf", hc_values(), types={},
                      extra={"blk.0.engram_table.weight": np.zeros((4, 8), np.float32)})
    r = run_hc("inspect", path, "--verify", "--json", "--config", SAMPLES / "tiny-v4.hf.json")
    got = {f["code"]: f for f in r.json()["findings"]}
    _seen.update(got)
    assert r.exit_code == 0 and set(got) == {"partial_inventory", "unmapped_tensor"}, got
    assert "blk.0.engram_table.weight" in got["unmapped_tensor"]["message"]


@covers("gguf_misaligned")
def test_gguf_data_offset_off_the_alignment(tmp_path):
    from gguf_fixtures import struct_gguf

    one, two = struct.pack("<3f", 1, 2, 3), struct.pack("<3f", 4, 5, 6)
    path = struct_gguf(tmp_path / "m.gguf", [("a.weight", (3,), 0, one), ("b.weight", (3,), 0, two)],
                       offsets=[0, 16])  # general.alignment is 32 where the metadata says none
    got = findings(path)
    assert "'b.weight'" in got["gguf_misaligned"]["message"] and "alignment 32" in got["gguf_misaligned"]["message"]


@covers("gguf_overlap")
def test_gguf_tensors_sharing_data_bytes(tmp_path):
    from gguf_fixtures import struct_gguf

    raw = struct.pack("<16f", *range(16))
    path = struct_gguf(tmp_path / "m.gguf", [("a.weight", (16,), 0, raw), ("b.weight", (8,), 0, raw[:32])],
                       offsets=[0, 32])  # b is a's second half
    message = findings(path)["gguf_overlap"]["message"]
    assert "'a.weight' and 'b.weight'" in message and "32 to 64" in message


@pytest.mark.parametrize("cols", [128, 16384, 0])
def test_gguf_fn_width_against_its_embedding_length(tmp_path, cols):
    import numpy as np
    from gguf_fixtures import hc_values, write_gguf

    values = hc_values()
    values["layers.2.hc_attn_fn"] = np.zeros((24, cols), np.float32)  # hc 4 x embedding_length 64 is 256
    message = findings(write_gguf(tmp_path / "m.gguf", values, types={}))["hc_shape"]["message"]
    assert message.startswith("layers.2 attn: fn has") and (cols == 0 or "embedding_length 64" in message)


def test_gguf_hc_shapes_against_its_hyper_connection_count(tmp_path):
    import numpy as np
    from gguf_fixtures import hc_values, write_gguf

    values = hc_values()
    values.update({"layers.1.hc_ffn_fn": np.zeros((8, 2 * 64), np.float32),  # hc 2; the metadata says 4
                   "layers.1.hc_ffn_base": np.zeros(8, np.float32)})
    message = findings(write_gguf(tmp_path / "m.gguf", values, types={}))["hc_shape"]["message"]
    assert message == ("layers.1 ffn: shapes imply hc_mult 2; the GGUF metadata's deepseek4.hyper_connection.count "
                       "says 4")


@covers("dropped_by_producer")
def test_what_transformers_leaves_out_is_information(tmp_path):
    from diff_fixtures import edit_copy
    from transformers_fixtures import save_tiny_model

    save = save_tiny_model(tmp_path / "tf")[1]
    got = findings(save, 0)
    assert got["dropped_by_producer"]["severity"] == "info" and "stages" in got["dropped_by_producer"]["message"]
    # a hash-routing table is a buffer: a save without it is told so, not given a missing tensor
    bad = edit_copy(save, tmp_path / "bad", lambda t: t.pop("model.layers.0.ffn.gate.tid2eid"))
    r = run_hc("inspect", bad, "--verify", "--json")
    said = [(f["code"], f["message"]) for f in r.json()["findings"]]
    assert r.exit_code == 0 and [c for c, _ in said] == ["dropped_by_producer"] * 2, said
    assert "tid2eid), and this save has none of the 1 (first: 'layers.0.ffn.gate.tid2eid')" in said[1][1]


@covers("wrong_packing")
def test_packed_weight_narrower_than_the_config_implies(tmp_path):
    from ct_fixtures import save_compressed
    from diff_fixtures import edit_copy

    name = "model.layers.0.attn.wq_a.weight_packed"

    def narrow(t):
        d, s, b = t[name]
        t[name] = (d, (s[0], s[1] - 1), b[: s[0] * (s[1] - 1) * 4])

    bad = edit_copy(save_compressed(tmp_path / "ct")[1], tmp_path / "bad", narrow)
    got = findings(bad, 0)  # best effort outside HC in the V4 family: a warning
    assert got["wrong_packing"]["severity"] == "warning" and name in got["wrong_packing"]["message"]


def test_every_code_has_a_test():
    assert set(COVERED) == set(CODES), set(CODES) ^ set(COVERED)


def _hc_site(owner: str, hc: int, cols: int) -> list:
    n = (2 + hc) * hc
    return [(f"{owner}.hc_attn_fn", "F32", (n, cols)), (f"{owner}.hc_attn_base", "F32", (n,)),
            (f"{owner}.hc_attn_scale", "F32", (3,))]


@covers("hc_unchecked")
def test_fn_past_the_read_budget_is_not_read(tmp_path):
    # hc 4 and a 1.6 TB fn of holes: a claim that reading would take an hour to refute
    f = write_sparse_shard(tmp_path / "m.safetensors", _hc_site("layers.0", 4, 4 << 30))
    proc, seconds, peak = run_hc_process("inspect", f, "--verify", "--json")
    assert proc.returncode == 0, proc.stderr  # a warning
    got = {x["code"]: x for x in json.loads(proc.stdout)["findings"]}
    _seen.update(got)
    message = got["hc_unchecked"]["message"]
    assert "layers.0.hc_attn_fn" in message and f"{FN_READ_BUDGET:,}" in message
    assert seconds < 30 and peak < 300


def test_fn_is_read_in_chunks_to_its_last_value(tmp_path):
    # 300 MB of fn, one NaN in its last 4 bytes: found, without holding the tensor
    n, cols = 24, 3_200_000
    last = n * cols * 4 - 4
    f = write_sparse_shard(tmp_path / "m.safetensors", _hc_site("layers.0", 4, cols),
                           [("layers.0.hc_attn_fn", last, struct.pack("<f", math.nan))])
    proc, seconds, peak = run_hc_process("inspect", f, "--verify", "--json")
    assert proc.returncode == 1, proc.stderr
    found = [x for x in json.loads(proc.stdout)["findings"] if x["code"] == "hc_nonfinite"]
    assert len(found) == 1 and "layers.0.hc_attn_fn" in found[0]["message"] and "1 NaN/Inf" in found[0]["message"]
    assert peak < 200, peak  # the whole fn is 307 MB; np.array of it twice that


def test_hc_4096_shard_is_a_shape_finding_not_gigabytes(tmp_path):
    # a few KB on disk; base (2+4096)*4096 values and a 275 GB fn by its header
    f = write_sparse_shard(tmp_path / "m.safetensors", _hc_site("layers.0", 4096, 4096))
    assert f.stat().st_blocks * 512 < 1 << 20
    proc, seconds, peak = run_hc_process("inspect", f, "--verify", "--json")
    assert proc.returncode == 1, proc.stderr
    got = json.loads(proc.stdout)
    assert got["hc"] == []
    shape = [x["message"] for x in got["findings"] if x["code"] == "hc_shape"]
    assert shape and "hc_mult 4,096, past the bound of 64" in shape[0]
    assert not [x for x in got["findings"] if x["code"] == "hc_nonfinite"]
    assert seconds < 30 and peak < 300, (seconds, peak)


def test_json_has_every_finding_and_true_counts(ck):
    # 791 findings of one code once came back as 20 and a made-up "... and 771 more"
    dropped = []

    def drop(d):
        for name in list(d["weight_map"])[:300]:
            dropped.append(name)
            del d["weight_map"][name]
    edit_index(ck, drop)
    r = run_hc("inspect", ck, "--verify", "--json")
    assert r.exit_code == 1
    got = [f for f in r.json()["findings"] if f["code"] == "unindexed_tensor"]
    assert sorted(f["message"].split("'")[1] for f in got) == sorted(dropped)
    assert not any("more" in f["message"] for f in r.json()["findings"])
    human = run_hc("inspect", ck, "--verify").stdout
    errors = sum(1 for f in r.json()["findings"] if f["severity"] == "error")
    assert f"verify: {errors} errors" in human and "... and 280 more unindexed_tensor findings" in human


def test_an_empty_head_base_is_a_shape_finding(tmp_path):
    f = write_sparse_shard(tmp_path / "m.safetensors", [("hc_head_fn", "F32", (0, 8)), ("hc_head_base", "F32", (0,)),
                                                        ("hc_head_scale", "F32", (1,))])
    r = run_hc("inspect", f, "--verify", "--json")
    assert r.exit_code == 1, r.stderr  # once a ZeroDivisionError
    assert [x["message"] for x in r.json()["findings"] if x["code"] == "hc_shape"] == [
        "head head: base has no values; expected hc_mult of them"]
