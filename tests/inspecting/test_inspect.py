"""hc inspect: totals, HC values, the tree, filters, bad input, read-only."""

import json
import os
import struct

import numpy as np
import pytest
from safetensors import safe_open

from ckpt_tools import copy, shard_of, snapshot, tiny, write_shard
from conftest import SAMPLES, run_hc, run_hc_process, write_sparse_shard
from hccli.base.vocab import INDEX_NAME


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("ck") / "tiny")


@pytest.fixture
def phantom(phantoms):
    return phantoms("deepseek-v4.1-flash")[0]


def test_phantom_totals_equal_count_params(phantom):
    r = run_hc("inspect", phantom, "--verify", "--json")
    assert r.exit_code == 0, r.stdout[-3000:]
    got = r.json()
    model = run_hc("count-params", SAMPLES / "deepseek-v4.1-flash.json", "--model", "--json").json()["model"]
    assert got["shards"] == 48
    assert got["tensors"] == model["tensors"]
    assert got["stored_bytes"] == model["stored_bytes"]
    assert got["logical_params"] == model["logical_params"]
    assert {k: v["bytes"] for k, v in got["dtypes"].items()} == {k: v["bytes"] for k, v in model["dtypes"].items()}
    assert got["findings"] == [] and got["verified"] is True
    hc = got["hc"]
    assert len(hc) == 2 * 43  # 40 layers + 3 stages, attn and ffn
    assert [e["layer"] for e in hc if e["stage"]] == [40, 40, 41, 41, 42, 42]


def test_tiny_hc_values_bit_exact(tiny_ckpt):
    doc = run_hc("inspect", tiny_ckpt, "--json").json()
    index = json.loads((tiny_ckpt / INDEX_NAME).read_text())["weight_map"]
    assert len(doc["hc"]) == 2 * 10
    for e in doc["hc"]:
        prefix = e["name"]
        for part in ("base", "scale"):
            name = f"{prefix}.hc_{e['site']}_{part}"
            with safe_open(str(tiny_ckpt / index[name]), framework="numpy") as f:
                want = f.get_tensor(name)
            got = np.array(e[part], dtype=np.float32)
            assert got.tobytes() == want.tobytes(), name  # exact float32 bits
        comb = np.array(e["comb_from_base"])
        assert np.allclose(comb.sum(0), 1, atol=1e-5) and np.allclose(comb.sum(1), 1, atol=1e-5)
        assert e["base_parts"]["comb"][0] == e["base"][8:12]


def test_comb_from_base_matches_float64_sinkhorn(tiny_ckpt):
    e = run_hc("inspect", tiny_ckpt, "--json").json()["hc"][5]
    b = np.array(e["base"], dtype=np.float64)
    comb = b[8:].reshape(4, 4)  # mixes = 0: comb = base
    comb = np.exp(comb - comb.max(1, keepdims=True))
    comb = comb / comb.sum(1, keepdims=True) + 1e-6
    comb = comb / (comb.sum(0, keepdims=True) + 1e-6)
    for _ in range(19):
        comb = comb / (comb.sum(1, keepdims=True) + 1e-6)
        comb = comb / (comb.sum(0, keepdims=True) + 1e-6)
    assert np.abs(np.array(e["comb_from_base"]) - comb).max() < 2e-6
    pre = 1 / (1 + np.exp(-b[:4])) + 1e-6
    assert np.abs(np.array(e["pre_from_base"]) - pre).max() < 2e-6


def test_v4_head_mix_numbered_last(tmp_path):
    ck = tiny(tmp_path / "v4", "tiny-v4.hf.json")
    hc = run_hc("inspect", ck, "--json").json()["hc"]
    heads = [(e["layer"], e["name"]) for e in hc if e["site"] == "head"]
    assert heads == [(7, "mtp.1"), (8, "head")]  # 6 layers + 2 stages; root head after them
    assert all(len(e["base"]) == 4 and len(e["scale"]) == 1 for e in hc if e["site"] == "head")


def test_human_output_and_tree(tiny_ckpt):
    r = run_hc("inspect", tiny_ckpt, "--tree")
    assert r.exit_code == 0
    out = r.stdout
    assert "layers.[0-7]" in out and "x8" in out
    assert "attn.compressor.wkv.weight" in out and "in 2,5" in out
    assert "ffn.experts.[0-7].w1.weight" in out
    assert "Hyper-connections" in out


def test_hc_layer_detail(tiny_ckpt):
    r = run_hc("inspect", tiny_ckpt, "--layers", "3", "--hc")
    assert r.exit_code == 0
    assert "comb matrix from the base alone" in r.stdout and "layers.3 (layer 3), attn site" in r.stdout
    assert "layers.4" not in r.stdout.split("Hyper")[-1]


@pytest.mark.parametrize("args, count, check", [
    (["--name", "*.hc_attn_base"], 10, lambda r: r["name"].endswith(".hc_attn_base")),
    (["--name", "layers.3.*", "--dtype", "f32"], 9, lambda r: r["dtype"] == "F32" and r["name"].startswith("layers.3.")),
    (["--layers", "2-3", "--name", "*.hc_*"], 12, lambda r: r["name"].split(".")[1] in ("2", "3")),
])
def test_tensor_filters(tiny_ckpt, args, count, check):
    rows = run_hc("inspect", tiny_ckpt, *args, "--json").json()["tensor_list"]
    assert len(rows) == count
    assert all(check(r) for r in rows)


def test_entry_points_index_and_single_file(tiny_ckpt):
    via_index = run_hc("inspect", tiny_ckpt / INDEX_NAME, "--json").json()
    assert via_index["tensors"] == 792 and via_index["kind"] == "index"
    one = shard_of(tiny_ckpt, "layers.3.hc_attn_base")
    single = run_hc("inspect", one, "--json").json()
    assert single["kind"] == "file" and single["shards"] == 1 and single["tensors"] < 792


def test_control_characters_escaped(tmp_path):
    f = tmp_path / "evil.safetensors"
    write_shard(f, [("evil\x1b[2J\nname", "F32", (1,), struct.pack("<f", 1.0))])
    r = run_hc("inspect", f, "--tensors")
    assert r.exit_code == 0
    assert "\x1b" not in r.stdout and "\\x1b" in r.stdout


@pytest.mark.parametrize("content, words", [
    (b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n", "LFS"),
    (b"<!DOCTYPE html><html><body>Not found</body></html>", "HTML"),
    (b"", "empty"),
])
def test_not_safetensors_single_file(tmp_path, content, words):
    f = tmp_path / "model.safetensors"
    f.write_bytes(content)
    r = run_hc("inspect", f)
    assert r.exit_code == 2 and words.lower() in r.stderr.lower() and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_unreadable_checkpoints_exit_2(tmp_path):
    assert run_hc("inspect", tmp_path / "nothing").exit_code == 2
    (tmp_path / "empty").mkdir()
    r = run_hc("inspect", tmp_path / "empty")
    assert r.exit_code == 2 and "no model.safetensors.index.json" in r.stderr
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / INDEX_NAME).write_text("{oops")
    r = run_hc("inspect", bad)
    assert r.exit_code == 2 and "not valid JSON" in r.stderr


def test_layer_filter_out_of_range(tiny_ckpt):
    r = run_hc("inspect", tiny_ckpt, "--layers", "40")
    assert r.exit_code == 2 and "--layers 40: this model has layers 0-7" in r.stderr


def test_nothing_written_into_a_read_only_checkpoint(tiny_ckpt, tmp_path):
    ro = copy(tiny_ckpt, tmp_path / "ro")
    before = snapshot(ro)
    for p in [ro, *ro.iterdir()]:
        os.chmod(p, 0o555 if p.is_dir() else 0o444)
    try:
        for args in ([], ["--verify"], ["--json", "--verify"], ["--layers", "2", "--hc", "--tensors"]):
            r = run_hc("inspect", ro, *args)
            assert r.exit_code == 0, r.stderr
        assert snapshot(ro) == before  # same names, sizes, mtimes and contents; nothing new
    finally:
        for p in [ro, *ro.iterdir()]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)


@pytest.mark.parametrize("view", [[], ["--hc"]])
@pytest.mark.parametrize("spec, words", [("3,,5", "an empty item"), ("5-3", "runs backwards"),
                                         ("x", "'x' is not a layer"), ("1234567", "past any model")])
def test_layer_specs_are_checked_once_in_the_cli(tiny_ckpt, view, spec, words):
    r = run_hc("inspect", tiny_ckpt, "--layers", spec, *view)
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == r.stderr.strip().splitlines()[0] and "--layers" in r.stderr and words in r.stderr


def test_layer_past_the_checkpoint_names_its_layers(tmp_path):
    ck = tiny(tmp_path / "v4", "tiny-v4.hf.json")  # 6 layers, 2 stages, the root head mix
    r = run_hc("inspect", ck, "--layers", "10", "--hc")
    assert r.exit_code == 2 and "no hc_* tensors" not in r.stderr
    # the one out-of-range line of every command, quoting the option as typed (docs/CLI.md)
    assert r.stderr == "hc: error: --layers 10: this model has layers 0-5, mtp.0-mtp.1 (6-7) and head (8)\n"


@pytest.mark.parametrize("view", [[], ["--hc"]])
def test_v41_has_no_head_mix_number(tiny_ckpt, view):
    """V4.1 (8 layers, 2 stages) numbers 0-9: 10 would be a head mix it does not have; the line is
    diff's, worded by the one check both commands use."""
    r = run_hc("inspect", tiny_ckpt, "--layers", "10", *view)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == "hc: error: --layers 10: this model has layers 0-7 and mtp.0-mtp.1 (8-9); no head mix\n"
    assert run_hc("inspect", tiny_ckpt, "--layers", "9", *view, "--json").exit_code == 0


def test_hc_layer_without_sites_says_where_they_are(tiny_ckpt):
    one = shard_of(tiny_ckpt, "layers.3.hc_attn_base")  # this shard holds no HC site of layer 0
    have = sorted({e["layer"] for e in run_hc("inspect", one, "--json").json()["hc"]})
    assert have and 0 not in have
    r = run_hc("inspect", one, "--layers", "0", "--hc")
    assert r.exit_code == 2 and "no HC sites at layer 0" in r.stderr
    from hccli.model.layers import format_ranges

    assert f"this checkpoint has HC sites at layers {format_ranges(have)}" in r.stderr


def test_unknown_dtype_is_a_usage_error(tiny_ckpt):
    r = run_hc("inspect", tiny_ckpt, "--dtype", "F33")
    assert r.exit_code == 2 and "--dtype 'F33'" in r.stderr and "BF16" in r.stderr


def test_json_is_the_typed_rows_field_by_field(tiny_ckpt):
    from hccli.cli.output import to_jsonable
    from hccli.inspecting.hc import HcSplitEntry
    from hccli.inspecting.report import InspectRequest, build_inspect

    report = build_inspect(tiny_ckpt, InspectRequest(name_glob="*.hc_attn_base"))
    doc = run_hc("inspect", tiny_ckpt, "--name", "*.hc_attn_base", "--json").json()
    body = to_jsonable(report.document())
    assert {"findings": body.pop("findings"), **body} == {k: v for k, v in doc.items() if k not in (
        "schema_version", "command", "exit_code", "warnings")}  # the fields, after the envelope's keys
    assert list(doc)[-1] == "tensor_list" and "tensor_list" not in run_hc("inspect", tiny_ckpt, "--json").json()
    split = report.hc[0]
    assert isinstance(split, HcSplitEntry)
    assert list(doc["hc"][0]) == ["layer", "name", "site", "stage", "scale", "base", "base_parts", "pre_from_base",
                                  "post_from_base", "comb_from_base"]
    assert doc["tensor_list"][0]["shape"] == list(report.rows[0].shape)


def test_hc_4096_sparse_shard_inspects_in_little_memory(tmp_path):
    n = (2 + 4096) * 4096
    f = write_sparse_shard(tmp_path / "m.safetensors", [
        ("layers.0.hc_attn_fn", "F32", (n, 4096)), ("layers.0.hc_attn_base", "F32", (n,)),
        ("layers.0.hc_attn_scale", "F32", (3,))])
    proc, seconds, peak = run_hc_process("inspect", f, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hc"] == []  # a shape finding for --verify; nothing computed
    assert len(proc.stdout) < 100_000, len(proc.stdout)
    assert peak < 300, f"peak RSS {peak:.0f} MiB"  # once 6.7 GB
    assert seconds < 60, f"{seconds:.1f} s"


def test_base_scale_reader_refuses_a_header_past_the_hc_bound(tmp_path):
    from hccli.checkpoint.hc import read_base_scale
    from hccli.checkpoint.opening import open_checkpoint
    from hccli.base.errors import HcError

    n = (2 + 4096) * 4096
    f = write_sparse_shard(tmp_path / "m.safetensors", [("layers.0.hc_attn_base", "F32", (n,)),
                                                        ("layers.0.hc_attn_scale", "F32", (3,))])
    ckpt = open_checkpoint(f)
    (site,) = ckpt.hc_sites
    with pytest.raises(HcError) as exc:
        read_base_scale(ckpt, site)
    assert "'layers.0.hc_attn_base'" in str(exc.value) and "hc_mult at most 64" in str(exc.value)


def test_sites_without_values_are_not_called_absent(tmp_path):
    n = (2 + 4096) * 4096
    f = write_sparse_shard(tmp_path / "m.safetensors", [("layers.0.hc_attn_base", "F32", (n,)),
                                                        ("layers.0.hc_attn_scale", "F32", (3,))])
    out = run_hc("inspect", f).stdout
    assert "no hc_* tensors" not in out and "1 HC sites whose tensors yield no values" in out
