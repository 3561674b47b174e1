"""A producer's quantisation block in config.json (hccli/model/config/quant.py): read into one record,
bounded, and a bad entry one line naming its key."""

from __future__ import annotations

import json

import pytest
from conftest import SAMPLES, run_hc

from hccli.model.config.model import load_config
from hccli.model.config.quant import MAX_QUANT_ENTRIES, MlxQuant


def _config(tmp_path, **root):
    cfg = json.loads((SAMPLES / "tiny-v4.1.hf.json").read_text())
    cfg.update(root)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path / "config.json"


def test_mlx_block_with_module_entries(tmp_path):
    q = {"group_size": 32, "bits": 8, "mode": "mxfp8", "lm_head": {"group_size": 64, "bits": 4, "mode": "affine"},
         "model.layers.0.self_attn.q_a_proj": False}
    got = load_config(_config(tmp_path, quantization=q)).quantisation
    assert got.kind == "mlx" and got.default == MlxQuant(8, 32, "mxfp8")
    assert got.per_path == (("lm_head", MlxQuant(4, 64, "affine")),)  # a module left as it was has no entry


def test_release_fp8_block_reads_as_mlx_lm_reads_it():
    got = load_config(SAMPLES / "tiny-v4.1.hf.json").quantisation
    assert got.kind == "fp8" and got.default == MlxQuant(8, 32, "mxfp8")
    assert load_config(SAMPLES / "tiny-v4.hf.json").quantisation is None  # a 128 block: mlx-lm dequantises it


@pytest.mark.parametrize("root, key, expected", [
    ({"quantization": {"group_size": 32, "bits": 99}}, "quantization.bits", "an integer 1..16"),
    ({"quantization": {"group_size": 32, "bits": 4, "mode": "int3"}}, "quantization.mode", "one of affine"),
    ({"quantization": {"group_size": 32, "bits": 4, "x": [1]}}, "quantization.x", "an object {bits"),
    ({"quantization_config": {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {
        "num_bits": 4, "group_size": 0}}}}}, "quantization_config.config_groups.g.weights.group_size", "an integer"),
])
def test_a_bad_entry_is_one_line_naming_its_key(tmp_path, root, key, expected):
    r = run_hc("count-params", _config(tmp_path, **root))
    assert r.exit_code == 2 and f"key '{key}': expected {expected}" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_entries_past_the_bound_are_refused_before_they_are_read(tmp_path):
    q = {"group_size": 64, "bits": 4, **{f"m{i}": {} for i in range(MAX_QUANT_ENTRIES + 1)}}
    r = run_hc("count-params", _config(tmp_path, quantization=q))
    assert r.exit_code == 2 and f"at most {MAX_QUANT_ENTRIES:,} module entries" in r.stderr
