"""Another model's config.json beside a checkpoint: every command sets it aside without
--verify, says so in one `warning:` line (the config_note line, naming the file and how the two
differ) and carries it as config_note and a config_mismatch finding in --json; it takes none of
the config's values. A config named by --config is used as given and the finding says how it
differs. A config of the same model whose HC tensors a gone shard took or a save dropped is
not another model: it is used.

The checkpoints are made by make-checkpoint's writer; the other model's config is a sample
config of another family."""

from __future__ import annotations

import json
import shutil

import pytest

from ckpt_tools import edit_index, shard_of, tiny
from conftest import SAMPLES, run_hc

from hccli.model.config.model import USED_INSTEAD

OTHER = SAMPLES / "tiny-v4.hf.json"  # V4 (a head mix), 6 layers; the checkpoint is the tiny V4.1: 8 layers
DIFFERS = "the config is V4 (a head mix), the checkpoint V4.1 (no head mix); the config has 6 layers, the checkpoint 8"


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("damage-config") / "tiny")


@pytest.fixture
def beside(release, tmp_path):
    ck = shutil.copytree(release, tmp_path / "ck")
    shutil.copy(OTHER, ck / "config.json")
    return ck


def warnings(r) -> list[str]:
    return [line for line in r.stderr.splitlines() if line.startswith("warning:")]


def set_aside(r, ck, count: int = 1) -> dict:
    """The command's one warning line per side, its note and its finding: (note, finding)."""
    assert r.exit_code == 0, r.stderr
    lines = warnings(r)
    assert len(lines) == count and all(line == lines[0] for line in lines), r.stderr
    line = lines[0].removeprefix("warning: ")
    assert line.startswith(f"config.json not used: {ck / 'config.json'}: ") and DIFFERS in line, line
    assert line.endswith(USED_INSTEAD)
    return line


def mismatch(findings, line):
    assert [f["code"] for f in findings] == ["config_mismatch"], findings
    f = findings[0]
    assert f["severity"] == "error" and line.startswith(f["message"]) and DIFFERS in f["message"]
    return f


def test_inspect_sets_it_aside_and_says_so(beside):
    line = set_aside(run_hc("inspect", beside), beside)
    r = run_hc("inspect", beside, "--json")
    assert set_aside(r, beside) == line
    doc = r.json()
    assert doc["config"] is None and doc["config_note"]["line"] == line and doc["config_note"]["key"] == ""
    mismatch(doc["findings"], line)
    assert doc["layer_numbering"]["n_layers"] == 8  # the checkpoint's own numbering, not the config's 6
    assert "(directory, config.json not used)" in run_hc("inspect", beside).stdout


def test_verify_exits_1_with_the_one_finding(beside):
    r = run_hc("inspect", beside, "--verify", "--json")
    assert r.exit_code == 1
    codes = [f["code"] for f in r.json()["findings"]]
    assert codes.count("config_mismatch") == 1 and "config_unreadable" not in codes, codes
    assert "missing_tensor" not in codes  # the inventory is not held to another model's config


def test_diff_sets_it_aside_on_each_side(beside):
    r = run_hc("diff", beside, beside, "--json")
    line = set_aside(r, beside, count=2)
    doc = r.json()
    assert doc["config_note_a"]["line"] == line and doc["model"]["source_a"] == "tensor shapes"
    mismatch(doc["findings_a"], line)
    mismatch(doc["findings_b"], line)


def test_run_site_sets_it_aside(beside):
    r = run_hc("run-site", beside, "--layers", 0, "--tokens", 2, "--json")
    line = set_aside(r, beside)
    doc = r.json()
    assert doc["family"] == "v4.1" and doc["config_note"]["line"] == line
    mismatch(doc["findings"], line)
    set_aside(run_hc("run-site", beside, "--layers", 0, "--tokens", 2), beside)


def test_run_kernel_sets_it_aside(beside):
    pytest.importorskip("torch")
    r = run_hc("run-kernel", "--checkpoint", beside, "--layers", 1, "--json")
    line = set_aside(r, beside)
    doc = r.json()
    assert "config.json not used" in doc["params"]["origin"] and doc["config_note"]["line"] == line
    mismatch(doc["findings"], line)


def test_another_hc_mult_alone_is_another_model(release, tmp_path):
    ck = shutil.copytree(release, tmp_path / "ck")
    cfg = json.loads((ck / "config.json").read_text())
    (ck / "config.json").write_text(json.dumps({**cfg, "hc_mult": 8}))
    r = run_hc("inspect", ck, "--json")
    assert r.exit_code == 0 and r.json()["config"] is None
    assert "the config has hc_mult 8, the checkpoint 4" in r.json()["config_note"]["line"]


def test_a_named_config_is_used_as_given_and_said(release):
    r = run_hc("inspect", release, "--config", OTHER, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert doc["config"] == str(OTHER) and doc["config_note"] is None
    f = doc["findings"][0]
    assert f["code"] == "config_mismatch" and DIFFERS in f["message"] and str(OTHER) in f["message"]
    lines = warnings(r)
    assert len(lines) == 1 and DIFFERS in lines[0] and str(OTHER) in lines[0]
    v = run_hc("inspect", release, "--config", OTHER, "--verify", "--json")
    assert v.exit_code == 1 and [x for x in v.json()["findings"] if x["code"] == "config_mismatch"] == [f]


def test_the_same_model_short_of_a_shard_keeps_its_config(release, tmp_path):
    # the HC sites alone say 7 layers; the index says what the gone shard held: 8 (HC tensors
    # dropped from the names: test_verify_causes' test_tensors_dropped_from_a_model_are_not_another_model)
    ck = shutil.copytree(release, tmp_path / "ck")
    gone = shard_of(ck, "layers.7.hc_attn_fn")
    gone.unlink()
    r = run_hc("inspect", ck, "--json")
    assert r.exit_code == 0 and r.json()["config"] == str(ck / "config.json"), r.stderr
    assert [f["code"] for f in r.json()["findings"]] == ["missing_shard"]
    lines = warnings(r)
    assert len(lines) == 1 and gone.name in lines[0] and "not used" not in lines[0], r.stderr


def test_a_config_naming_stages_the_checkpoint_lacks_is_used_and_said(release, tmp_path):
    # its MTP stages stripped (shards and index entries): the model they were cut from, not another
    ck = shutil.copytree(release, tmp_path / "ck")
    stages = ("model-00012-of-00014.safetensors", "model-00013-of-00014.safetensors")
    for f in stages:
        (ck / f).unlink()

    def strip(doc):
        doc["weight_map"] = {n: f for n, f in doc["weight_map"].items() if f not in stages}
        doc["metadata"].pop("total_size", None)
    edit_index(ck, strip)
    r = run_hc("inspect", ck, "--json")
    assert r.exit_code == 0 and r.json()["config"] == str(ck / "config.json") and r.json()["config_note"] is None
    f = mismatch_kept(r.json()["findings"])
    assert "the config has 2 stages, the checkpoint 0" in f["message"]
    lines = warnings(r)
    assert len(lines) == 1 and "2 stages" in lines[0] and "not used" not in lines[0], r.stderr


def mismatch_kept(findings):
    assert [f["code"] for f in findings] == ["config_mismatch"], findings
    return findings[0]
