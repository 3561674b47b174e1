"""Checkpoint.occurrences: every shard holding a name, in shard order (verify's duplicate,
unindexed and wrong-shard findings read it)."""

from __future__ import annotations

from ckpt_tools import write_shard

from hccli.checkpoint.opening import open_checkpoint


def test_occurrences_list_every_shard_of_a_name_in_order(tmp_path):
    f32 = b"\0" * 4
    write_shard(tmp_path / "a.safetensors", [("x", "F32", (1,), f32), ("only_a", "F32", (1,), f32)])
    write_shard(tmp_path / "b.safetensors", [("only_b", "F32", (1,), f32), ("y", "F32", (1,), f32)])
    write_shard(tmp_path / "c.safetensors", [("y", "F32", (1,), f32), ("x", "F32", (1,), f32)])
    ck = open_checkpoint(tmp_path)
    occ = {name: [s.file for s in shards] for name, shards in ck.occurrences().items()}
    assert occ == {"x": ["a.safetensors", "c.safetensors"], "only_a": ["a.safetensors"],
                   "only_b": ["b.safetensors"], "y": ["b.safetensors", "c.safetensors"]}
    assert {n: s.file for n, (s, _) in ck.tensors().items()} == {
        "x": "a.safetensors", "only_a": "a.safetensors", "only_b": "b.safetensors", "y": "b.safetensors"}
