"""--verify names the root cause: a config of another model, an unreadable or missing shard is
one finding, and the findings it causes name it (`cause`) in --json and are counted under it
for people."""

import json
import re

import pytest

from ckpt_tools import copy, edit_index, rewrite, shard_of, tiny
from conftest import SAMPLES, run_hc
from hccli.checkpoint.verify.findings import MAX_FINDINGS_PER_CODE
from hccli.checkpoint.synth import make_checkpoint
from hccli.base.vocab import INDEX_NAME


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("causes") / "tiny")


@pytest.fixture
def ck(base, tmp_path):
    return copy(base, tmp_path / "ck")


def verify_json(*args):
    r = run_hc("inspect", *args, "--verify", "--json")
    assert r.exit_code == 1, (r.exit_code, r.stderr)
    doc = r.json()
    assert doc["verdict"] == "errors" and doc["exit_code"] == 1
    return doc["findings"], doc["verify_counts"]


def index_names(ck, shard: str) -> list[str]:
    return [n for n, f in json.loads((ck / INDEX_NAME).read_text())["weight_map"].items() if f == shard]


def follow_line(stdout: str) -> str:
    lines = [ln for ln in stdout.splitlines() if "(follow-ons)" in ln]
    assert len(lines) == 1, stdout[-3000:]
    return lines[0]


def test_another_models_config_is_one_finding_and_the_rest_follow(ck):
    fs, verdict = verify_json(ck, "--config", SAMPLES / "tiny-v4.hf.json")
    root, rest = fs[0], fs[1:]
    assert root["code"] == "config_mismatch" and root["cause"] is None
    assert {f["code"] for f in rest} >= {"missing_tensor", "unexpected_tensor"}
    assert all(f["cause"] == "config_mismatch" for f in rest), [f for f in rest if f["cause"] is None]
    assert verdict == {"errors": 1, "warnings": 0, "info": 0, "root_causes": 1, "follow_ons": len(rest)}
    human = run_hc("inspect", ck, "--verify", "--config", SAMPLES / "tiny-v4.hf.json")
    assert human.exit_code == 1
    assert f"verify: 1 error, 0 warnings; {len(rest):,} findings follow from 1 root cause" in human.stdout
    line = follow_line(human.stdout)
    missing = [f for f in rest if f["code"] == "missing_tensor"]
    first = missing[0]["message"].split("'")[1]
    assert f"{len(missing):,} missing_tensor (first: '{first}'" in line
    # the follow-ons are counted under their root, not listed one by one
    assert not re.search(r"│ missing_tensor +│", human.stdout)


def test_another_hc_mult_holds_the_hc_shapes_under_it(ck, tmp_path):
    cfg = json.loads((SAMPLES / "tiny-v4.1.json").read_text())
    cfg["hc_mult"] = 8
    other = tmp_path / "hc8.json"
    other.write_text(json.dumps(cfg))
    fs, verdict = verify_json(ck, "--config", other)
    assert fs[0]["code"] == "config_mismatch" and "the config has hc_mult 8, the checkpoint 4" in fs[0]["message"]
    shapes = [f for f in fs if f["code"] == "hc_shape"]
    assert shapes and all(f["cause"] == "config_mismatch" for f in shapes)
    assert verdict["errors"] == 1 and verdict["follow_ons"] == len(fs) - 1


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_gone_shard_says_what_it_held_and_its_tensors_follow(ck, damage):
    p = shard_of(ck, "layers.1.hc_attn_fn")
    if damage == "truncated":
        with open(p, "r+b") as f:
            f.truncate(1000)
    else:
        p.unlink()
    held = index_names(ck, p.name)
    fs, verdict = verify_json(ck)
    code = "unreadable_shard" if damage == "truncated" else "missing_shard"
    root = fs[0]
    assert root["code"] == code and root["id"] == f"{code}:{p.name}"
    assert f"the index places {len(held):,} tensors there" in root["message"]
    assert "layers.1 (attn, ffn)" in root["message"]
    follow = [f for f in fs if f["cause"] == root["id"]]
    assert {f["code"] for f in follow} == {"missing_tensor"} and len(follow) == len(held)
    assert sorted(f["message"].split("'")[1] for f in follow) == sorted(held)
    assert [f for f in fs if f["cause"] is None] == [root]
    assert verdict == {"errors": 1, "warnings": 0, "info": 0, "root_causes": 1, "follow_ons": len(held)}
    line = follow_line(run_hc("inspect", ck, "--verify").stdout)
    assert f"{len(held)} findings follow from it: {len(held)} missing_tensor (first: 'layers.1.hc_attn_fn'" in line


def test_without_an_index_the_one_unreadable_shard_is_the_cause(ck):
    p = shard_of(ck, "layers.1.hc_attn_fn")
    (ck / INDEX_NAME).unlink()
    with open(p, "r+b") as f:
        f.truncate(1000)
    fs, verdict = verify_json(ck)
    root = next(f for f in fs if f["code"] == "unreadable_shard")
    follow = [f for f in fs if f["cause"] == root["id"]]
    assert follow and {f["code"] for f in follow} == {"missing_tensor"}
    assert not any(f["code"] == "config_mismatch" for f in fs)  # 8 layers are seen: no other model
    assert verdict["follow_ons"] == len(follow)


def test_a_tensor_missing_beside_a_gone_shard_stands_on_its_own(ck):
    gone = shard_of(ck, "layers.1.hc_attn_fn")
    other = shard_of(ck, "layers.3.attn_norm.weight")
    assert gone != other
    rewrite(other, drop={"layers.3.attn_norm.weight"})
    edit_index(ck, lambda d: d["weight_map"].pop("layers.3.attn_norm.weight"))
    gone.unlink()
    fs, verdict = verify_json(ck)
    alone = [f for f in fs if f["cause"] is None and f["code"] == "missing_tensor"]
    assert [f["message"].split("'")[1] for f in alone] == ["layers.3.attn_norm.weight"]
    assert verdict["errors"] == 2 and verdict["root_causes"] == 1


@pytest.mark.parametrize("dropped", [("hc_head_fn", "hc_head_base", "hc_head_scale"),
                                     ("layers.5.hc_attn_fn", "layers.5.hc_attn_base", "layers.5.hc_attn_scale",
                                      "layers.5.hc_ffn_fn", "layers.5.hc_ffn_base", "layers.5.hc_ffn_scale")])
def test_tensors_dropped_from_a_model_are_not_another_model(tmp_path, dropped):
    # the V4 tiny without its head mix, or its last layer's HC: what is missing is listed, no config_mismatch
    ck = tiny(tmp_path / "v4", "tiny-v4.hf.json")
    for name in dropped:
        rewrite(shard_of(ck, name), drop={name})
    edit_index(ck, lambda d: [d["weight_map"].pop(n) for n in dropped])
    fs, verdict = verify_json(ck)
    assert not any(f["code"] == "config_mismatch" or f["cause"] for f in fs), fs[:3]
    assert verdict["root_causes"] == 0 and verdict["follow_ons"] == 0


@pytest.fixture(scope="module")
def phantom(tmp_path_factory):
    out = tmp_path_factory.mktemp("phantom") / "v41"
    make_checkpoint(SAMPLES / "deepseek-v4.1-flash.json", out, phantom=True)
    return out


def test_v41_flash_against_the_v4_pro_config(phantom):
    # once: "verify: 146803 errors, 1 warnings" and nothing said that they are different models
    fs, verdict = verify_json(phantom, "--config", SAMPLES / "deepseek-v4-pro.json")
    root = fs[0]
    assert root["code"] == "config_mismatch"
    assert "the config has 61 layers, the checkpoint 40" in root["message"]
    assert "the config has dim 7,168, the checkpoint 5,120" in root["message"]
    assert "the config has 1 stage, the checkpoint 3" in root["message"]
    assert all(f["cause"] == "config_mismatch" for f in fs[1:])
    assert verdict["errors"] == 1 and verdict["root_causes"] == 1 and verdict["follow_ons"] > 100_000
    # every finding is still there: per code its first MAX_FINDINGS_PER_CODE and one that counts the rest
    wrong = [f for f in fs if f["code"] == "wrong_shape"]
    assert len(wrong) == MAX_FINDINGS_PER_CODE + 1 and "more wrong_shape findings" in wrong[-1]["message"]


def test_a_full_scale_shard_gone_counts_all_its_tensors_under_it(tmp_path):
    # a V4.1-Flash shard holds ~2,000 tensors: past one code's list, the rest still counted under the shard
    phantom = tmp_path / "v41"
    make_checkpoint(SAMPLES / "deepseek-v4.1-flash.json", phantom, phantom=True)
    shard = "model-00010-of-00048.safetensors"
    held = index_names(phantom, shard)
    assert len(held) > MAX_FINDINGS_PER_CODE
    with open(phantom / shard, "r+b") as f:
        f.truncate(1000)
    fs, verdict = verify_json(phantom)
    root = fs[0]
    assert root["code"] == "unreadable_shard" and f"places {len(held):,} tensors" in root["message"]
    follow = [f for f in fs if f["cause"] == root["id"]]
    assert len(follow) == MAX_FINDINGS_PER_CODE + 1
    more = int(re.search(r"and ([\d,]+) more", follow[-1]["message"])[1].replace(",", ""))
    assert MAX_FINDINGS_PER_CODE + more == len(held) == verdict["follow_ons"]
    assert verdict["errors"] == 1


def test_layers_numbered_by_hc_names_read_each_name_once():
    # the names were one iterator walked twice (names, and whether each holds "hc"): every other
    # name was tested by its neighbour's "hc", and layers.3 here went uncounted
    from types import SimpleNamespace

    from hccli.names import dialects as D
    from hccli.checkpoint.hc import _layer_counts

    names = ["model.layers.0.hc_attn_fn", "model.norm.weight", "model.embed_tokens.weight", "model.layers.3.hc_attn_fn"]
    shard = SimpleNamespace(header=SimpleNamespace(names=names))
    assert _layer_counts([shard], None, D.TRANSFORMERS_SAVED, None) == (4, 0)
