"""hc make-checkpoint: tiny checkpoints with values, full-scale phantoms."""

import json

import numpy as np
import pytest
from safetensors import safe_open

from ckpt_tools import tiny
from conftest import SAMPLES, run_hc
from hccli.model.config.model import load_config
from hccli.model.inventory import build_inventory
from hccli.checkpoint.synth import INDEX_NAME, plan_shards


def test_tiny_has_every_inventory_tensor_readable_by_safetensors(tmp_path):
    ck = tiny(tmp_path / "t")
    inv = build_inventory(load_config(SAMPLES / "tiny-v4.1.json")).by_name()
    index = json.loads((ck / INDEX_NAME).read_text())
    assert set(index["weight_map"]) == set(inv)
    seen = {}
    for shard in sorted(set(index["weight_map"].values())):
        with safe_open(str(ck / shard), framework="pt") as f:  # the reference reader accepts our files
            for k in f.keys():
                t = f.get_tensor(k)
                seen[k] = tuple(t.shape)
    assert seen == {n: t.shape for n, t in inv.items()}
    assert index["metadata"]["total_size"] == sum(t.nbytes for t in inv.values())
    assert (ck / "config.json").read_bytes() == (SAMPLES / "tiny-v4.1.json").read_bytes()


def test_tiny_values_are_finite_and_realistic(tmp_path):
    ck = tiny(tmp_path / "t")
    index = json.loads((ck / INDEX_NAME).read_text())["weight_map"]
    with safe_open(str(ck / index["layers.3.hc_attn_base"]), framework="numpy") as f:
        base = f.get_tensor("layers.3.hc_attn_base")
        scale = f.get_tensor("layers.3.hc_attn_scale")
    assert base.dtype == np.float32 and np.isfinite(base).all() and (scale > 0).all()
    comb = base[8:].reshape(4, 4)
    assert np.diag(comb).mean() > comb[~np.eye(4, dtype=bool)].mean() + 1  # non-trivial comb


def test_v41_shards_in_release_order(tmp_path):
    # the placement rules of every release are pinned in test_layouts.py; here the shape of the plan
    inv = build_inventory(load_config(SAMPLES / "deepseek-v4.1-flash.json"))
    shards = plan_shards(inv)
    assert len(shards) == 48 and [s.file for s in shards][:1] == ["model-00001-of-00048.safetensors"]
    assert {t.scope for t in shards[0].tensors} == {"vision"}
    assert [t.name for t in shards[1].tensors] == ["embed.weight"]
    # each Engram table on a shard of its own, after everything else
    assert [{t.name for t in s.tensors} for s in shards[-2:]] == [
        {f"layers.{i}.engram.embed.weight", f"layers.{i}.engram.embed.scale"} for i in (1, 14)]
    layer_order = [s.tensors[0].layer for s in shards[2:-2] if s.tensors[0].layer is not None]
    assert layer_order == sorted(layer_order)


def test_phantom_is_sparse_and_reads_back(phantoms):
    out, doc = phantoms("deepseek-v4.1-flash")
    assert doc["shards"] == 48 and doc["total_size"] > 500e9
    used = sum(f.stat().st_blocks * 512 for f in out.iterdir())
    assert used < 64e6, used  # 510 GB apparent, a few MB on disk


def test_the_tests_copy_of_a_phantom_keeps_its_holes_and_bytes(phantoms, tmp_path):
    # tests that damage a phantom work on ckpt_tools.copy of the shared one
    from ckpt_tools import copy

    out, _ = phantoms("deepseek-v4-flash")
    dup = copy(out, tmp_path / "dup")
    assert sorted(p.name for p in dup.iterdir()) == sorted(p.name for p in out.iterdir())
    assert sum(f.stat().st_blocks * 512 for f in dup.iterdir()) < 64e6
    for f in sorted(out.iterdir()):
        g = dup / f.name
        assert g.stat().st_size == f.stat().st_size, f.name
        with f.open("rb") as a, g.open("rb") as b:  # the header and the small F32 values up front
            assert a.read(4 << 20) == b.read(4 << 20), f.name


def test_refuses_non_empty_outdir_without_force(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = run_hc("make-checkpoint", SAMPLES / "tiny-v4.1.json", out)
    assert r.exit_code == 2 and "not empty" in r.stderr
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    # --force replaces a checkpoint, never a directory holding anything else
    r = run_hc("make-checkpoint", SAMPLES / "tiny-v4.1.json", out, "--force")
    assert r.exit_code == 2 and "'keep.txt'" in r.stderr and "\n" not in r.stderr.strip()
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_force_replaces_a_checkpoint_whole(tmp_path):
    out = tmp_path / "o"
    assert run_hc("make-checkpoint", SAMPLES / "tiny-v4.hf.json", out).exit_code == 0
    (out / "model-00003-of-00010.safetensors.partial").write_text("left over")
    assert run_hc("make-checkpoint", SAMPLES / "tiny-v4.1.json", out, "--force").exit_code == 0
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == 16 and not any("of-00010" in n or n.endswith(".partial") for n in names)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]  # nothing left beside it
    assert (out / "config.json").read_bytes() == (SAMPLES / "tiny-v4.1.json").read_bytes()


def test_refuses_full_scale_values(tmp_path):
    r = run_hc("make-checkpoint", SAMPLES / "deepseek-v4-flash.json", tmp_path / "x")
    assert r.exit_code == 2 and "--phantom" in r.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("config", ["tiny-v4.hf.json", "tiny-v4.1.hf.json"])
def test_other_families(tmp_path, config):
    ck = tiny(tmp_path / "t", config)
    r = run_hc("inspect", ck, "--verify", "--json")
    assert r.exit_code == 0, r.stdout[-2000:]
    assert r.json()["findings"] == []
