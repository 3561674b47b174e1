"""--verify's shard_placement finding: info, only for a config of a published release."""

import json
import pytest

from ckpt_tools import copy, edit_index, tiny
from conftest import SAMPLES, run_hc
from hccli.checkpoint.safetensors.layout import header_bytes
from hccli.checkpoint.synth import INDEX_NAME


@pytest.fixture
def ck(tmp_path, phantoms):
    return copy(phantoms("deepseek-v4-flash")[0], tmp_path / "ck")


def verify(path):
    r = run_hc("inspect", path, "--verify", "--json")
    return r.exit_code, [f for f in r.json()["findings"] if f["code"] == "shard_placement"], r.json()["findings"]


def test_renamed_shards_are_information_not_errors(ck):
    last = "model-00046-of-00046.safetensors"
    (ck / last).rename(ck / "mtp.safetensors")
    edit_index(ck, lambda d: d["weight_map"].update(
        {n: "mtp.safetensors" for n, f in d["weight_map"].items() if f == last}))
    code, found, everything = verify(ck)
    assert code == 0, everything  # a re-sharded copy is legal
    assert len(found) == 1 and found[0]["severity"] == "info"
    msg = found[0]["message"]
    assert "DeepSeek-V4-Flash" in msg and "in mtp.safetensors, published in model-00046-of-00046" in msg
    moved = sum(1 for f in json.loads((ck / INDEX_NAME).read_text())["weight_map"].values() if f == "mtp.safetensors")
    assert moved > 1000 and f"{moved:,} tensors in another shard" in msg


def test_a_shard_of_another_size_is_named_with_both_sizes(ck):
    final = ck / "model-00045-of-00046.safetensors"
    with final.open("rb") as f:
        n = int.from_bytes(f.read(8), "little")
        doc = json.loads(f.read(n))
        entries = sorted(((k, v) for k, v in doc.items()), key=lambda kv: kv[1]["data_offsets"][0])
        f32_end = max(v["data_offsets"][1] for v in doc.values() if v["dtype"] == "F32")
        assert all(v["data_offsets"][1] <= f32_end for v in doc.values() if v["dtype"] == "F32")
        values = f.read(f32_end)  # the F32 head mix comes first; the rest (head, norm) is a hole
    # the same tensors and data, the header with a __metadata__ entry (as many writers add)
    head = header_bytes([(k, v["dtype"], tuple(v["shape"]), v["data_offsets"][1] - v["data_offsets"][0])
                         for k, v in entries], {"format": "pt"})
    published = final.stat().st_size
    with final.open("wb") as f:
        f.write(head + values)
        f.truncate(len(head) + published - 8 - n)
    code, found, everything = verify(ck)
    assert code == 0, everything
    assert len(found) == 1 and found[0]["severity"] == "info"
    got = final.stat().st_size
    assert f"is {got:,} bytes; the published DeepSeek-V4-Flash file is {published:,} bytes" in found[0]["message"]
    assert got - published == len(head) - 8 - n


def test_no_placement_finding_without_a_release(tmp_path):
    ck = tiny(tmp_path / "t")
    (ck / "model-00014-of-00014.safetensors").rename(ck / "x.safetensors")
    edit_index(ck, lambda d: d["weight_map"].update(
        {n: "x.safetensors" for n, f in d["weight_map"].items() if f == "model-00014-of-00014.safetensors"}))
    code, found, everything = verify(ck)
    assert code == 0 and found == [] and everything == []


def test_the_expected_header_size_is_that_of_the_serializers_header():
    # placement compares file sizes with a size it computes without writing the header out
    from types import SimpleNamespace

    from hccli.checkpoint.verify.placement import _header_size
    from hccli.model.config.model import load_config
    from hccli.model.inventory import build_inventory
    from hccli.checkpoint.synth import plan_shards, shard_header

    plans = plan_shards(build_inventory(load_config(SAMPLES / "deepseek-v4-flash.json")))
    spec = plans[0].tensors[0]
    odd = [SimpleNamespace(name=n, dtype=d, shape=s, nbytes=b) for n, d, s, b in [
        ('q"uote\\\\ü€\\n', "F32", (3, 1), 12), ("e", "BF16", (), 2), ("z", "I8", (0, 7), 0)]]
    for plan in [plans[0], plans[-1], SimpleNamespace(tensors=()), SimpleNamespace(tensors=(spec,)),
                 SimpleNamespace(tensors=tuple(odd))]:
        sizes = [t.nbytes for t in plan.tensors]
        want = len(header_bytes([(t.name, t.dtype, t.shape, t.nbytes) for t in plan.tensors]))
        assert _header_size(plan, sizes) == want
    assert _header_size(plans[0], [t.nbytes for t in plans[0].tensors]) == len(shard_header(plans[0]))
