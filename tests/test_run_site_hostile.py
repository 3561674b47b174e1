"""`hc run-site` on hostile input: a checkpoint's unusable config.json set aside (said on stderr
and in --json, the run made from the tensors), `--save` targets judged before the run (and
`--force` honoured by the write itself), and golden files past the bounds the readers hold.

Every file is made here: checkpoints by make-checkpoint, configs by json."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import SAMPLES

from hccli.synth import make_checkpoint

INF = json.loads((SAMPLES / "tiny-v4.1.json").read_text())
HOSTILE_MLX = {"group_size": 64, "bits": 4, "mode": "affine",
               "model.layers.0.attn.wq_a": {"bits": 10 ** 6, "group_size": 64}}

# name -> (the keys that spoil the config, the key the note names)
UNUSABLE = {
    "hc_mult 0": ({"hc_mult": 0}, "hc_mult"),
    "hc_mult a string": ({"hc_mult": "4"}, "hc_mult"),
    "n_layers 1e9": ({"n_layers": 1e9}, "n_layers"),
    "a hostile mlx quantization block": ({"quantization": HOSTILE_MLX}, "quantization.model.layers.0.attn.wq_a.bits"),
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny") / "ckpt"
    make_checkpoint(SAMPLES / "tiny-v4.1.json", d, seed=0)
    return d


@pytest.mark.parametrize("name", UNUSABLE)
def test_an_unusable_config_is_set_aside_and_said(hc, tiny, tmp_path, name):
    keys, key = UNUSABLE[name]
    ck = tmp_path / "ck"
    shutil.copytree(tiny, ck)
    (ck / "config.json").write_text(json.dumps({**INF, **keys}))
    r = hc("run-site", str(ck), "--layers", "0", "--tokens", "2", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    note = doc["config_note"]
    assert note["key"] == key and note["file"] == str(ck / "config.json"), note
    lines = r.stderr.strip().splitlines()
    assert lines == [f"warning: {note['line']}"], r.stderr
    assert f"key '{key}'" in note["line"]
    # the run is the checkpoint's own: its tensor shapes, the reference defaults
    assert doc["hc_mult"] == 4 and doc["sinkhorn_iters"] == 20 and doc["family"] == "v4.1"
    assert "tensor shapes" in doc["params_origin"] and [s["key"] for s in doc["sites"]] == ["0.attn", "0.ffn"]
    plain = hc("run-site", str(ck), "--layers", "0", "--tokens", "2")
    assert plain.exit_code == 0 and plain.stderr.strip().splitlines() == lines


def test_a_usable_config_has_no_note(hc, tiny):
    r = hc("run-site", str(tiny), "--layers", "0", "--tokens", "2", "--json")
    assert r.exit_code == 0 and r.json()["config_note"] is None and r.stderr == ""
